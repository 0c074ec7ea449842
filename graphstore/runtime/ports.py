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
(``/proc/sys/net/ipv4/ip_local_port_range``), which the kernel never hands out by itself (or,
where that span is too small, the span above it), and each is checked by binding it on every
interface: torch's ``TCPStore`` (GLT's RPC masters, gloo groups) listens on ``[::]`` / ``0.0.0.0``
whatever address it was given, so a port free on 127.0.0.1 only is not free for it (CI once lost a
loader this way: the sampling workers' store failed to bind ``[::]`` and ``0.0.0.0`` on a port
picked seconds before, and the compute process's loader creation timed out after 60 s).

A picked port can still be taken between the pick and its use by another process picking from the
same span. :class:`PortHold` closes that window: it keeps each port it hands out bound (with
``SO_REUSEADDR``, never listening) for ``hold_s``. Every plain bind (another pick, a kernel
bind-to-port-0) is refused while it holds, and ``TCPStore``, which binds with ``SO_REUSEADDR``,
still binds it (tests/unit/test_ports.py). Hold ports only for users that bind with
``SO_REUSEADDR`` (torch's stores), which is every port the storage servers and colocated loaders
hand out. This module imports nothing heavy: ``pipeline/`` uses it too.
"""

from __future__ import annotations

import errno
import random
import socket
import threading
import time

from graphstore.runtime.errors import RuntimeFailure

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_START = 32768  # Linux's default; used where the file cannot be read
DEFAULT_EPHEMERAL_END = 60999
SPAN = 12000  # how many ports below the ephemeral range are drawn from
MAX_ATTEMPTS = 2000
DEFAULT_HOLD_S = 600.0
"""How long :class:`PortHold` keeps a port it handed out: longer than any loader's creation
(the RPC timeout bounds it) and short enough that a process creating loaders all day holds few."""


def ephemeral_range() -> tuple[int, int]:
    """First and last port of the kernel's ephemeral range (Linux's defaults where the file cannot
    be read)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            first, last = f.read().split()[:2]
        return int(first), int(last)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_START, DEFAULT_EPHEMERAL_END


def ephemeral_start() -> int:
    """First port of the kernel's ephemeral range."""
    return ephemeral_range()[0]


def _span() -> tuple[int, int]:
    """``[low, high)``: where ports are drawn from (module docs); ``(0, 0)``: nowhere, let the
    kernel pick."""
    first, last = ephemeral_range()
    below = max(1024, first - SPAN), first
    above = last + 1, min(65536, last + 1 + SPAN)
    for low, high in (below, above):
        if high - low >= 1000:
            return low, high
    return 0, 0


def _bind_everywhere(port: int) -> socket.socket | None:
    """A socket bound to ``port`` on every interface (IPv6 dual-stack where the kernel has it,
    else IPv4), without ``SO_REUSEADDR``: None when anything else holds the port on any address."""
    for family, any_address in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 in this kernel
            continue
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((any_address, port))
            return sock
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                return None  # a dual-stack bind conflicts with any user of the port
    return None


def _pick(count: int, host: str) -> list[socket.socket]:
    """``count`` sockets bound to distinct free ports of the span (module docs), on every
    interface. ``host`` only names the address in the error."""
    low, high = _span()
    draw = random.Random()  # seeded from os.urandom: processes picking at once do not collide
    held: list[socket.socket] = []
    try:
        attempts = 0
        while len(held) < count and attempts < MAX_ATTEMPTS:
            attempts += 1
            sock = _bind_everywhere(draw.randrange(low, high) if high else 0)
            if sock is not None:
                held.append(sock)
        if len(held) == count:
            return held
        raise RuntimeFailure(f"found only {len(held)} of {count} free TCP ports in "
                             f"{low}..{high - 1} on {host or 'all interfaces'}")
    except BaseException:
        for sock in held:
            sock.close()
        raise


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free now on every interface and outside the ephemeral range.

    ``host`` is the address the port will be bound on ("" = all interfaces), named in errors;
    the check binds every interface (module docs). The ports are held together while picking (so
    they are distinct) and released on return: another process may take one before its user binds
    it; :class:`PortHold` prevents that. Falls back to kernel picks (bind to port 0) when neither
    the span below nor the span above the ephemeral range has 1000 ports.
    """
    held = _pick(count, host)
    picked = [sock.getsockname()[1] for sock in held]
    for sock in held:
        sock.close()
    return picked


class PortHold:
    """Free ports that stay reserved for ``hold_s`` after they are handed out (module docs).

    Owned by a long-lived object of the process that answers port requests (a storage server
    session, a compute process); :meth:`close` (or process exit) releases everything.
    Thread-safe: a storage session answers port requests on several RPC threads.
    """

    def __init__(self, hold_s: float = DEFAULT_HOLD_S) -> None:
        self.hold_s = hold_s
        self._held: list[tuple[float, socket.socket]] = []
        self._lock = threading.Lock()

    def ports(self, count: int, host: str = "127.0.0.1") -> list[int]:
        """Like :func:`free_ports`, but each port stays bound here (``SO_REUSEADDR``, not
        listening) for ``hold_s``: no other process's pick or plain bind can take it, while its
        user's ``TCPStore`` can. Releases the holds that have expired first."""
        with self._lock:
            now = time.monotonic()
            kept = []
            for deadline, sock in self._held:
                if deadline > now:
                    kept.append((deadline, sock))
                else:
                    sock.close()
            self._held = kept
            picked = _pick(count, host)
            for sock in picked:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self._held.append((now + self.hold_s, sock))
            return [sock.getsockname()[1] for sock in picked]

    @property
    def held(self) -> list[int]:
        """The ports held now (expired holds included until the next :meth:`ports`)."""
        with self._lock:
            return [sock.getsockname()[1] for _, sock in self._held]

    def close(self) -> None:
        """Release every hold."""
        with self._lock:
            for _, sock in self._held:
                sock.close()
            self._held = []
