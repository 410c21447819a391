"""The image's HEALTHCHECK: exit 0 when the service this container runs is healthy, 1 (with why) when not.

The inference server is asked through the standard gRPC health service (`grpc.health.v1.Health/Check`, the
server as a whole), on the port of YANTRA_SERVER_ADDR: it answers SERVING once its model is loaded and its
port bound. Every other service has no endpoint: it is healthy while its process runs (and is not stopped).

    python docker/healthcheck.py [SERVICE|- [PID]]

SERVICE (or -) defaults to the one PID serves (`yantra serve SERVICE`, the image's entrypoint); PID to 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TIMEOUT_S = 5.0


def served_by(pid: int) -> str:
    """The service a `yantra serve SERVICE` process runs, from its command line; "" when it runs none."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for i, arg in enumerate(args[:-1]):
        if arg == b"serve":
            return args[i + 1].decode()
    return ""


def process_problem(pid: int) -> str | None:
    """Why process `pid` is not running, or None when it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return f"process {pid} is gone"
    state = stat.rpartition(")")[2].split()[0]  # after "(command name)", which may hold spaces
    if state in ("Z", "X", "T", "t"):
        return f"process {pid} is {'stopped' if state in 'Tt' else 'dead'} (state {state})"
    return None


def server_problem(addr: str) -> str | None:
    """Why the gRPC health service at `addr`'s port does not say SERVING, or None when it does."""
    import grpc  # only the server's check needs it
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):  # bound to every interface: ask on loopback
        host = "127.0.0.1"
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            return f"gRPC health at {target}: {exc.code().name} {exc.details() or ''}".strip()
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"gRPC health at {target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return None


def main(argv: list[str]) -> int:
    pid = int(argv[2]) if len(argv) > 2 else 1
    service = argv[1] if len(argv) > 1 and argv[1] != "-" else served_by(pid)
    problem = process_problem(pid)
    if problem is None and service == "server":
        problem = server_problem(os.environ.get("YANTRA_SERVER_ADDR", "127.0.0.1:50551"))
    if problem:
        print(f"unhealthy: {service or 'the service'}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
