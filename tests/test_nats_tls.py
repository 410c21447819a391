"""Credentials and TLS: a real nats-server with accounts (APP with JetStream, SYS), a bcrypt-hashed password per
service and TLS (certificates made at test time, tests/tls_certs.py), reached through the project's Bus; what a
wrong password, a missing CA, a plain server or a bad file look like; a three-node cluster whose routes speak TLS;
and the inference server refusing to listen beyond loopback without YANTRA_ADMIN_TOKEN."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.core import events as ev
from services.core.admin_auth import exposed_without_token
from services.core.bus import Bus, BusUnavailable, EventRefused
from services.core.nats_cluster import cluster_config_text, plan_nodes, start_cluster
from services.core.nats_launcher import UnsafeConfig, find_nats_server, free_port, start_nats
from services.core.nats_security import (
    AccountUser,
    NatsSecurity,
    TlsFiles,
    account_users,
    bcrypt_hash,
    security_problem,
    service_credentials,
)
from services.core.pb import events_pb2 as pb
from services.core.settings import NatsAuth, NatsTls, Settings, auth_refused, settings_problem
from tests.tls_certs import TlsFilesForTest, make_tls

ROOT = Path(__file__).resolve().parent.parent
CLIENT_VARS = ("NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN")


@pytest.fixture(autouse=True)
def _no_client_environment(monkeypatch):
    # Bus.connect falls back on these: a developer's own must not make a refusal pass or fail here
    for var in CLIENT_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def credentials():
    return service_credentials(("cli", "judge"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory, certs, credentials):
    """One node: the APP account (JetStream) with a user per service, SYS with an operator, TLS for clients."""
    root = tmp_path_factory.mktemp("secured")
    security = NatsSecurity(
        app_users=account_users(credentials),
        sys_users=account_users({"ops": NatsAuth(user="ops", password="ops-pw")}),
        tls=TlsFiles(certs.cert, certs.key, certs.ca),
    )
    server = start_nats(root / "store", log_file=root / "nats.log", security=security)
    yield server
    server.stop()


def _event(run_id: str) -> ev.Envelope:
    msg = pb.RunRequested(model="tiny-qwen2", max_candidates=1, prompts=["hi"], decode_tokens=4)
    return ev.make_envelope(run_id, msg, producer="test", time_ns=time.time_ns(), event_id=f"req-{run_id}")


# ------------------------------------------------------------------------------------------ one authenticated node


async def test_a_service_publishes_and_reads_an_event_over_tls_with_its_own_user(
    secured, certs, credentials, run_id, monkeypatch
):
    text = secured.config_file.read_text()
    assert stat.S_IMODE(secured.config_file.stat().st_mode) == 0o600
    for auth in credentials.values():  # the config holds bcrypt hashes, never a password
        assert auth.password not in text and f'"{auth.user}"' in text
    assert text.count('password: "$2b$11$') == 3 and "system_account: SYS" in text and "jetstream: enabled" in text
    assert secured.url.startswith("tls://127.0.0.1:")

    bus = await Bus.connect(secured.url, name="test-tls", auth=credentials["cli"], tls=NatsTls(str(certs.ca)))
    try:
        await bus.publish(_event(run_id))
    finally:
        await bus.close()
    # another service, with its own user, given its settings the way `yantra up` hands them to a child
    env = Settings(nats_url=secured.url, nats_ca=str(certs.ca), **_user(credentials["judge"])).env()
    for var in ("NATS_CA", "NATS_USER", "NATS_PASSWORD"):
        monkeypatch.setenv(var, env[var])
    reader = await Bus.connect(secured.url, name="test-tls-reader")
    got = await reader.read_run(run_id)
    await reader.close()
    assert [r.type for r in got] == ["RunRequested"] and got[0].msg.prompts == ["hi"]


async def test_a_services_user_publishes_only_the_facts_it_owns_and_cannot_delete_the_log(
    secured, certs, credentials, run_id
):
    text = secured.config_file.read_text()
    assert 'allow: ["yantra.run.*.CandidateJudged", "yantra.run.*.RunFailed"' in text  # the judge's, as written
    judge = await Bus.connect(secured.url, name="test-judge", auth=credentials["judge"], tls=NatsTls(str(certs.ca)))
    try:
        verdict = pb.CandidateJudged(candidate_id="c1", reward=3)
        own = ev.make_envelope(run_id, verdict, producer="judge", time_ns=time.time_ns(), event_id=f"j-{run_id}")
        assert await judge.publish(own) > 0
        # a verdict is the judge's to write; a run request is not: the server refuses it, and the bus says why
        with pytest.raises(EventRefused) as refused:
            await judge.publish(_event(run_id))
        assert "does not let this connection's user publish it (on a secure stack only cli may" in str(refused.value)
        with pytest.raises(TimeoutError):  # the log is nobody's to delete: no answer but the server's refusal
            await judge.js.delete_stream(ev.RUNS_STREAM)
        assert any("$js.api.stream.delete" in v for v in judge.violations)
        assert [r.type for r in await judge.read_run(run_id)] == ["CandidateJudged"]
    finally:
        await judge.close()


def _user(auth: NatsAuth) -> dict[str, str]:
    return {"nats_user": auth.user, "nats_password": auth.password}


async def test_a_wrong_password_is_refused_at_once_in_one_line_naming_the_user(secured, certs, credentials):
    wrong = NatsAuth(user=credentials["cli"].user, password="not-" + credentials["cli"].password)
    started = time.monotonic()
    with pytest.raises(BusUnavailable) as refused:
        await Bus.connect(secured.url, auth=wrong, tls=NatsTls(str(certs.ca)), timeout=5.0)
    assert time.monotonic() - started < 3.0  # a wrong password stays wrong: not retried until the timeout
    assert str(refused.value) == (
        f"NATS refused the credentials for user yantra-cli at {secured.url}: authorization violation"
    )
    assert auth_refused(refused.value.__cause__) and wrong.password not in str(refused.value)


async def test_a_tls_server_without_the_ca_is_refused_in_one_line_naming_nats_ca(secured, credentials, tmp_path):
    started = time.monotonic()
    with pytest.raises(BusUnavailable) as no_ca:
        await Bus.connect(secured.url, auth=credentials["cli"], timeout=5.0)
    assert time.monotonic() - started < 3.0
    assert str(no_ca.value) == (
        f"NATS at {secured.url} presented a certificate this client cannot verify (unable to get local issuer"
        " certificate): set NATS_CA to the file of the CA that signed it (PEM)"
    )
    # a nats:// URL to it too: the server's INFO asks for TLS, and the certificate is checked all the same
    plain_url = secured.url.replace("tls://", "nats://")
    with pytest.raises(BusUnavailable, match="set NATS_CA to the file of the CA"):
        await Bus.connect(plain_url, auth=credentials["cli"], timeout=5.0)

    other = make_tls(tmp_path / "other", label="another")
    with pytest.raises(BusUnavailable) as wrong_ca:
        await Bus.connect(secured.url, auth=credentials["cli"], tls=NatsTls(str(other.ca)), timeout=5.0)
    assert str(wrong_ca.value).endswith(f": NATS_CA={other.ca} is not the CA that signed it")


async def test_the_system_account_has_no_jetstream(secured, certs):
    with pytest.raises(Exception, match="JetStream not enabled for account"):
        await Bus.connect(secured.url, auth=NatsAuth(user="ops", password="ops-pw"), tls=NatsTls(str(certs.ca)))


async def test_a_client_told_to_speak_tls_refuses_a_plain_server(tmp_path, certs):
    plain = start_nats(tmp_path / "plain")
    try:
        with pytest.raises(BusUnavailable) as downgraded:
            await Bus.connect(plain.url, tls=NatsTls(str(certs.ca)), timeout=3.0)
    finally:
        plain.stop()
    assert str(downgraded.value) == (
        f"NATS at {plain.url} does not speak TLS, but this client was told to (NATS_CA, NATS_CERT or a tls://"
        " NATS_URL): it will not go on in clear"
    )


async def test_a_ca_file_that_is_not_a_certificate_is_one_line(secured, credentials, tmp_path):
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(BusUnavailable) as bad:
        await Bus.connect(secured.url, auth=credentials["cli"], tls=NatsTls(str(junk)), timeout=3.0)
    assert str(bad.value).startswith(f"cannot speak TLS to NATS at {secured.url}: NATS_CA={junk}: not a PEM")
    assert "\n" not in str(bad.value)


async def test_mutual_tls_asks_for_the_client_certificate_in_one_line(tmp_path, certs, credentials):
    security = NatsSecurity(
        app_users=(AccountUser("yantra-cli", credentials["cli"].password),),  # stored as given: no bcrypt needed
        tls=TlsFiles(certs.cert, certs.key, certs.ca, verify=True),
    )
    server = start_nats(tmp_path / "mtls", security=security)
    try:
        with pytest.raises(BusUnavailable) as no_cert:
            await Bus.connect(server.url, auth=credentials["cli"], tls=NatsTls(str(certs.ca)), timeout=3.0)
        assert str(no_cert.value) == (
            f"NATS at {server.url} refused the TLS handshake (TLSV13_ALERT_CERTIFICATE_REQUIRED): it asks for a"
            " client certificate: set NATS_CERT and NATS_KEY"
        )
        tls = NatsTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))
        bus = await Bus.connect(server.url, auth=credentials["cli"], tls=tls)
        await bus.close()
    finally:
        server.stop()


def test_the_tls_settings_name_a_missing_file_and_go_to_children(tmp_path, certs):
    with pytest.raises(ValidationError) as missing:
        Settings(nats_ca=str(tmp_path / "nowhere.pem"))
    assert settings_problem(missing.value) == f"NATS_CA={tmp_path / 'nowhere.pem'}: no such file"
    with pytest.raises(ValidationError) as alone:
        Settings(nats_cert=str(certs.client_cert))
    assert settings_problem(alone.value) == "NATS_CERT and NATS_KEY go together: set both, or neither"
    settings = Settings(nats_ca=str(certs.ca), nats_cert=str(certs.client_cert), nats_key=str(certs.client_key))
    assert settings.nats_tls() == NatsTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))
    env = settings.env()
    assert (env["NATS_CA"], env["NATS_CERT"], env["NATS_KEY"]) == (
        str(certs.ca),
        str(certs.client_cert),
        str(certs.client_key),
    )
    assert Settings().nats_tls() is None and "NATS_CA" not in Settings().env()


# ------------------------------------------------------------------------------------------ what may not be started


def test_a_listener_beyond_loopback_needs_tls_and_nothing_is_written(tmp_path, certs):
    with pytest.raises(UnsafeConfig) as refused:
        start_nats(tmp_path / "open", host="0.0.0.0")
    assert str(refused.value) == (
        "nats-server would listen on 0.0.0.0 without TLS: give it a certificate, or listen on 127.0.0.1"
    )
    assert not (tmp_path / "open").exists()
    plans = plan_nodes(tmp_path, 3, host="0.0.0.0")
    client_tls_only = NatsSecurity(tls=TlsFiles(certs.cert, certs.key, certs.ca))
    with pytest.raises(UnsafeConfig, match="the routes of node yantra-1 would listen on 0.0.0.0 without TLS"):
        cluster_config_text(plans[0], plans, 1 << 30, "pw", security=client_tls_only)


def test_what_a_security_config_cannot_say():
    user = AccountUser("yantra-cli", "x")
    cert = TlsFiles(Path("c.pem"), Path("k.pem"))
    cases = {
        NatsSecurity(app_users=(user,)): None,
        NatsSecurity(sys_users=(user,)): "a SYS account without the APP account: no client could use JetStream",
        NatsSecurity(app_users=(user,), sys_users=(user,)): "user yantra-cli is given twice",
        NatsSecurity(tls=TlsFiles(cert.cert_file, cert.key_file, verify=True)): "client TLS verifies its peers'",
        NatsSecurity(route_tls=TlsFiles(cert.cert_file, cert.key_file, verify=True)): "route TLS verifies its peers'",
    }
    for security, said in cases.items():
        problem = security_problem(security)
        assert (problem is None) if said is None else (problem or "").startswith(said), (security, problem)
    assert security_problem(NatsSecurity(app_users=(user,)), NatsAuth(token="t")) == (
        "accounts and a single credential for every client do not go together: give each client a user"
    )


def test_bcrypt_hashes_are_salted_and_checked_by_nats_server():
    one, two = bcrypt_hash("pw", cost=4), bcrypt_hash("pw", cost=4)
    assert one is not None and two is not None, "libcrypt cannot make bcrypt hashes here"
    assert one.startswith("$2b$04$") and len(one) == 60 and one != two  # a fresh salt each time


# ------------------------------------------------------------------------------------------ a cluster, routes on TLS


def test_each_node_config_has_route_tls_and_nats_server_accepts_it(tmp_path, certs):
    route_tls = TlsFiles(certs.cert, certs.key, certs.ca, verify=True)
    security = NatsSecurity(
        app_users=(AccountUser("yantra-cli", "x"),), tls=TlsFiles(certs.cert, certs.key, certs.ca), route_tls=route_tls
    )
    plans = plan_nodes(tmp_path, 3)
    for plan in plans:
        text = cluster_config_text(plan, plans, 1 << 30, "route-pw", security=security)
        cluster_block = text[text.index("cluster {") : text.index("\n}\n", text.index("cluster {"))]
        assert "  tls {" in cluster_block and "    verify: true" in cluster_block and str(certs.ca) in cluster_block
        assert text.count("tls {") == 2 and "system_account: SYS" in text
        config = tmp_path / f"{plan.name}.conf"
        config.write_text(text)
        checked = subprocess.run([find_nats_server(), "-t", "-c", str(config)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_a_three_node_cluster_forms_over_tls_routes_and_keeps_an_event(tmp_path, certs, credentials, run_id):
    security = NatsSecurity(
        app_users=account_users(credentials),
        tls=TlsFiles(certs.cert, certs.key, certs.ca),
        route_tls=TlsFiles(certs.cert, certs.key, certs.ca, verify=True),
    )
    cluster = start_cluster(tmp_path / "cluster", 3, security=security, monitor=True, max_file_store=256 << 20)
    try:
        assert cluster.url.count("tls://127.0.0.1:") == 3
        bus = await Bus.connect(
            cluster.url, auth=credentials["cli"], tls=NatsTls(str(certs.ca)), timeout=10.0, replicas=3, retry_s=30.0
        )
        try:
            await bus.publish(_event(run_id))
            assert [r.type for r in await bus.read_run(run_id)] == ["RunRequested"]
        finally:
            await bus.close()
        for plan in cluster.plans:  # each node routes to both others...
            with urllib.request.urlopen(f"http://127.0.0.1:{plan.monitor_port}/routez?subs=0", timeout=5) as reply:
                routes = json.load(reply)["routes"]
            assert {route["remote_name"] for route in routes} == {p.name for p in cluster.plans} - {plan.name}
            # ...and its route port speaks TLS alone: a node's certificate is answered, a plain connection is not
            assert _route_info(plan.route_port, certs)["server_name"] == plan.name
            assert _route_info(plan.route_port, None) is None
    finally:
        cluster.stop()


def _route_info(port: int, certs: TlsFilesForTest | None) -> dict | None:
    """The INFO a route port sends: over TLS with the node's own certificate, or (no `certs`) in clear; None when
    nothing comes within half a second."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw:
        conn = raw
        if certs is not None:
            context = ssl.create_default_context(cafile=str(certs.ca))
            context.load_cert_chain(certs.cert, certs.key)
            conn = context.wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            line = conn.makefile("rb").readline()
        except TimeoutError:
            return None
    return json.loads(line.split(b" ", 1)[1]) if line.startswith(b"INFO ") else None


