"""Settings shared by every process, read from the environment (YANTRA_*, NATS_URL)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, field_validator


class Settings(BaseModel):
    nats_url: str | None = Field(None, description="NATS server to use; unset means the embedded one")
    data_dir: Path = Field(Path(".yantra"), description="embedded NATS store, skill library, kernel files, logs")
    server_addr: str = Field("127.0.0.1:50551", description="gRPC address of the inference server")
    model: str = Field("tiny-qwen2", description="preset name, local path or hub id served by the server")
    device: str = Field("auto", description="auto | cpu | cuda")
    ack_wait_s: float = Field(5.0, gt=0, description="seconds before an unacknowledged event is redelivered")
    shutdown_grace_s: float = Field(
        10.0, gt=0, description="seconds a service told to stop has to close before it exits outright"
    )
    log_level: str = "INFO"
    restore_swaps: bool = Field(True, description="a (re)started server re-applies the log's committed swaps")
    admin_token: str = Field("", repr=False, description="bearer token for the server's Admin RPCs; empty: none")
    instance_id: str = Field("", description="the id the server answers Health with; empty: a random one")
    metrics_addr: str = Field("", description="host:port of the server's Prometheus endpoint; empty: none")
    max_requests: int = Field(64, ge=1, description="requests the server generates at once; more: RESOURCE_EXHAUSTED")
    graphs: bool = Field(True, description="on a GPU, each batched decode step is a CUDA graph (0: eager steps)")
    batch: int | None = Field(
        None, ge=0, description="requests decoded together (slots); unset: 64 on a GPU, 8 on a CPU; 0: one at a time"
    )

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        # Services hand paths to children that run in other working directories (the judge's sandbox).
        return path.expanduser().resolve()

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        env = os.environ
        values = {
            "nats_url": env.get("NATS_URL") or None,
            "data_dir": env.get("YANTRA_DATA_DIR", ".yantra"),
            "server_addr": env.get("YANTRA_SERVER_ADDR", "127.0.0.1:50551"),
            "model": env.get("YANTRA_MODEL", "tiny-qwen2"),
            "device": env.get("YANTRA_DEVICE", "auto"),
            "ack_wait_s": env.get("YANTRA_ACK_WAIT_S", "5"),
            "shutdown_grace_s": env.get("YANTRA_SHUTDOWN_GRACE_S", "10"),
            "log_level": env.get("YANTRA_LOG_LEVEL", "INFO"),
            "restore_swaps": env.get("YANTRA_RESTORE_SWAPS", "1") not in ("0", "false", "no"),
            "admin_token": env.get("YANTRA_ADMIN_TOKEN", ""),
            "instance_id": env.get("YANTRA_INSTANCE_ID", ""),
            "metrics_addr": env.get("YANTRA_METRICS_ADDR", ""),
            "max_requests": env.get("YANTRA_MAX_REQUESTS", "64"),
            "graphs": env.get("YANTRA_GRAPHS", "1") not in ("0", "false", "no"),
            "batch": env.get("YANTRA_BATCH") or None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def env(self) -> dict[str, str]:
        """The same settings as environment variables, for child processes."""
        out = {
            "YANTRA_DATA_DIR": str(self.data_dir),
            "YANTRA_SERVER_ADDR": self.server_addr,
            "YANTRA_MODEL": self.model,
            "YANTRA_DEVICE": self.device,
            "YANTRA_ACK_WAIT_S": str(self.ack_wait_s),
            "YANTRA_SHUTDOWN_GRACE_S": str(self.shutdown_grace_s),
            "YANTRA_LOG_LEVEL": self.log_level,
            "YANTRA_RESTORE_SWAPS": "1" if self.restore_swaps else "0",
        }
        if self.nats_url:
            out["NATS_URL"] = self.nats_url
        if self.admin_token:
            out["YANTRA_ADMIN_TOKEN"] = self.admin_token
        if self.instance_id:
            out["YANTRA_INSTANCE_ID"] = self.instance_id
        if self.metrics_addr:
            out["YANTRA_METRICS_ADDR"] = self.metrics_addr
        out["YANTRA_MAX_REQUESTS"] = str(self.max_requests)
        out["YANTRA_GRAPHS"] = "1" if self.graphs else "0"
        if self.batch is not None:
            out["YANTRA_BATCH"] = str(self.batch)
        return out
