#!/usr/bin/env bash
# Build the Docker image and check what it holds, where a Docker engine answers `docker info`; where none does,
# say so and succeed (tests/test_dockerfile.py and tests/test_compose.py check the files without one).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "docker check: skipped: no Docker engine answers \`docker info\` here"
  exit 0
fi
tag=${YANTRA_IMAGE:-gpuyantra:check}
echo "docker check: building $tag"
docker build -t "$tag" .
# The torch and Triton the image runs are in the project's ranges, and its user is not root.
docker run --rm --entrypoint python "$tag" -c '
import tomllib
import torch, triton
from packaging.requirements import Requirement
from packaging.version import Version
deps = {r.name: r for r in map(Requirement, tomllib.load(open("/app/pyproject.toml", "rb"))["project"]["dependencies"])}
for name, version in (("torch", torch.__version__), ("triton", triton.__version__)):
    assert deps[name].specifier.contains(Version(version).base_version), f"{name} {version} is outside {deps[name]}"
print("docker check: torch", torch.__version__, "triton", triton.__version__, "CUDA", torch.version.cuda)
'
uid=$(docker run --rm --entrypoint id "$tag" -u)
if [ "$uid" = "0" ]; then
  echo "docker check: the image runs as root" >&2
  exit 1
fi
docker run --rm --entrypoint yantra "$tag" --version
# compose.yaml as the Docker Compose plugin reads it (stand-in secrets: nothing is started)
NATS_PASSWORD=check YANTRA_ADMIN_TOKEN=check docker compose config -q
echo "docker check: $tag built and checked (user $uid)"
