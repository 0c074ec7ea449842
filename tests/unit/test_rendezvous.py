"""graphstore.runtime.rendezvous: a rendezvous store whose address is loopback listens on loopback only.

Real stores on real sockets of this process; what listens is read back with psutil (from
/proc/net/tcp{,6}). torch 2.3 alone binds every interface (``::``) for these same URLs.
"""

from __future__ import annotations

import datetime

import psutil
import pytest
import torch
import torch.distributed as dist

import graphstore.runtime.rendezvous  # noqa: F401  (installs the loopback binding)
from graphstore.runtime.ports import free_ports


def _listening(port: int) -> list[str]:
    return sorted(c.laddr.ip for c in psutil.Process().net_connections("tcp")
                  if c.status == psutil.CONN_LISTEN and c.laddr.port == port)


@pytest.mark.parametrize("host,bound", [("127.0.0.1", "127.0.0.1"), ("[::1]", "::1"),
                                        ("localhost", "127.0.0.1")])
def test_tcp_rendezvous_store_on_a_loopback_host_listens_there_only(host: str, bound: str) -> None:
    port = free_ports(1)[0]
    url = f"tcp://{host}:{port}?rank=0&world_size=1"
    store, _, _ = next(dist.rendezvous(url, timeout=datetime.timedelta(seconds=20)))
    try:
        assert _listening(port) == [bound]
        client = dist.TCPStore(bound, port, 1, False, timeout=datetime.timedelta(seconds=20))
        client.set("k", "v")
        assert store.get("k") == b"v"
        del client
    finally:
        del store
    assert _listening(port) == []  # the store closed the socket it was given


def test_env_process_group_on_loopback_listens_on_loopback_only(monkeypatch) -> None:
    port = free_ports(1)[0]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", init_method="env://", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        assert _listening(port) == ["127.0.0.1"]
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
