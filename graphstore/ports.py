"""Picking TCP ports that stay free between the pick and their use.

Every port the runtime hands out (storage RPC masters, compute process-group masters, the master
port of each loader's sampling workers) is picked in one process and bound seconds later in
another. A port picked by binding to port 0 comes from the kernel's ephemeral range, the range the
kernel also draws from for every outgoing connection and for every other bind-to-0 listener
(TensorPipe's, several per RPC agent). A storage server that is starting a loader's sampling
workers opens many such sockets in exactly that window, so a bind-to-0 pick can be taken before
its owner binds it; GLT's sampling worker then dies before its start barrier and the server waits
on that barrier forever (seen in CI as a 120 s RPC timeout while creating a loader).

So ports are drawn at random from the span just below the ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel never hands out by itself, and
each is checked by binding it. This module imports nothing heavy: ``pipeline/`` uses it too.
"""

from __future__ import annotations

import random
import socket

from graphstore.errors import RuntimeFailure

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_START = 32768  # Linux's default; used where the file cannot be read
SPAN = 12000  # how many ports below the ephemeral range are drawn from
MAX_ATTEMPTS = 2000


def ephemeral_start() -> int:
    """First port of the kernel's ephemeral range."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free on ``host`` now and outside the ephemeral range.

    ``host`` is the address the port will be bound on ("" = all interfaces). The ports are held
    together while picking (so they are distinct) and released on return. Falls back to kernel
    picks (bind to port 0) when the span below the ephemeral range is under 1000 ports.
    """
    high = ephemeral_start()
    low = max(1024, high - SPAN)
    draw = random.Random()  # seeded from os.urandom: processes picking at once do not collide
    held: list[socket.socket] = []
    try:
        for _ in range(MAX_ATTEMPTS):
            if len(held) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, draw.randrange(low, high) if high - low >= 1000 else 0))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise RuntimeFailure(f"found only {len(held)} of {count} free TCP ports in "
                                 f"{low}..{high - 1} on {host or 'all interfaces'}")
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()
