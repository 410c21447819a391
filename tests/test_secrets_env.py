"""Secrets from NAME_FILE (services/core/secrets_env.py), read from real files."""

from __future__ import annotations

import pytest

from services.core.secrets_env import MAX_SECRET_BYTES, SECRETS, SecretFileError, with_file_secrets

SECRET = "s3cr3t-v4lue"


def test_each_secret_may_come_from_a_file_and_one_trailing_newline_goes(tmp_path):
    env = {"YANTRA_MODEL": "tiny-qwen2"}
    for i, name in enumerate(SECRETS):
        path = tmp_path / name.lower()
        path.write_text(f"{SECRET}-{i}\n" if i % 2 else f"{SECRET}-{i}\r\n")
        env[f"{name}_FILE"] = str(path)
    got = with_file_secrets(env)
    assert {name: got[name] for name in SECRETS} == {name: f"{SECRET}-{i}" for i, name in enumerate(SECRETS)}
    assert got["YANTRA_MODEL"] == "tiny-qwen2" and "NATS_PASSWORD" not in env  # a copy: env is left alone


def test_the_environment_alone_is_left_as_it_is():
    env = {"YANTRA_ADMIN_TOKEN": SECRET, "NATS_PASSWORD_FILE": ""}  # an empty NAME_FILE is unset
    assert with_file_secrets(env) == env


def _refusal(env: dict[str, str]) -> str:
    with pytest.raises(SecretFileError) as err:
        with_file_secrets(env)
    message = str(err.value)
    assert SECRET not in message  # never the value
    return message


def test_what_cannot_give_a_secret_is_one_line_naming_the_variable_and_the_file(tmp_path):
    good = tmp_path / "good"
    good.write_text(SECRET)
    both = _refusal({"YANTRA_ADMIN_TOKEN": SECRET, "YANTRA_ADMIN_TOKEN_FILE": str(good)})
    assert "both YANTRA_ADMIN_TOKEN and YANTRA_ADMIN_TOKEN_FILE" in both

    missing = tmp_path / "missing"
    assert f"NATS_PASSWORD_FILE={missing}: cannot read it" in _refusal({"NATS_PASSWORD_FILE": str(missing)})
    assert "cannot read it" in _refusal({"NATS_PASSWORD_FILE": str(tmp_path)})  # a directory

    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert "empty" in _refusal({"YANTRA_ADMIN_TOKEN_FILE": str(empty)})

    two_lines = tmp_path / "two"
    two_lines.write_text(f"{SECRET}\nuser\n")
    assert "more than one line" in _refusal({"NATS_TOKEN_FILE": str(two_lines)})

    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    assert "not UTF-8" in _refusal({"NATS_TOKEN_FILE": str(binary)})

    huge = tmp_path / "huge"
    huge.write_text("x" * (MAX_SECRET_BYTES + 1))
    assert "larger than" in _refusal({"NATS_TOKEN_FILE": str(huge)})
