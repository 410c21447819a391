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
# The first install downloads hundreds of MB (torch, transformers, triton): pip's own output and
# progress bars show that it is moving. A re-run only checks what is there: kept quiet.
# torch first and pinned: a bare `torch` requirement on a CPU machine pulls a multi-GB CUDA build.
if ! python -c "import torch" 2>/dev/null; then
  echo "installing torch (the largest download: several minutes on a slow link)"
  python -m pip install "torch==${TORCH_VERSION:-2.13.0}"
fi
# The rest at the versions the tests ran with (constraints.txt, which the Docker image installs too).
if python -m pip show -q gpuyantra >/dev/null 2>&1; then
  echo "checking gpuyantra and its dependencies (already installed)"
  python -m pip install -q -e ".[dev]" -c constraints.txt
else
  echo "installing gpuyantra and its dependencies"
  python -m pip install -e ".[dev]" -c constraints.txt
fi
echo "installed: $(python -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)')"
