"""A nats-server cluster on loopback (`yantra up --cluster N`, and the tests that kill its leaders): N nodes, each
with JetStream, so a stream kept with N replicas outlives any one node.

Each node has its own server_name, store dir and an explicit max_file_store: nodes sharing a disk would each assume
75% of it, and promise replicas room that is not there. The routes between nodes need a user and password of their
own (random per start, in configs only their owner may read), so another process on the machine cannot join the
cluster as a node and read the log. With a `NatsSecurity` every node has the same accounts and users, and TLS on its
client listener and its routes (services.core.nats_security); a node listening beyond loopback must have both.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from services.core.nats_launcher import (
    LocalNats,
    UnsafeConfig,
    client_auth_lines,
    connect_host,
    free_port,
    launch,
    listen_addr,
    wait_listening,
    write_config,
)
from services.core.nats_security import (
    NatsSecurity,
    listener_problem,
    quoted,
    route_tls_lines,
    security_problem,
    server_security_lines,
)
from services.core.settings import NatsAuth

CLUSTER_NAME = "yantra"
ROUTE_USER = "yantra-route"
# The share of its disk JetStream takes when it is not told otherwise; the nodes split it between them.
STORE_SHARE = 0.75
MIN_NODE_STORE = 64 << 20  # the least a node is given: what one stream reserves at the least (streams.py)


@dataclass(frozen=True)
class NodePlan:
    """Where one node listens and keeps its store; `monitor_port` 0: no HTTP monitoring (tests ask /jsz for the
    meta leader)."""

    name: str
    port: int
    route_port: int
    store_dir: Path
    monitor_port: int = 0
    host: str = "127.0.0.1"  # where its client and route ports listen

    @property
    def url(self) -> str:
        return f"nats://{listen_addr(connect_host(self.host), self.port)}"


def node_max_file_store(free_bytes: int, stored_bytes: int, nodes: int) -> int:
    """Bytes of JetStream store each of `nodes` nodes on one disk may use: together, STORE_SHARE of what the disk
    has for them (its free bytes and what their stores hold already), never below MIN_NODE_STORE."""
    return max(MIN_NODE_STORE, int((free_bytes + stored_bytes) * STORE_SHARE) // max(1, nodes))


def plan_nodes(
    root: Path, nodes: int, avoid: Collection[int] = (), *, monitor: bool = False, host: str = "127.0.0.1"
) -> list[NodePlan]:
    """`nodes` nodes named yantra-1.., each with free client and route ports (outside `avoid`) on `host` and a store
    under `root`."""
    taken = set(avoid)
    plans = []
    for i in range(1, nodes + 1):
        ports = []
        for _ in range(3 if monitor else 2):
            ports.append(free_port(taken))
            taken.add(ports[-1])
        monitor_port = ports[2] if monitor else 0
        plans.append(NodePlan(f"{CLUSTER_NAME}-{i}", ports[0], ports[1], root / f"node-{i}", monitor_port, host))
    return plans


def cluster_config_text(
    node: NodePlan,
    peers: list[NodePlan],
    max_file_store: int,
    route_password: str,
    auth: NatsAuth | None = None,
    security: NatsSecurity | None = None,
) -> str:
    """nats-server's config for `node` of a cluster of `peers` (itself among them or not). UnsafeConfig when
    `security` cannot go with `auth`, or a port of the node would listen beyond loopback without TLS."""
    problem = (
        security_problem(security, auth)
        or listener_problem(f"node {node.name}", node.host, security.tls if security else None)
        or listener_problem(f"the routes of node {node.name}", node.host, security.route_tls if security else None)
    )
    if problem:
        raise UnsafeConfig(problem)
    routes = [
        quoted(f"nats-route://{ROUTE_USER}:{route_password}@{listen_addr(connect_host(p.host), p.route_port)}")
        for p in peers
        if p.name != node.name
    ]
    lines = [
        f"# written by yantra for node {node.name} of its nats-server cluster; rewritten on each start",
        f"server_name: {quoted(node.name)}",
        f"listen: {quoted(listen_addr(node.host, node.port))}",
        f"jetstream {{ store_dir: {quoted(str(node.store_dir))}, max_file_store: {int(max_file_store)} }}",
        "cluster {",
        f"  name: {quoted(CLUSTER_NAME)}",
        f"  listen: {quoted(listen_addr(node.host, node.route_port))}",
        f"  authorization {{ user: {quoted(ROUTE_USER)}, password: {quoted(route_password)} }}",
        f"  routes: [{', '.join(routes)}]",
        *route_tls_lines(security),
        "}",
    ]
    if node.monitor_port:  # monitoring stays on loopback wherever the node listens: it has no authentication
        lines.append(f"http: {quoted(f'127.0.0.1:{node.monitor_port}')}")
    return "\n".join(lines + client_auth_lines(auth) + server_security_lines(security)) + "\n"


def _stored_bytes(store_dir: Path) -> int:
    if not store_dir.exists():
        return 0
    return sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file())


@dataclass
class LocalCluster:
    """The nodes of a local cluster, in plan order; `url` is every node's, separated by commas (NATS_URL)."""

    plans: list[NodePlan]
    nodes: list[LocalNats]
    log_files: list[Path]
    auth: NatsAuth | None = field(default=None, repr=False)
    tls: bool = False  # its nodes require TLS of clients: its URLs say tls://

    @property
    def url(self) -> str:
        urls = [plan.url for plan in self.plans]
        return ",".join(url.replace("nats://", "tls://", 1) if self.tls else url for url in urls)

    def index_of(self, server_name: str) -> int:
        return [plan.name for plan in self.plans].index(server_name)

    def dead(self) -> list[tuple[int, int]]:
        """(index, exit code) of each node that has exited."""
        return [(i, node.process.returncode) for i, node in enumerate(self.nodes) if node.process.poll() is not None]

    def kill(self, index: int) -> None:
        """SIGKILL one node, as a crash would."""
        proc = self.nodes[index].process
        proc.kill()
        proc.wait()

    def restart(self, index: int, timeout: float = 10.0) -> None:
        """Start node `index` again with its config and store as they are (RuntimeError when it does not)."""
        node = self.nodes[index]
        node.stop()
        proc = launch(node.config_file, self.log_files[index])
        wait_listening(proc, node.port, timeout, self.log_files[index], node.host)
        self.nodes[index] = LocalNats(proc, node.port, node.store_dir, node.config_file, node.auth, node.tls, node.host)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            node.stop()


