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
