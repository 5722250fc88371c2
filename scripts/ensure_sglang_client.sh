#!/usr/bin/env bash
# SGLang's benchmark client (`python -m sglang.bench_serving`) in its own virtual environment,
# for benchmarks/clients.py: a peer to compare specgate's load generator with, never a
# dependency of the project. No GPU: SGLang itself goes in without its dependencies
# (`--no-deps`, its engine's CUDA wheels are not wanted), then the modules that
# `import sglang.bench_serving` asks for. Its import reaches torchvision (a multimodal helper)
# and triton: torch 2.14.1 with torchvision 0.29.1 are the pair that import together (pip on
# Python 3.11 takes both from this machine's disk; PyPI's torchvision fails beside the CPU
# torch 2.13.0), and they bring triton.
#
# Idempotent: with the venv's stamp current it takes about a second; the first run several
# minutes (about 6 GB). Usage: scripts/ensure_sglang_client.sh
#
# Environment:
#   SPECGATE_SGLANG_CLIENT_VENV   the venv (default: <repo>/.cache/peer-sglang)
#   SPECGATE_SGLANG_PYTHON        the interpreter for the venv (default: python3)
set -euo pipefail

SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1
TORCHVISION_VERSION=0.29.1
# What `import sglang.bench_serving` needs beside SGLang itself (found by importing it).
MODULES=(psutil pillow starlette msgspec pyzmq IPython datasets apache-tvm-ffi sentencepiece
         compressed-tensors gguf pybase64 orjson aiohttp transformers tqdm requests numpy)

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGATE_SGLANG_CLIENT_VENV:-$ROOT/.cache/peer-sglang}
PYTHON=${SPECGATE_SGLANG_PYTHON:-python3}
STAMP=$VENV/.specgate-sglang-client
WANT_STAMP="sglang==$SGLANG_VERSION torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION ${MODULES[*]}"

say() { echo "ensure_sglang_client: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

mkdir -p "$VENV"
exec 9>"$VENV/.specgate-lock"
flock -w 1800 9 || die "another ensure_sglang_client.sh held $VENV/.specgate-lock for 1800s"

import_check() {
  "$VENV/bin/python" -c 'import sglang.bench_serving' >"$VENV/.specgate-import.log" 2>&1
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT_STAMP" ] && import_check; then
  exit 0
fi
command -v "$PYTHON" >/dev/null || die "no '$PYTHON' on PATH (set SPECGATE_SGLANG_PYTHON)"
rm -f "$STAMP"
say "installing SGLang $SGLANG_VERSION's client into $VENV (first time: a few minutes)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
# torch first and pinned, so nothing later pulls another build
"${PIP[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" >"$VENV/.specgate-install.log" 2>&1 || die "torch failed: see $VENV/.specgate-install.log"
"${PIP[@]}" --no-deps "sglang==$SGLANG_VERSION" >>"$VENV/.specgate-install.log" 2>&1 || die "sglang failed: see $VENV/.specgate-install.log"
"${PIP[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" "${MODULES[@]}" >>"$VENV/.specgate-install.log" 2>&1 \
  || die "its modules failed: see $VENV/.specgate-install.log"
import_check || die "import sglang.bench_serving fails: see $VENV/.specgate-import.log"
echo "$WANT_STAMP" >"$STAMP"
say "ready: $VENV"
