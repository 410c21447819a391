"""The Docker image, checked where no Docker engine runs: the Dockerfile read statically (its base ships a torch and
Triton the project supports, the torch the tests run; a user that is not root; a HEALTHCHECK; no secret in ARG, ENV
or a command), constraints.txt against pyproject.toml, and the healthcheck script run against a real gRPC health
service and real processes. `scripts/docker_check.sh` builds the image where Docker runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import grpc
from packaging.requirements import Requirement
from packaging.version import Version

from services.core.nats_launcher import free_port
from services.server.grpc_api import add_health_and_reflection

ROOT = Path(__file__).resolve().parent.parent
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
# Triton as torch pins it in its CUDA wheels on Linux (`Requires-Dist: triton==...`). A base with a torch not listed
# here fails the test below until its Triton is added.
TRITON_OF_TORCH = {
    "2.6": "3.2",
    "2.7": "3.3",
    "2.8": "3.4",
    "2.9": "3.5",
    "2.10": "3.6",
    "2.11": "3.7",
    "2.12": "3.8",
    "2.13": "3.9",
}
SECRET_WORDS = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|CREDENTIAL|API_?KEY|PRIVATE_KEY", re.I)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile instruction, continuation lines joined, comments left out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        word, _, rest = (pending + line).strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def only(name: str) -> list[str]:
    return [args for word, args in instructions() if word == name]


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def requirement(name: str) -> Requirement:
    return next(r for r in map(Requirement, project()["dependencies"]) if r.name == name)


def test_the_base_ships_a_torch_and_triton_the_project_supports_and_the_tests_run():
    (base,) = only("FROM")
    tag = r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+)\.(\d+)-cudnn\d+-runtime(@sha256:[0-9a-f]{64})?"
    found = re.fullmatch(tag, base)
    assert found, f"an official pytorch/pytorch runtime tag, pinned: {base}"
    torch = Version(found.group(1))
    assert torch >= Version("2.7"), "Triton >= 3.3 came with torch 2.7"
    assert requirement("torch").specifier.contains(torch)
    triton = TRITON_OF_TORCH.get(f"{torch.major}.{torch.minor}")
    assert triton, f"torch {torch}: add the Triton it pins to TRITON_OF_TORCH"
    assert requirement("triton").specifier.contains(Version(triton)), f"torch {torch} ships Triton {triton}"
    assert found.group(2) == "12", "a CUDA 12.x runtime"
    tested = re.search(r"torch==\$\{TORCH_VERSION:-([\d.]+)\}", (ROOT / "scripts" / "install.sh").read_text())
    assert tested and Version(tested.group(1)) == torch, "the torch the tests run (scripts/install.sh)"


def test_the_image_runs_as_a_user_that_is_not_root_and_owns_data():
    users = only("USER")
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    uid = users[-1].split(":")[0]
    (made,) = [run for run in only("RUN") if "useradd" in run]
    assert f"--uid {uid}" in made and "chown yantra:yantra /data" in made
    assert "YANTRA_DATA_DIR=/data" in " ".join(only("ENV"))


def test_the_image_has_a_healthcheck_the_image_holds():
    (check,) = only("HEALTHCHECK")
    command = json.loads(check.partition("CMD")[2])
    assert command[:2] == ["python", "/app/docker/healthcheck.py"]
    assert "docker ./docker" in only("COPY") and HEALTHCHECK.exists()


def test_no_secret_in_an_arg_an_env_or_a_command():
    for word, args in instructions():
        if word in ("ARG", "ENV"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", args) or [args.split()[0]]
            assert not any(SECRET_WORDS.search(name) for name in names), (word, args)
        if word in ("RUN", "CMD", "ENTRYPOINT", "HEALTHCHECK"):
            assert not re.search(r"--(pass|password|user|token|auth)[=\s]", args), (word, args)
            assert not SECRET_WORDS.search(args), (word, args)


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt pins exact versions: {line}"
            pins[Requirement(name).name.lower().replace("_", "-")] = Version(version)
    return pins


def test_constraints_pin_every_dependency_within_pyprojects_ranges_and_leave_torch_to_the_base():
    pins = _pins()
    assert not [name for name in pins if name in ("torch", "triton") or name.startswith("nvidia-")]
    extras = [Requirement(r) for group in project()["optional-dependencies"].values() for r in group]
    for req in [*map(Requirement, project()["dependencies"]), *extras]:
        name = req.name.lower().replace("_", "-")
        if name in ("torch", "triton"):
            continue
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {req}"
        else:
            assert req in extras, f"{name} is not pinned in constraints.txt"


def test_dockerignore_keeps_state_and_secrets_out_of_the_build_but_not_what_the_image_copies():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()}
    assert {".git", ".venv", ".yantra", ".env"} <= ignored
    copied = {args.split()[0] for args in only("COPY")} | set(only("COPY")[0].split()[:-1])
    assert not copied & ignored, copied & ignored


# ------------------------------------------------------------------ the healthcheck, run for real


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=30, env=env
    )


def test_a_service_without_an_endpoint_is_healthy_while_its_process_runs():
    # A process as the image's entrypoint starts it (`yantra serve judge`), found by its command line.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", "judge"])
    try:
        ok = _check("-", str(proc.pid))
        assert ok.returncode == 0, ok.stderr
        proc.send_signal(signal.SIGSTOP)
        stopped = _check("-", str(proc.pid))
        assert stopped.returncode == 1 and "judge" in stopped.stderr and "stopped" in stopped.stderr
        proc.send_signal(signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait()
    gone = _check("judge", str(proc.pid))
    assert gone.returncode == 1 and "gone" in gone.stderr


async def test_the_server_is_healthy_when_its_grpc_health_service_says_serving(tmp_path):
    server = grpc.aio.server()
    add_health_and_reflection(server)  # the server's own health service, as bind_grpc adds it
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    env = {"YANTRA_SERVER_ADDR": f"0.0.0.0:{port}", "PATH": "/usr/bin:/bin"}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HEALTHCHECK), "server", str(os.getpid()), env=env, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
    finally:
        await server.stop(0)
    down = _check("server", str(os.getpid()), env={**env, "YANTRA_SERVER_ADDR": f"0.0.0.0:{free_port()}"})
    assert down.returncode == 1 and "UNAVAILABLE" in down.stderr, down.stderr
