#!/usr/bin/env bash
# The served benchmark before and after a full `yantra optimize` run, in one go (bench/served_before_after.py):
# `yantra up` (the 1.5B-shaped preset on cuda) on a fresh temp data dir, a concurrency sweep (1, 16, 64 streams)
# over gRPC, the run, the same sweep, the stack stopped, then the in-process engine and HF eager at the same levels
# when the time left allows. One result: bench/results/served_<model>_<gpu>.json (+ .png). ~480 s on an H200.
#   bash scripts/served_before_after.sh [--model NAME] [--device cuda|cpu] [--budget-s 480] [--levels 1 16 64] ...
#   (on the GPU machine: bash scripts/gpu_run.sh served)
set -uo pipefail
cd "$(dirname "$0")/.."
# PYTHON picks the interpreter; else python3 under gpu_run.sh (its carried wheels on PYTHONPATH), else the venv's
if [ -n "${PYTHON:-}" ]; then python=$PYTHON
elif [[ "${PYTHONPATH:-}" != */tmp/site* ]] && [ -x .venv/bin/python ]; then python=.venv/bin/python
else python=python3; fi
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
exec "$python" bench/served_before_after.py "$@"
