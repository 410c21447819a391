#!/usr/bin/env bash
# Create .venv and install gpuyantra with what it needs. Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: a bare `torch` requirement on a CPU machine pulls a multi-GB CUDA build.
if ! python -c "import torch" 2>/dev/null; then
  echo "installing torch (CPU build)"
  python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
fi
echo "installing gpuyantra and its dependencies"
python -m pip install -q -e ".[dev]"
echo "installed: $(python -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)')"
