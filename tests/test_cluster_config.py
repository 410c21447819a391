"""A cluster's nodes as configured, and what `yantra up --cluster` refuses, before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.core.nats_cluster import cluster_config_text, node_max_file_store, plan_nodes
from services.core.settings import Settings
from services.core.stack import StackError, start_stack

ROOT = Path(__file__).resolve().parents[1]


def test_each_node_has_its_name_its_store_a_share_of_the_disk_and_authenticated_routes(tmp_path):
    plans = plan_nodes(tmp_path, 3)
    assert len({p.name for p in plans}) == 3 and len({p.store_dir for p in plans}) == 3
    assert len({p.port for p in plans} | {p.route_port for p in plans}) == 6
    text = cluster_config_text(plans[0], plans, 5 << 30, "pw")
    assert f'server_name: "{plans[0].name}"' in text and "max_file_store: 5368709120" in text
    assert 'authorization { user: "yantra-route", password: "pw" }' in text
    assert text.count("nats-route://yantra-route:pw@") == 2  # its two peers, not itself
    # three nodes on one disk share three quarters of it, what their stores hold counted in
    assert node_max_file_store(90 << 30, 6 << 30, 3) == 24 << 30
    assert node_max_file_store(0, 0, 3) == 64 << 20  # never nothing


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"nats_url": "nats://127.0.0.1:4222"}, "NATS_URL names another server"),
        ({"nats_port": 4333}, "--nats-port (YANTRA_NATS_PORT)"),
    ],
)
def test_a_cluster_beside_another_nats_is_refused_in_one_line(tmp_path, settings, said):
    with pytest.raises(StackError, match="--cluster starts its own nodes") as refused:
        start_stack(Settings(data_dir=tmp_path, **settings), (), cluster=3)
    assert said in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "nats-cluster").exists()  # nothing started


def test_the_cluster_size_is_checked_by_the_command_line(tmp_path):
    cmd = [sys.executable, "-m", "services.cli", "up", "--cluster", "2", "--data-dir", str(tmp_path)]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--cluster: 2 is outside 3..5" in result.stderr
