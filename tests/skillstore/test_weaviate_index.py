"""Choosing the Weaviate backend (WEAVIATE_URL) and starting without one: what runs with no Weaviate at all. What the
backend holds and answers is tests/skillstore/test_index_contract.py, against a real Weaviate."""

from __future__ import annotations

import logging
import re
import sys

import pytest
from pydantic import ValidationError

from services.core.nats_launcher import free_port
from services.core.settings import Settings, settings_problem
from services.skillstore import __main__ as skillstore_main
from services.skillstore.library import IndexUnavailable, JsonSkillLibrary
from services.skillstore.weaviate_index import Endpoint, connect, endpoint


def test_the_url_names_rest_and_grpc():
    assert endpoint("http://weaviate:8080") == Endpoint("weaviate", 8080, False, 50051)
    assert endpoint("https://skills.example") == Endpoint("skills.example", 443, True, 50051)
    assert endpoint("http://127.0.0.1:18080?grpc_port=15051") == Endpoint("127.0.0.1", 18080, False, 15051)
    for bad, why in (
        ("weaviate:8080", "not an http(s)://HOST:PORT URL"),
        ("http://h:8080?grpc_port=grpc", "grpc_port=grpc is not a port"),
        ("http://h:99999", "not an http(s)://HOST:PORT URL"),
    ):
        with pytest.raises(ValueError, match=re.escape(why)):
            endpoint(bad)


def test_the_setting_is_checked_and_reaches_children(monkeypatch):
    monkeypatch.delenv("WEAVIATE_URL", raising=False)
    assert Settings.from_env().weaviate_url == "" and "WEAVIATE_URL" not in Settings.from_env().env()  # embedded
    monkeypatch.setenv("WEAVIATE_URL", "http://weaviate:8080")
    settings = Settings.from_env()
    assert settings.weaviate_url == "http://weaviate:8080" and settings.env()["WEAVIATE_URL"] == "http://weaviate:8080"
    monkeypatch.setenv("WEAVIATE_URL", "weaviate:8080")
    with pytest.raises(ValidationError) as exc:
        Settings.from_env()
    assert settings_problem(exc.value) == "WEAVIATE_URL=weaviate:8080: not an http(s)://HOST:PORT URL"


def test_an_unset_url_keeps_the_embedded_library(tmp_path):
    index = skillstore_main.open_index(Settings(data_dir=tmp_path))
    assert isinstance(index, JsonSkillLibrary) and index.path == tmp_path / "skills" / "library.json"


def test_a_weaviate_that_does_not_answer_is_one_line():
    pytest.importorskip("weaviate")
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(IndexUnavailable) as exc:
        connect(url, patience_s=0)
    message = str(exc.value)
    assert message.startswith(f"cannot use Weaviate at {url}: ") and "Connection refused" in message, message
    assert "\n" not in message


def test_no_client_installed_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "weaviate", None)  # what `import weaviate` finds where it is not installed
    with pytest.raises(
        IndexUnavailable, match=r"weaviate-client is not installed: pip install 'gpuyantra\[weaviate\]'"
    ):
        connect("http://127.0.0.1:8080")


def test_the_service_starting_without_its_weaviate_exits_2_with_one_line(monkeypatch, caplog):
    """`python -m services.skillstore` (compose runs it as `yantra serve skillstore`): no traceback, status 2."""
    pytest.importorskip("weaviate")
    monkeypatch.setattr(skillstore_main, "WEAVIATE_PATIENCE_S", 0.0)
    monkeypatch.setenv("WEAVIATE_URL", f"http://127.0.0.1:{free_port()}")
    with caplog.at_level(logging.INFO):
        assert skillstore_main.run() == 2
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None, errors
    assert errors[0].getMessage().startswith("skillstore: cannot use Weaviate at http://127.0.0.1:")
