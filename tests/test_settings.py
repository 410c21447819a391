"""Settings from the environment."""

from __future__ import annotations

from pathlib import Path

from services.core.settings import Settings


def test_a_relative_data_dir_is_made_absolute(monkeypatch, tmp_path):
    # The judge's sandbox runs in its own scratch directory: a relative path would point elsewhere there.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("YANTRA_DATA_DIR", ".yantra")
    settings = Settings.from_env()
    assert settings.data_dir == tmp_path / ".yantra" and settings.data_dir.is_absolute()
    assert Settings.from_env(data_dir="rel").data_dir == Path(tmp_path / "rel")


def test_child_environment_round_trips(monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    settings = Settings.from_env(model="tiny-llama")
    for key, value in settings.env().items():
        monkeypatch.setenv(key, value)
    assert Settings.from_env() == settings


def test_the_admin_token_reaches_children_and_never_a_repr(monkeypatch):
    monkeypatch.setenv("YANTRA_ADMIN_TOKEN", "s3cret")
    settings = Settings.from_env()
    assert settings.admin_token == "s3cret" and settings.env()["YANTRA_ADMIN_TOKEN"] == "s3cret"
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings)
    monkeypatch.delenv("YANTRA_ADMIN_TOKEN")
    assert "YANTRA_ADMIN_TOKEN" not in Settings.from_env().env()


