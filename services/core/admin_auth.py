"""A bearer token for the inference server's Admin RPCs (pure; the server checks, clients send).

CaptureProfile and MeasureDecode hold the engine for as long as they ask (up to 100 repeats of
4096 tokens), and ListSwaps shows what is deployed: where the server's port is reachable by others
(compose publishes it), they need a shared secret, YANTRA_ADMIN_TOKEN. Health stays open for probes,
and generation is the public surface. Unset, nothing is required, which only a server on loopback may be:
`exposed_without_token` is what the server refuses to start with (the embedded stack binds loopback).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from services.core.settings import is_loopback

HEADER = "authorization"
ADMIN_PREFIX = "/yantra.v1.Admin/"
OPEN_METHODS = frozenset({"/yantra.v1.Admin/Health"})


def metadata(token: str) -> tuple[tuple[str, str], ...]:
    """What a client sends with an Admin call (nothing when no token is configured)."""
    return ((HEADER, f"Bearer {token}"),) if token else ()


def needs_token(method: str) -> bool:
    return method.startswith(ADMIN_PREFIX) and method not in OPEN_METHODS


def authorized(sent: Iterable[tuple[str, str | bytes]] | None, token: str) -> bool:
    """Whether the call's metadata carries `token` (compared in constant time); always True without one."""
    if not token:
        return True
    expected = f"Bearer {token}".encode()
    for key, value in sent or ():
        if key.lower() == HEADER:
            got = value if isinstance(value, bytes) else value.encode()
            return hmac.compare_digest(got, expected)
    return False


def exposed_without_token(addr: str, token: str, setting: str = "YANTRA_SERVER_ADDR") -> str:
    """Why the server must not listen on `addr` (`setting`'s "host:port") with `token`, in one line; "" when it may.

    Beyond loopback (every interface, a network address, a name other than localhost) the port is reachable by
    others, and without a token its Admin RPCs are theirs: profile captures and decode measurements that hold the
    engine, and the list of what is deployed.
    """
    if token or is_loopback(addr.rpartition(":")[0]):
        return ""
    return (
        f"{setting}={addr} listens beyond loopback, and no YANTRA_ADMIN_TOKEN is set: a server others can reach needs"
        " one, or its Admin RPCs (which hold the engine) are theirs; set YANTRA_ADMIN_TOKEN (or"
        " YANTRA_ADMIN_TOKEN_FILE), or listen on 127.0.0.1"
    )
