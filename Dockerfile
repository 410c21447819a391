# One image for every gpuyantra service; compose.yaml picks the service with its command.
#
# The base ships the torch the tests run (scripts/install.sh's TORCH_VERSION, 2.13.0) with the Triton it pins
# (3.9; the project needs Triton >= 3.3, which torch 2.7 was the first to ship), on the CUDA 12.6 runtime.
# Pinned by tag: its digest cannot be looked up without a registry. Where one is reachable, pin it as
# `FROM pytorch/pytorch:<tag>@sha256:<digest>` (`docker buildx imagetools inspect pytorch/pytorch:<tag>`).
# tests/test_dockerfile.py checks the tag against the project's minimums and the tests' torch.
FROM pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime

# Triton compiles a small C launcher for each kernel the first time it runs it, and the runtime image has no C
# compiler.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    YANTRA_DATA_DIR=/data

WORKDIR /app

# The dependencies first, in a layer of their own (kept while only the code changes), at the versions the tests
# ran (constraints.txt). torch and Triton are the base's: constraints.txt does not name them, and the build fails
# if pip replaced either.
COPY pyproject.toml README.md constraints.txt ./
RUN set -eu; \
    base="$(python -c 'import torch, triton; print(torch.__version__, triton.__version__)')"; \
    python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
      print("\n".join(p["dependencies"] + p["optional-dependencies"]["llm"] + p["optional-dependencies"]["weaviate"]))' \
      > /tmp/requirements.txt; \
    pip install -c constraints.txt -r /tmp/requirements.txt; \
    now="$(python -c 'import torch, triton; print(torch.__version__, triton.__version__)')"; \
    if [ "$base" != "$now" ]; then echo "pip replaced the base's torch/triton: $base -> $now" >&2; exit 1; fi; \
    rm /tmp/requirements.txt

COPY proto ./proto
COPY services ./services
COPY tui ./tui
COPY scripts ./scripts
COPY docker ./docker
RUN pip install --no-deps -e . \
 && python -m compileall -q services tui \
 && pip check

# A user of its own owns /data (the service's state: the skill index, kernel files, logs); the code stays root's.
RUN useradd --create-home --home-dir /home/yantra --uid 10001 --user-group --shell /usr/sbin/nologin yantra \
 && mkdir -p /data \
 && chown yantra:yantra /data
USER 10001:10001
# Triton's kernel cache (~/.triton) and the Hugging Face cache are the user's, under its home.
ENV HOME=/home/yantra

EXPOSE 50551 9464
# The server: the standard gRPC health service says SERVING; the other services: their process runs.
# A model is loaded and calibrated at start: failures in the first 10 minutes do not count.
HEALTHCHECK --interval=30s --timeout=10s --start-period=10m --retries=3 CMD ["python", "/app/docker/healthcheck.py"]
ENTRYPOINT ["yantra", "serve"]
CMD ["server"]