# ------------------------------------------------------------------------------------------ the server's admin token


@pytest.mark.parametrize(
    ("addr", "exposed"),
    [
        ("127.0.0.1:50551", False),
        ("127.8.0.1:50551", False),
        ("[::1]:50551", False),
        ("localhost:50551", False),
        ("0.0.0.0:50551", True),
        ("[::]:50551", True),
        ("10.1.2.3:50551", True),
        ("server:50551", True),  # a name may resolve to any interface
    ],
)
def test_the_admin_token_is_required_beyond_loopback(addr, exposed):
    said = exposed_without_token(addr, "")
    assert bool(said) == exposed
    assert exposed_without_token(addr, "a-token") == ""
    if exposed:
        assert said.startswith(f"YANTRA_SERVER_ADDR={addr} listens beyond loopback, and no YANTRA_ADMIN_TOKEN is set")
    assert exposed_without_token(addr, "", "YANTRA_HTTP_ADDR").startswith("YANTRA_HTTP_ADDR=") == exposed


@pytest.mark.parametrize("setting", ["YANTRA_SERVER_ADDR", "YANTRA_HTTP_ADDR"])
def test_the_server_will_not_listen_beyond_loopback_without_the_admin_token(tmp_path, setting):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    env |= {"YANTRA_DATA_DIR": str(tmp_path), "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}", "YANTRA_DEVICE": "cpu"}
    env[setting] = f"0.0.0.0:{free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "services.server"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert f"server: {setting}={env[setting]} listens beyond loopback, and no YANTRA_ADMIN_TOKEN" in result.stderr
    assert "loaded" not in result.stderr and "Traceback" not in result.stderr  # refused before the model loads


def test_asyncios_tls_close_notice_is_dropped_and_its_other_warnings_kept(caplog):
    import logging

    from services.core.nats_security import quiet_tls_eof_warning

    quiet_tls_eof_warning()
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        logging.getLogger("asyncio").warning("returning true from eof_received() has no effect when using ssl")
        logging.getLogger("asyncio").warning("Task was destroyed but it is pending!")
    assert [r.getMessage() for r in caplog.records] == ["Task was destroyed but it is pending!"]
