#!/usr/bin/env bash
# The oldest transformers pyproject.toml allows (5.17), beside the pinned one the suite runs on: the tests that build
# every preset and architecture, give them slots and profile them, run again under it. Installed into a folder of its
# own (.venv/oldest-transformers, kept between runs) that goes first on PYTHONPATH; nothing else changes.
#   bash scripts/compat_check.sh            (scripts/test.sh runs it once the suite passes)
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
OLDEST=${OLDEST_TRANSFORMERS:-5.17.0}
site=.venv/oldest-transformers
if [ "$(cat "$site/VERSION" 2>/dev/null)" != "$OLDEST" ]; then
  echo "compat: installing transformers $OLDEST beside the pinned one"
  rm -rf "$site"
  python -m pip install -q --no-deps --target "$site" "transformers==$OLDEST" "huggingface-hub>=1.5,<2"
  echo "$OLDEST" > "$site/VERSION"
fi
PYTHONPATH="$PWD/$site" python - <<PY
import transformers
assert transformers.__version__ == "$OLDEST", transformers.__version__
PY
echo "compat: the model-facing tests under transformers $OLDEST"
PYTHONPATH="$PWD/$site" python -m pytest -q -p no:cacheprovider -n "${YANTRA_TEST_WORKERS:-2}" -m "not slow" \
  tests/server/test_slot_kinds.py tests/server/test_architectures.py tests/server/test_models.py tests/profiler \
  tests/server/test_gqa_decode.py