def test_serving_options_reach_the_server_from_the_command_line(monkeypatch, tmp_path):
    import argparse

    from services.cli.common import add_common, settings_of

    parser = argparse.ArgumentParser()
    add_common(parser, model=True)
    monkeypatch.delenv("YANTRA_GRAPHS", raising=False)
    monkeypatch.delenv("YANTRA_BATCH", raising=False)
    default = settings_of(parser.parse_args(["--data-dir", str(tmp_path)]))
    assert default.graphs and default.batch is None and "YANTRA_BATCH" not in default.env()
    chosen = settings_of(parser.parse_args(["--data-dir", str(tmp_path), "--no-graphs", "--batch", "16"]))
    assert not chosen.graphs and chosen.batch == 16
    assert chosen.env()["YANTRA_GRAPHS"] == "0" and chosen.env()["YANTRA_BATCH"] == "16"
    monkeypatch.setenv("YANTRA_GRAPHS", "0")
    assert not Settings.from_env().graphs
    try:
        parser.parse_args(["--batch", "999"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--batch 999 was accepted")


def _problem(monkeypatch, **env: str) -> str:
    """What settings_of would say of Settings.from_env() under `env` (a one-line error naming the variable)."""
    from pydantic import ValidationError

    from services.core.settings import settings_problem

    with monkeypatch.context() as m:
        for key, value in env.items():
            m.setenv(key, value)
        try:
            Settings.from_env()
        except ValidationError as exc:
            return settings_problem(exc)
    return ""


def test_an_address_whose_port_cannot_be_listened_on_is_refused_naming_its_variable(monkeypatch):
    # gRPC takes 99999 modulo 65536: the server listened on 34463 while `yantra up` said ready on :99999
    assert _problem(monkeypatch, YANTRA_SERVER_ADDR="127.0.0.1:99999") == (
        "YANTRA_SERVER_ADDR=127.0.0.1:99999: the port 99999 is outside 1..65535"
    )
    # port 0 picks any port: no client could find the server then
    assert "outside 1..65535" in _problem(monkeypatch, YANTRA_SERVER_ADDR="127.0.0.1:0")
    no_port = _problem(monkeypatch, YANTRA_SERVER_ADDR="localhost")
    assert no_port.startswith("YANTRA_SERVER_ADDR=localhost: not a host:port")
    assert "is not a number" in _problem(monkeypatch, YANTRA_SERVER_ADDR="127.0.0.1:http")
    assert "in brackets" in _problem(monkeypatch, YANTRA_SERVER_ADDR="::1:50551")
    assert _problem(monkeypatch, YANTRA_METRICS_ADDR="0.0.0.0:70000").startswith("YANTRA_METRICS_ADDR=0.0.0.0:70000:")
    assert _problem(monkeypatch, YANTRA_NATS_PORT="70000").startswith("YANTRA_NATS_PORT=70000:")
    for good in ("127.0.0.1:50551", "[::1]:50551", "server:50551", "0.0.0.0:1", "localhost:65535"):
        assert _problem(monkeypatch, YANTRA_SERVER_ADDR=good) == "", good
    assert _problem(monkeypatch, YANTRA_METRICS_ADDR="") == ""  # no endpoint at all


def test_nats_credentials_come_from_the_admin_token_or_the_external_servers_variables(monkeypatch):
    from services.core.settings import NatsAuth, redact_url

    for var in ("NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "YANTRA_ADMIN_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    assert Settings.from_env().nats_auth() is None  # nothing set: no credential at all
    monkeypatch.setenv("YANTRA_ADMIN_TOKEN", "s3cret")
    assert Settings.from_env().nats_auth() == NatsAuth(token="s3cret")  # the embedded server requires it
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:4222")
    assert Settings.from_env().nats_auth() is None  # an external server is not given the admin token
    monkeypatch.setenv("NATS_USER", "yantra")
    monkeypatch.setenv("NATS_PASSWORD", "pw")
    auth = Settings.from_env().nats_auth()
    assert auth == NatsAuth(user="yantra", password="pw") and "pw" not in repr(auth)
    monkeypatch.setenv("NATS_TOKEN", "tok")
    assert Settings.from_env().nats_auth() == NatsAuth(token="tok")
    monkeypatch.setenv("NATS_URL", "nats://u:p@127.0.0.1:4222")
    assert Settings.from_env().nats_auth() is None  # the URL's own (nats-py reads them from it)
    settings = Settings.from_env()
    assert "pw" not in repr(settings) and "tok" not in repr(settings)
    assert redact_url("nats://u:p@127.0.0.1:4222") == "nats://***@127.0.0.1:4222"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    monkeypatch.delenv("NATS_PASSWORD")
    assert _problem(monkeypatch) == "NATS_USER and NATS_PASSWORD go together: set both, or neither"
    monkeypatch.setenv("NATS_PASSWORD", "typo-in-a-secret")
    monkeypatch.setenv("YANTRA_MAX_REQUESTS", "x")
    assert "typo-in-a-secret" not in _problem(monkeypatch) and "YANTRA_MAX_REQUESTS=x" in _problem(monkeypatch)


def test_secrets_may_come_from_files_and_reach_children_once(monkeypatch, tmp_path):
    from services.core.settings import NatsAuth
    from services.core.stack import Stack

    for var in ("NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "YANTRA_ADMIN_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text("from-a-file\n")
    password.write_text("pw-from-a-file\n")
    monkeypatch.setenv("YANTRA_ADMIN_TOKEN_FILE", str(token))
    settings = Settings.from_env()
    assert settings.admin_token == "from-a-file" and settings.nats_auth() == NatsAuth(token="from-a-file")
    # a child given the value must not be given the file too: both set is refused
    env = Stack(settings, None, "nats://127.0.0.1:4222").child_env()
    assert env["YANTRA_ADMIN_TOKEN"] == "from-a-file" and "YANTRA_ADMIN_TOKEN_FILE" not in env
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:4222")
    monkeypatch.setenv("NATS_USER", "yantra")
    monkeypatch.setenv("NATS_PASSWORD_FILE", str(password))
    assert Settings.from_env().nats_auth() == NatsAuth(user="yantra", password="pw-from-a-file")
    from services.core.settings import env_nats_auth

    assert env_nats_auth("nats://127.0.0.1:4222") == NatsAuth(user="yantra", password="pw-from-a-file")


def test_a_secret_file_that_gives_nothing_is_one_line_for_every_command(tmp_path):
    import os
    import subprocess
    import sys

    missing = tmp_path / "no-such-file"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "YANTRA_"))}
    env["YANTRA_ADMIN_TOKEN_FILE"] = str(missing)
    result = subprocess.run(
        [sys.executable, "-m", "services.cli", "runs", "--data-dir", str(tmp_path)],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.strip() == (
        f"yantra runs: invalid settings: YANTRA_ADMIN_TOKEN_FILE={missing}: cannot read it (No such file or directory)"
    ), result.stderr


def test_the_servers_switch_interval_reaches_it_and_a_bad_one_is_one_line(monkeypatch):
    monkeypatch.delenv("YANTRA_SWITCH_INTERVAL_MS", raising=False)
    assert Settings.from_env().switch_interval_ms == 0.1  # measured on the served sweep, not Python's 5
    monkeypatch.setenv("YANTRA_SWITCH_INTERVAL_MS", "5")
    assert Settings.from_env().env()["YANTRA_SWITCH_INTERVAL_MS"] == "5.0"
    monkeypatch.delenv("YANTRA_SWITCH_INTERVAL_MS")
    for bad in ("0", "-1", "fast"):
        problem = _problem(monkeypatch, YANTRA_SWITCH_INTERVAL_MS=bad)
        assert problem.startswith("YANTRA_SWITCH_INTERVAL_MS") and "\n" not in problem, problem
    assert Settings.from_env().prefill_groups == 4  # graph groups up to 16 prompts: they beat one eager join there
    monkeypatch.setenv("YANTRA_PREFILL_GROUPS", "4")
    assert Settings.from_env().env()["YANTRA_PREFILL_GROUPS"] == "4"
    monkeypatch.delenv("YANTRA_PREFILL_GROUPS")
    for bad in ("0", "many", "65"):
        problem = _problem(monkeypatch, YANTRA_PREFILL_GROUPS=bad)
        assert problem.startswith("YANTRA_PREFILL_GROUPS") and "\n" not in problem, problem


def test_packed_grouped_attention_is_on_unless_switched_off_and_reaches_the_server(monkeypatch):
    monkeypatch.delenv("YANTRA_PACKED_GQA", raising=False)
    assert Settings.from_env().packed_gqa  # no copy of the cache per query head (services.server.gqa_decode)
    assert Settings.from_env().env()["YANTRA_PACKED_GQA"] == "1"
    monkeypatch.setenv("YANTRA_PACKED_GQA", "0")
    assert not Settings.from_env().packed_gqa
    assert Settings.from_env().env()["YANTRA_PACKED_GQA"] == "0"
