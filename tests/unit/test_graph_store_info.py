"""GraphStoreInfo arithmetic and the bounded readiness wait (real marker files)."""

from __future__ import annotations

import threading
import time

import pytest

from graphstore.config import RuntimeConfig
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.modes.graph_store.info import GraphStoreInfo, mark_ready, wait_ready


def _info(tmp_path, **kw) -> GraphStoreInfo:
    base = dict(num_storage_nodes=3, num_compute_nodes=2, num_processes_per_compute=4,
                storage_node_ips=("s0", "s1", "s2"), compute_node_ips=("c0", "c1"),
                storage_rpc_ports=(1001, 1002), compute_pg_ports=(2001, 2002),
                readiness_uri=str(tmp_path / "ready"), runtime=RuntimeConfig(readiness_timeout_s=1.0),
                is_local=True, machine_role="compute", machine_index=1)
    base.update(kw)
    return GraphStoreInfo(**base)


def test_ranks_sessions_and_masters(tmp_path):
    info = _info(tmp_path)
    assert info.num_compute_processes == 8 and info.num_server_sessions == 2
    assert [info.compute_rank(r) for r in range(4)] == [4, 5, 6, 7]
    s1 = info.for_session(1)
    assert (s1.storage_rpc_port, s1.compute_pg_port, s1.storage_cluster_master_ip) == (1002, 2002, "s0")
    with pytest.raises(UsageError, match="session 2 does not exist"):
        info.for_session(2)
    with pytest.raises(UsageError):
        _info(tmp_path, machine_role="storage").compute_rank(0)
    colocated = _info(tmp_path, num_storage_nodes=0, storage_node_ips=())
    assert colocated.colocated and colocated.storage_cluster_master_ip == "c0"


def test_wait_ready_names_missing_storage_ranks_and_is_bounded(tmp_path):
    info = _info(tmp_path)
    mark_ready(info, 0, 0)
    mark_ready(info, 0, 2)
    t0 = time.monotonic()
    with pytest.raises(RuntimeFailure, match=r"storage rank\(s\) \[1\] not ready for session 0"):
        wait_ready(info, 0, poll_s=0.05)
    assert time.monotonic() - t0 < 3


def test_wait_ready_returns_once_every_marker_exists(tmp_path):
    info = _info(tmp_path, runtime=RuntimeConfig(readiness_timeout_s=10.0))
    for i in (0, 1):
        mark_ready(info, 1, i)
    late = threading.Timer(0.3, lambda: mark_ready(info, 1, 2))
    late.start()
    t0 = time.monotonic()
    wait_ready(info, 1, poll_s=0.05)
    assert 0.2 < time.monotonic() - t0 < 5
    with pytest.raises(RuntimeFailure):  # markers of session 1 do not count for session 0
        wait_ready(_info(tmp_path), 0, poll_s=0.05)
