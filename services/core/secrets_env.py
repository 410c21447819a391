"""Secrets read from files: NAME_FILE names a file holding NAME's value.

Docker (compose and swarm `secrets:`) and Kubernetes mount a secret as a file; pointing NAME_FILE at it keeps
the value off the command line, where `ps` shows it to every user of the machine, and out of the container's
environment as `docker inspect` lists it. `Settings.from_env` reads its environment through `with_file_secrets`,
so each secret below may be given either way.

What is refused, in one line that names the variable and the file but never the value: NAME and NAME_FILE both
set (which one would win is a guess), a file that cannot be read, is not UTF-8, is larger than a secret is, or
holds more than one line, and an empty one (an empty admin token or password turns its protection off).
One trailing newline is dropped: `echo secret > file` writes one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SECRETS = ("NATS_PASSWORD", "NATS_TOKEN", "YANTRA_ADMIN_TOKEN")
MAX_SECRET_BYTES = 64 * 1024  # far past any token or password; bounds a path pointed at /dev/zero by mistake


class SecretFileError(ValueError):
    """A NAME_FILE that cannot give NAME a value; the message names both, never the value."""


def read_secret_file(name: str, path: str) -> str:
    """The secret `name` from the file at `path` (what `name`_FILE says); SecretFileError when it cannot be."""
    var = f"{name}_FILE"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise SecretFileError(f"{var}={path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_SECRET_BYTES:
        raise SecretFileError(f"{var}={path}: larger than {MAX_SECRET_BYTES} bytes, which no secret is")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretFileError(f"{var}={path}: not UTF-8 text") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise SecretFileError(f"{var}={path}: the file is empty, and an empty {name} would turn its protection off")
    if "\n" in text or "\r" in text or "\0" in text:
        raise SecretFileError(f"{var}={path}: more than one line (a secret is one line)")
    return text


def with_file_secrets(env: Mapping[str, str], names: Iterable[str] = SECRETS) -> dict[str, str]:
    """A copy of `env` in which each secret NAME in `names` whose NAME_FILE is set holds that file's content.

    NAME_FILE set to "" counts as unset. SecretFileError for what the module docstring lists.
    """
    out = dict(env)
    for name in names:
        path = env.get(f"{name}_FILE", "")
        if not path:
            continue
        if env.get(name):
            raise SecretFileError(f"both {name} and {name}_FILE are set: give the secret one way")
        out[name] = read_secret_file(name, path)
    return out
