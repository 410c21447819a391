"""The TUI against a nats-server that speaks TLS and wants a user (what `yantra up --secure` starts): live mode and
replay from the stream connect with the settings' CA and user; without the CA the replay is refused in one line."""

from __future__ import annotations

import time

import pytest
import tui_fixtures as fx
from tui_pilot_helpers import until

from services.core.bus import Bus
from services.core.nats_launcher import start_nats
from services.core.nats_security import NatsSecurity, TlsFiles, account_users, service_credentials
from services.core.settings import NatsAuth, NatsTls, Settings
from tests.tls_certs import make_tls
from tui.app import LiveConfig, make_app
from tui.sources import ReplayError, load_run


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("tui-tls")
    certs = make_tls(root / "tls")
    # the TUI reads as the commands' user; a whole run is written by a user of no service (each service's own
    # may publish only what it owns, services.core.owners): here, one that stands for all of them
    users = {**service_credentials(("cli",)), "seed": NatsAuth(user="seed", password="seed-pw")}
    security = NatsSecurity(app_users=account_users(users), tls=TlsFiles(certs.cert, certs.key, certs.ca))
    server = start_nats(root / "store", log_file=root / "nats.log", security=security)
    yield server, certs, users["cli"], users["seed"]
    server.stop()


async def test_live_mode_and_replay_connect_with_the_ca_and_the_user(secured, run_id):
    server, certs, cli, seed = secured
    envs = fx.swapped_run(time.time_ns(), run_id=run_id)
    bus = await Bus.connect(server.url, name="test-tui-tls", auth=seed, tls=NatsTls(str(certs.ca)))
    try:
        for env in envs:
            await bus.publish(env)
    finally:
        await bus.close()
    settings = Settings(nats_url=server.url, nats_ca=str(certs.ca), nats_user=cli.user, nats_password=cli.password)
    app = make_app(LiveConfig(settings))
    app.animation_level = "none"
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: run_id in app.state.runs and app.state.runs[run_id].outcome == "swapped")
        assert app.link.state == "connected"
    log = await load_run(server.url, run_id, settings.nats_auth(), settings.nats_tls())
    assert [r.env.event_id for r in log if r.type != "ServerMetrics"] == [e.event_id for e in envs]
    with pytest.raises(ReplayError, match="cannot reach NATS at tls://"):
        await load_run(server.url, run_id, settings.nats_auth())  # no CA: the server's certificate is unverifiable
