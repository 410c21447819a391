# One image for every gpuyantra service; compose.yaml picks the service with its command.
FROM pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime
WORKDIR /app
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY services ./services
COPY tui ./tui
COPY scripts ./scripts
RUN pip install --no-cache-dir -e .
ENV PYTHONUNBUFFERED=1 YANTRA_DATA_DIR=/data
ENTRYPOINT ["yantra", "serve"]