def start_cluster(
    root: Path,
    nodes: int = 3,
    *,
    auth: NatsAuth | None = None,
    avoid: Collection[int] = (),
    monitor: bool = False,
    max_file_store: int | None = None,
    timeout: float = 10.0,
    security: NatsSecurity | None = None,
    host: str = "127.0.0.1",
) -> LocalCluster:
    """Start `nodes` nats-server nodes under `root` (node-I/ the store, node-I.conf, node-I.log) and wait until each
    accepts connections; JetStream elects its leader a few seconds later (clients retry meanwhile). With `auth`,
    every client must present it; with `security`, each client its own user of the APP account, and TLS on the
    client ports and the routes (services.core.nats_security). `host`: where the nodes listen; beyond loopback only
    with both TLS. `max_file_store`: each node's; default: `node_max_file_store` of the disk. UnsafeConfig, in one
    line, for a config that must not run (before anything is started); OSError when a store or a config cannot be
    written; RuntimeError when a node does not start (the nodes started are stopped)."""
    root.mkdir(parents=True, exist_ok=True)
    plans = plan_nodes(root, nodes, avoid, monitor=monitor, host=host)
    stored = sum(_stored_bytes(p.store_dir) for p in plans)
    max_store = max_file_store or node_max_file_store(shutil.disk_usage(root).free, stored, nodes)
    route_password = secrets.token_hex(16)
    texts = [cluster_config_text(plan, plans, max_store, route_password, auth, security) for plan in plans]
    tls = bool(security and security.tls)
    procs: list[subprocess.Popen] = []
    cluster = LocalCluster(plans, [], [root / f"node-{i + 1}.log" for i in range(nodes)], auth, tls)
    try:
        for i, plan in enumerate(plans):
            plan.store_dir.mkdir(parents=True, exist_ok=True)
            config = root / f"node-{i + 1}.conf"
            write_config(config, texts[i])
            procs.append(launch(config, cluster.log_files[i]))
            cluster.nodes.append(LocalNats(procs[-1], plan.port, plan.store_dir, config, auth, tls, host))
        for i, plan in enumerate(plans):
            wait_listening(procs[i], plan.port, timeout, cluster.log_files[i], host)
    except BaseException:
        cluster.stop()
        raise
    return cluster
