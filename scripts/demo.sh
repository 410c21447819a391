#!/usr/bin/env bash
# The main job on a fresh machine: install, then run one whole optimisation loop on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/yantra demo "$@"
