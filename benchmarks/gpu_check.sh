#!/usr/bin/env bash
# GPU clocks / power / throttling, idle vs under a load that is known to run, on a real
# NVIDIA machine.  Usage, from the repo root:
#
#   bash benchmarks/gpu_check.sh                       # torch matmuls on every visible GPU, ~20 s
#   bash benchmarks/gpu_check.sh --load-s 60           # any benchmarks/gpu_check.py option
#   bash benchmarks/gpu_check.sh --server http://127.0.0.1:30000   # load a running SGLang server instead
#   CUDA_VISIBLE_DEVICES=0,1 OUT=/tmp/gc bash benchmarks/gpu_check.sh
#
# Uses ./.venv when it has what is needed (nvidia-ml-py, numpy, matplotlib, requests),
# else creates $GPU_CHECK_VENV (default .venv-gpu-check) with --system-site-packages so a
# system-wide torch is seen; torch itself is never installed here (gigabytes): without it,
# use --server.  Writes summary.json, telemetry.csv, telemetry.png to $OUT (or
# benchmarks/results/gpu_check).  Exit status as benchmarks/gpu_check.py's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need='import pynvml, numpy, matplotlib, requests'
if [ -x .venv/bin/python ] && .venv/bin/python -c "$need" 2>/dev/null; then
    py=.venv/bin/python
else
    venv=${GPU_CHECK_VENV:-.venv-gpu-check}
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv --system-site-packages "$venv"
    fi
    py=$venv/bin/python
    if ! "$py" -c "$need" 2>/dev/null; then
        "$py" -m pip install -q "nvidia-ml-py>=12" "numpy>=1.26" "matplotlib>=3.7" "requests>=2.31" \
            || { echo "gpu_check: could not install nvidia-ml-py/numpy/matplotlib/requests into $venv" >&2; exit 1; }
    fi
fi
if "$py" -c 'import torch' 2>/dev/null; then
    echo "gpu_check: $("$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())')"
fi
exec "$py" benchmarks/gpu_check.py --out "${OUT:-benchmarks/results/gpu_check}" "$@"
