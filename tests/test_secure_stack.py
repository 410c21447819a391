"""`yantra up --secure`: the embedded nats-server with the APP account, a user per service and TLS, its CA and
certificate made in DIR/secure on first use and reused after (or refused in one line when they do not fit together);
each service started by start_stack connecting with its own user over TLS while events flow between them, commands on
the data dir finding the CA and their user through it, and a client without the CA refused in one line. A listener
beyond loopback without --secure is refused, by the CLI, in one line."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from runlog import publish_envelope, wait_for_events

from services.cli.common import CliError, open_bus, settings_of
from services.cli.stack_cmds import nats_host_of, secure_of
from services.core import events as ev
from services.core.bus import Bus, EventRefused
from services.core.nats_launcher import free_port
from services.core.nats_security import SERVICES, bcrypt_hash
from services.core.pb import events_pb2 as pb
from services.core.server_client import wait_ready
from services.core.settings import NatsTls, Settings
from services.core.stack import STACK_FILE, StackError, start_stack
from services.core.stack_secure import client_settings, embedded_nats_problem, prepare_security
from services.core.stack_tls import (
    CA_CERT,
    CA_KEY,
    SERVER_CERT,
    SERVER_KEY,
    CertFacts,
    KeyFacts,
    MachineNames,
    TlsFacts,
    cert_names,
    needed_names,
    plan_tls,
)
from services.registry import SERVICES as REGISTRY_SERVICES

JUDGE_KIT = str(Path(__file__).resolve().parent / "judge")  # the judge's test kit, as tests/ops/conftest.py adds it
if JUDGE_KIT not in sys.path:
    sys.path.append(JUDGE_KIT)

from judge_testkit import profile_captured, qwen_norm  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLIENT_VARS = ("NATS_URL", "NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN")
NOW = datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(days=300)
WHERE = "DIR/secure"


@pytest.fixture(autouse=True)
def _no_client_environment(monkeypatch):
    # a developer's own NATS settings must not make a refusal pass or fail here
    for var in (*CLIENT_VARS, "YANTRA_ADMIN_TOKEN"):
        monkeypatch.delenv(var, raising=False)


# ------------------------------------------------------------------ reuse, make or refuse (pure)

CA = CertFacts(is_ca=True, not_after=LATER)
SERVER = CertFacts(not_after=LATER, names=frozenset({"127.0.0.1", "::1", "localhost"}))
KEY = KeyFacts(mode=0o600)
WHOLE = TlsFacts(CA, KEY, SERVER, KEY, ca_key_matches=True, server_key_matches=True, server_signed_by_ca=True)
LOOPBACK_NEEDED = ("127.0.0.1",)


def _without(**changes) -> TlsFacts:
    return TlsFacts(**{**WHOLE.__dict__, **changes})


def test_nothing_there_makes_a_ca_and_a_certificate_and_a_whole_set_is_reused():
    assert plan_tls(TlsFacts(), LOOPBACK_NEEDED, NOW, WHERE).action == "make"
    assert plan_tls(TlsFacts(), LOOPBACK_NEEDED, NOW, WHERE).make_ca
    assert plan_tls(WHOLE, LOOPBACK_NEEDED, NOW, WHERE).action == "reuse"
    # a CA with its key and no server pair: a new pair signed by it (how a server certificate is renewed)
    renew = plan_tls(_without(server=None, server_key=None), LOOPBACK_NEEDED, NOW, WHERE)
    assert (renew.action, renew.make_ca) == ("make", False)
    # a CA of the user's own without its key, with a server pair it signed: used as it is
    assert plan_tls(_without(ca_key=None, ca_key_matches=False), LOOPBACK_NEEDED, NOW, WHERE).action == "reuse"


@pytest.mark.parametrize(
    "facts, needed, reason",
    [
        (
            _without(ca=None),
            LOOPBACK_NEEDED,
            f"{WHERE} has {CA_KEY}, {SERVER_CERT}, {SERVER_KEY} but no {CA_CERT}: clients could not verify the server;"
            f" restore it, or remove {WHERE} to make a new CA (clients elsewhere then need the new {CA_CERT})",
        ),
        (
            _without(server_key=KeyFacts(mode=0o644)),
            LOOPBACK_NEEDED,
            f"{WHERE}/{SERVER_KEY} may be read by other users (mode 644): a key others could read is no secret; chmod"
            f" 600 it if none did, or remove {WHERE} to make a new CA (clients elsewhere then need the new {CA_CERT})",
        ),
        (
            _without(server_signed_by_ca=False),
            LOOPBACK_NEEDED,
            f"{WHERE}/{SERVER_CERT} is not signed by {CA_CERT}: clients given {CA_CERT} could not verify it; remove"
            f" {SERVER_CERT} and {SERVER_KEY} from {WHERE}: the next start signs a new pair with {CA_KEY}",
        ),
        (
            _without(server_key=None),
            LOOPBACK_NEEDED,
            f"{WHERE} has {SERVER_CERT} but no {SERVER_KEY}: restore it, or remove {SERVER_CERT} and {SERVER_KEY} from"
            f" {WHERE}: the next start signs a new pair with {CA_KEY}",
        ),
        (
            _without(server=CertFacts(not_after=NOW - datetime.timedelta(days=1), names=SERVER.names)),
            LOOPBACK_NEEDED,
            f"{WHERE}/{SERVER_CERT} expired on 2026-12-03: remove {SERVER_CERT} and {SERVER_KEY} from {WHERE}: the next"
            f" start signs a new pair with {CA_KEY}",
        ),
        (
            _without(server_key_matches=False),
            LOOPBACK_NEEDED,
            f"{WHERE}/{SERVER_KEY} is not the key of {SERVER_CERT}: restore the right one, or remove {SERVER_CERT} and"
            f" {SERVER_KEY} from {WHERE}: the next start signs a new pair with {CA_KEY}",
        ),
        (
            WHOLE,
            ("127.0.0.1", "10.0.0.5"),
            f"{WHERE}/{SERVER_CERT} does not name 10.0.0.5, which clients connect by (it names 127.0.0.1, ::1,"
            f" localhost): remove {SERVER_CERT} and {SERVER_KEY} from {WHERE}: the next start signs a new pair with"
            f" {CA_KEY}",
        ),
        (
            _without(ca_key=None, server=None, server_key=None),
            LOOPBACK_NEEDED,
            f"{WHERE} has no {SERVER_CERT}: put a {SERVER_CERT} and {SERVER_KEY} signed by {CA_CERT} there ({CA_KEY} is"
            " not there to sign one)",
        ),
        (
            _without(ca=CertFacts(not_after=LATER)),
            LOOPBACK_NEEDED,
            f"{WHERE}/{CA_CERT} is not a CA certificate; replace it, or remove {WHERE} to make a new CA (clients"
            f" elsewhere then need the new {CA_CERT})",
        ),
        (
            _without(ca=CertFacts(problem="not a PEM certificate (bad data)")),
            LOOPBACK_NEEDED,
            f"{WHERE}/{CA_CERT}: not a PEM certificate (bad data); replace it, or remove {WHERE} to make a new CA"
            f" (clients elsewhere then need the new {CA_CERT})",
        ),
    ],
    ids=[
        "no-ca",
        "key-mode",
        "other-ca",
        "half-pair",
        "expired",
        "wrong-key",
        "missing-name",
        "no-ca-key",
        "not-ca",
        "unreadable",
    ],  # fmt: skip
)
def test_files_that_do_not_fit_together_are_refused_in_one_line_and_never_overwritten(facts, needed, reason):
    plan = plan_tls(facts, needed, NOW, WHERE)
    assert (plan.action, plan.reason) == ("refuse", reason)


def test_the_certificate_names_what_clients_connect_by():
    machine = MachineNames("gpu-box-1", "gpu-box-1.lab", ("10.0.0.5",))
    assert cert_names("127.0.0.1", machine) == ("127.0.0.1", "::1", "localhost")
    loopback = ("127.0.0.1", "::1", "localhost")
    assert cert_names("0.0.0.0", machine) == (*loopback, "gpu-box-1", "gpu-box-1.lab", "10.0.0.5")
    assert cert_names("10.0.0.5", machine) == (*loopback, "10.0.0.5", "gpu-box-1", "gpu-box-1.lab")
    assert needed_names("0.0.0.0", machine) == ("127.0.0.1", "gpu-box-1")
    assert needed_names("10.0.0.5", machine) == ("10.0.0.5",)


def test_where_the_embedded_server_may_listen():
    assert embedded_nats_problem(None, "127.0.0.1", secure=False) is None
    assert embedded_nats_problem(None, "0.0.0.0", secure=True) is None
    assert "add --secure (or YANTRA_SECURE=1)" in embedded_nats_problem(None, "10.0.0.5", secure=False)
    assert "NATS_URL names another server" in embedded_nats_problem("nats://h:4222", "127.0.0.1", secure=True)
    assert "no port" in embedded_nats_problem(None, "0.0.0.0:4222", secure=True)
    assert secure_of(False, {"YANTRA_SECURE": "1"}) and not secure_of(False, {}) and secure_of(True, {})
    assert nats_host_of(None, {"YANTRA_NATS_HOST": "0.0.0.0"}) == "0.0.0.0" and nats_host_of(None, {}) == "127.0.0.1"
    with pytest.raises(CliError, match=r"^YANTRA_SECURE='maybe': 1 \(accounts"):
        secure_of(False, {"YANTRA_SECURE": "maybe"})


def test_yantra_up_beyond_loopback_without_secure_is_one_line_before_anything_starts(tmp_path):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "up", "--nats-host", "0.0.0.0", "--data-dir", str(data)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "yantra up: the embedded nats-server would listen on 0.0.0.0 (--nats-host or YANTRA_NATS_HOST), beyond"
        " loopback, without TLS or a user per client: add --secure (or YANTRA_SECURE=1), or listen on 127.0.0.1\n"
    )
    assert not data.exists()


# ------------------------------------------------------------------ the files in the data dir


def test_the_files_are_made_once_reused_after_renewed_by_the_ca_and_a_readable_key_is_refused(tmp_path):
    data = tmp_path / "data"
    first = prepare_security(data, "127.0.0.1")
    root = first.files.root
    assert "made a CA and a server certificate for 127.0.0.1, ::1, localhost" in first.made
    assert root.stat().st_mode & 0o777 == 0o700
    for private in (first.files.ca_key, first.files.key, first.files.cli_password):
        assert private.stat().st_mode & 0o777 == 0o600, private
    ca, cert = first.files.ca.read_bytes(), first.files.cert.read_bytes()

    again = prepare_security(data, "127.0.0.1")  # reused: the CA clients elsewhere were given keeps working
    assert again.made == "" and first.files.ca.read_bytes() == ca and first.files.cert.read_bytes() == cert
    assert again.client_auth == first.client_auth  # the commands' password is kept; the services' drawn afresh
    assert again.credentials["judge"].password != first.credentials["judge"].password

    first.files.cert.unlink()
    first.files.key.unlink()
    renewed = prepare_security(data, "127.0.0.1")
    assert renewed.made.startswith("made a server certificate signed by ca.pem")
    assert first.files.ca.read_bytes() == ca and first.files.cert.read_bytes() != cert

    first.files.key.chmod(0o644)
    settings = Settings(data_dir=data, server_addr=f"127.0.0.1:{free_port()}")
    with pytest.raises(StackError) as refused:
        start_stack(settings, (), secure=True)
    assert str(refused.value).startswith(f"{root}/server-key.pem may be read by other users (mode 644)")
    assert not (data / STACK_FILE).exists()


# ------------------------------------------------------------------ a secure stack, its services and its clients


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


async def test_each_service_connects_with_its_own_user_over_tls_and_events_flow(tmp_path):
    """The skillstore and the coder as `yantra up --secure` starts them: each process holds its own user and
    password and the CA, nothing of another's; a run's profile, published by a command that found the CA and its
    user through the data dir, is answered by the skillstore, whose answer the coder answers."""
    data = tmp_path / "data"
    settings = Settings(data_dir=data, server_addr=f"127.0.0.1:{free_port()}", device="cpu")
    stack = start_stack(settings, ("skillstore", "coder"), secure=True)
    try:
        assert stack.nats_url.startswith("tls://127.0.0.1:") and stack.security is not None
        security = stack.security
        passwords = {name: auth.password for name, auth in security.credentials.items()}
        assert set(passwords) == set(SERVICES)
        info = (data / STACK_FILE).read_text()  # what every command reads: the files, never a password
        assert str(security.files.cli_password) in info and not any(p in info for p in passwords.values())
        for name, proc in stack.procs.items():
            env = _environ(proc.pid)
            assert env["NATS_USER"] == f"yantra-{name}" and env["NATS_PASSWORD"] == passwords[name], name
            assert env["NATS_CA"] == str(security.files.ca) and env["NATS_URL"] == stack.nats_url
            others = [p for other, p in passwords.items() if other != name]
            assert not any(p in value for p in others for value in env.values()), name
            assert not any(p in Path(f"/proc/{proc.pid}/cmdline").read_text() for p in passwords.values())

        client = settings_of(argparse.Namespace(data_dir=str(data)))  # as `yantra runs` on this data dir
        assert (client.nats_url, client.nats_user, client.nats_ca) == (
            stack.nats_url, "yantra-cli", str(security.files.ca)
        )  # fmt: skip
        bus = await open_bus(client)
        # the profile as the profiler writes it, with the profiler's user: the commands' own may not (owners)
        as_profiler = await Bus.connect(
            stack.nats_url, name="test-profiler", auth=security.credentials["profiler"],
            tls=NatsTls(str(security.files.ca)),
        )  # fmt: skip
        try:
            run_id = "sec-" + uuid.uuid4().hex[:8]
            captured = profile_captured(qwen_norm())
            request = await publish_envelope(bus, run_id, pb.RunRequested(model="tiny-qwen2", max_candidates=2))
            with pytest.raises(EventRefused, match="only profiler may"):
                await publish_envelope(bus, run_id, captured, request, producer="profiler")
            await publish_envelope(as_profiler, run_id, captured, request, producer="profiler")
            [retrieved] = await wait_for_events(bus, run_id, "SkillsRetrieved", timeout=120)
            proposed = await wait_for_events(bus, run_id, "CandidateProposed", timeout=120)
        finally:
            await bus.close()
            await as_profiler.close()
        assert retrieved.env.producer == "skillstore" and {p.env.producer for p in proposed} == {"coder"}
        assert stack.dead() == []

        # the supervisor's restart of nats-server keeps the accounts and TLS (the same config, untouched)
        config = stack.nats.config_file.read_text()
        stack.nats.process.kill()
        stack.nats.process.wait()
        stack.restart_nats()
        assert stack.nats.config_file.read_text() == config and "verify" not in config
        assert "system_account: SYS" in config and "tls {" in config
        bus = await open_bus(settings_of(argparse.Namespace(data_dir=str(data))))
        assert len(await bus.read_run(run_id)) >= 4
        await bus.close()

        # a client told the URL and a user, but not the CA: one line that says what to set
        env = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
        env.update(NATS_URL=stack.nats_url, NATS_USER="yantra-cli", NATS_PASSWORD=passwords["cli"])
        result = subprocess.run(
            [sys.executable, "-m", "services.cli", "runs", "--data-dir", str(tmp_path / "elsewhere")],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            f"yantra runs: NATS at {stack.nats_url} presented a certificate this client cannot verify (unable to get"
            " local issuer certificate): set NATS_CA to the file of the CA that signed it (PEM)\n"
        )
    finally:
        stack.stop()
    written = [*(data / "logs").glob("*.log"), data / "nats.log"]
    if bcrypt_hash("x", 4) is not None:  # without bcrypt the 0600 config holds them as given (nats_security)
        written.append(data / "nats.conf")
    for path in written:  # no password anywhere the stack writes, but the commands' own file
        text = path.read_text(errors="replace")
        assert not any(p in text for p in passwords.values()), path


def test_a_command_on_another_users_stack_is_one_line_naming_the_file(tmp_path):
    password_file = tmp_path / "cli.password"
    password_file.write_text("secret-pw\n")
    password_file.chmod(0o644)
    info = {"nats_url": "tls://127.0.0.1:4222", "secure": {"nats_user": "yantra-cli", "nats_ca": "ca.pem",
            "nats_password_file": str(password_file)}}  # fmt: skip
    settings = Settings(data_dir=tmp_path)
    with pytest.raises(ValueError) as refused:
        client_settings(settings, info)
    assert str(refused.value) == f"{password_file} may be read by other users (mode 644): chmod 600 it, or remove it"
    password_file.chmod(0o600)
    secured = client_settings(settings, info)
    assert (secured.nats_user, secured.nats_password, secured.nats_url) == ("yantra-cli", "secret-pw", info["nats_url"])
    assert secured.nats_auth().user == "yantra-cli"
    given = Settings(data_dir=tmp_path, nats_url="nats://other:4222")
    assert client_settings(given, info) is given  # NATS_URL names another server: the stack's is not used


# ------------------------------------------------------------------ the whole stack on a secure cluster (slow)


@pytest.mark.slow
async def test_a_run_completes_on_a_secure_three_node_cluster_and_replays_from_the_data_dir(tmp_path):
    """`yantra up --secure --cluster 3`: the five services, each with its own user over TLS to three nodes whose
    routes speak TLS, take a run to its end; `yantra replay --verify` on the data dir finds the CA and its user."""
    data = tmp_path / "data"
    settings = Settings(
        data_dir=data, server_addr=f"127.0.0.1:{free_port()}", model="tiny-qwen2", device="cpu", ack_wait_s=4.0,
        admin_token="secure-" + uuid.uuid4().hex,  # the server's Admin RPCs still ask for it: NATS does not
    )  # fmt: skip
    stack = start_stack(settings, REGISTRY_SERVICES, cluster=3, secure=True)
    try:
        assert stack.nats_url.count("tls://") == 3 and stack.cluster is not None
        for node in stack.cluster.nodes:
            config = node.config_file.read_text()
            assert "verify: true" in config and "system_account: SYS" in config  # TLS routes, accounts
            assert "authorization { token" not in config  # the admin token is the server's, not NATS's
        for name, proc in stack.procs.items():
            assert _environ(proc.pid)["NATS_USER"] == f"yantra-{name}", name
        await wait_ready(settings.server_addr, timeout=300, still_starting=lambda: stack.procs["server"].poll() is None)
        bus = await open_bus(settings_of(argparse.Namespace(data_dir=str(data))))
        try:
            run_id = "sec-" + uuid.uuid4().hex[:8]
            policy = pb.SwapPolicy(min_reward=1, name="cpu-untimed", reason="test: no GPU")
            msg = pb.RunRequested(model="tiny-qwen2", policy=policy, max_targets=1, max_candidates=1,
                                  prompts=["Hello there"], decode_tokens=4)  # fmt: skip
            await publish_envelope(bus, run_id, msg)
            [done] = await wait_for_events(bus, run_id, "RunCompleted", timeout=420)
            assert (await bus.js.stream_info(ev.RUNS_STREAM)).config.num_replicas == 3
            producers = {r.env.producer for r in await bus.read_run(run_id)}
        finally:
            await bus.close()
        assert {"server", "profiler", "skillstore", "coder", "judge"} <= producers, producers
        env = {k: v for k, v in os.environ.items() if k not in CLIENT_VARS}
        replayed = subprocess.run(
            [sys.executable, "-m", "services.cli", "replay", run_id, "--verify", "--data-dir", str(data)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert replayed.returncode == 0 and "replay verified" in replayed.stdout, replayed.stdout + replayed.stderr
    finally:
        stack.stop()
        for name in REGISTRY_SERVICES:  # shown by pytest only when the test fails
            print(f"----- {name} log -----\n{stack.log_tail(name, 40)}")
