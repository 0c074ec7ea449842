import socket

import pytest

from graphstore import ports
from graphstore.errors import RuntimeFailure


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    start = ports.ephemeral_start()
    picked = ports.free_ports(20, "127.0.0.1")
    assert len(set(picked)) == 20
    assert all(max(1024, start - ports.SPAN) <= p < start for p in picked), (start, picked)
    for p in picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_port_in_use_is_never_picked(monkeypatch, tmp_path):
    # squeeze the span to 1000 ports and hold most of them: the rest must be the picks
    start = ports.ephemeral_start()
    monkeypatch.setattr(ports, "SPAN", 1000)
    held = []
    try:
        for p in range(start - 1000, start - 20):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                s.close()
                continue
            held.append(s)
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
