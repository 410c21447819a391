#!/usr/bin/env bash
# The test command: install, check generated code and lint, run every test (GPU tests skip on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
python scripts/gen_proto.py --check
ruff check .
set +e
# the slowest tests named at the end: where the suite's time goes (the aim is a CI run under 15 minutes). Two workers
# (pytest-xdist; YANTRA_TEST_WORKERS, 0 for one process): most slow tests wait on processes they started, so two
# overlap on two cores; each worker starts its own nats-server.
python -m pytest -q -p no:cacheprovider --durations=15 -n "${YANTRA_TEST_WORKERS:-2}" "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
# The oldest transformers the project allows, on the tests that touch it (scripts/compat_check.sh): ~1 minute.
if [ "$code" -eq 0 ]; then
  bash scripts/compat_check.sh || code=$?
fi
# The Docker image, a step of its own: built and checked where a Docker engine runs (scripts/docker_check.sh says
# when there is none and it skips), and only once the tests pass (a build pulls a base of several GB).
if [ "$code" -eq 0 ]; then
  bash scripts/docker_check.sh || code=$?
else
  echo "docker check: skipped: the tests failed"
fi
exit "$code"
