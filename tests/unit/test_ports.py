import socket

import pytest

from graphstore.runtime import ports
from graphstore.runtime.errors import RuntimeFailure


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    start = ports.ephemeral_start()
    picked = ports.free_ports(20, "127.0.0.1")
    assert len(set(picked)) == 20
    assert all(max(1024, start - ports.SPAN) <= p < start for p in picked), (start, picked)
    for p in picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def _occupy_most_of_the_span(family: int, address: str) -> list[socket.socket]:
    """Sockets bound on ``address`` to every port it can of the 1000 below the ephemeral range
    but the last 20 (the caller squeezes ``ports.SPAN`` to 1000); the caller closes them."""
    start = ports.ephemeral_start()
    held = []
    for p in range(start - 1000, start - 20):
        s = socket.socket(family)
        try:
            s.bind((address, p))
        except OSError:
            s.close()
            continue
        held.append(s)
    return held


def test_a_port_in_use_is_never_picked(monkeypatch, tmp_path):
    # squeeze the span to 1000 ports and hold most of them: the rest must be the picks
    monkeypatch.setattr(ports, "SPAN", 1000)
    held = _occupy_most_of_the_span(socket.AF_INET, "127.0.0.1")
    try:
        taken = {s.getsockname()[1] for s in held}
        picked = ports.free_ports(3, "127.0.0.1")
        assert not taken & set(picked)
        with pytest.raises(RuntimeFailure, match="free TCP ports"):
            ports.free_ports(40, "127.0.0.1")
    finally:
        for s in held:
            s.close()


def test_reads_the_kernel_range_and_falls_back(monkeypatch, tmp_path):
    f = tmp_path / "range"
    f.write_text("40000\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(f))
    assert ports.ephemeral_start() == 40000
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(tmp_path / "missing"))
    assert ports.ephemeral_start() == ports.DEFAULT_EPHEMERAL_START


def _plain_bind_refused(family: int, address: str, port: int) -> bool:
    with socket.socket(family) as s:
        try:
            s.bind((address, port))
        except OSError:
            return True
        return False


@pytest.mark.skipif(not socket.has_ipv6, reason="needs IPv6")
def test_a_port_taken_on_any_address_is_never_picked(monkeypatch):
    # TCPStore listens on [::] (else 0.0.0.0) whatever address it is given: a port some process
    # holds on another address (here IPv6 loopback) is not free even though 127.0.0.1 would bind
    monkeypatch.setattr(ports, "SPAN", 1000)
    held = _occupy_most_of_the_span(socket.AF_INET6, "::1")
    try:
        taken = {s.getsockname()[1] for s in held}
        for _ in range(5):
            assert not taken & set(ports.free_ports(3, "127.0.0.1"))
    finally:
        for s in held:
            s.close()


def test_a_held_port_refuses_every_plain_bind_but_not_its_tcpstore():
    import datetime

    import torch.distributed as dist

    hold = ports.PortHold(hold_s=60)
    try:
        port, = hold.ports(1)
        assert hold.held == [port]
        # another picker (ours binds without SO_REUSEADDR) and the kernel's own binds are refused
        assert _plain_bind_refused(socket.AF_INET, "127.0.0.1", port)
        assert _plain_bind_refused(socket.AF_INET, "", port)
        if socket.has_ipv6:
            assert _plain_bind_refused(socket.AF_INET6, "::", port)
        # ... while torch's store, which binds with SO_REUSEADDR, listens on it and serves
        store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=datetime.timedelta(seconds=10))
        client = dist.TCPStore("127.0.0.1", port, 1, False, timeout=datetime.timedelta(seconds=10))
        store.set("k", "v")
        assert client.get("k") == b"v"
        del client, store
    finally:
        hold.close()
    assert hold.held == []
    # released: a plain bind succeeds again
    assert not _plain_bind_refused(socket.AF_INET, "127.0.0.1", port)


def test_held_ports_expire_on_the_next_pick(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(ports.time, "monotonic", lambda: now[0])
    hold = ports.PortHold(hold_s=10)
    try:
        first = hold.ports(2)
        now[0] += 5
        second = hold.ports(1)
        assert not set(first) & set(second)
        assert sorted(hold.held) == sorted(first + second)
        now[0] += 6  # the first two expired, the third has 4 s left
        third = hold.ports(1)
        assert sorted(hold.held) == sorted(second + third)
        assert not _plain_bind_refused(socket.AF_INET, "127.0.0.1", first[0])
    finally:
        hold.close()


def test_the_span_above_the_ephemeral_range_is_used_when_below_is_too_small(monkeypatch, tmp_path):
    f = tmp_path / "range"
    f.write_text("1500\t50000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", str(f))
    picked = ports.free_ports(10)
    assert all(50001 <= p < 50001 + ports.SPAN for p in picked), picked
    f.write_text("1024\t65535\n")  # nowhere left: the kernel picks
    assert len(set(ports.free_ports(3))) == 3
