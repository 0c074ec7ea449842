"""Heartbeats over torch RPC: a dead peer ends this process with a message naming it, never a hang.

Compute processes ping every storage server; storage sessions ping every compute client. A peer
that has not answered for ``heartbeat_timeout_s`` is declared dead: the process logs which peer
(role, rank, host) and exits with code 1 through ``os._exit`` (GLT's sampling threads may be
blocked inside RPC waits, so a normal exit could hang). ``stop()`` before a planned shutdown, and
``is_finished`` lets a server ignore peers that went away because the session ended normally.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

EXIT_PEER_DEAD = 1


def pong() -> int:
    """The RPC target of a ping (module level, so every peer can import it)."""
    return os.getpid()


def die(message: str) -> None:
    """Log, flush and leave now (used when a peer is dead)."""
    log.error(message)
    print(f"error: {message}", file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(EXIT_PEER_DEAD)


class Heartbeat:
    """Ping ``peers`` (label -> RPC worker name) every ``interval_s`` in a daemon thread."""

    def __init__(self, peers: dict[str, str], *, interval_s: float, timeout_s: float,
                 on_dead: Callable[[str], None] | None = None,
                 is_finished: Callable[[], bool] = lambda: False) -> None:
        self.peers = dict(peers)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_dead = on_dead or (lambda label: die(
            f"{label} did not answer heartbeats for {timeout_s:.0f}s "
            "(graphStoreRuntimeConfig.heartbeatTimeoutS); it has died or hangs"))
        self.is_finished = is_finished
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="graphstore-heartbeat", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.interval_s + 5)

    def _run(self) -> None:
        import torch.distributed.rpc as rpc

        last_ok = {label: time.monotonic() for label in self.peers}
        while not self._stop.wait(self.interval_s):
            futures = {}
            for label, name in self.peers.items():
                try:
                    futures[label] = rpc.rpc_async(name, pong, timeout=self.interval_s)
                except Exception:  # noqa: BLE001 - an agent that refuses to send: peer unreachable
                    futures[label] = None
            for label, fut in futures.items():
                try:
                    if fut is not None:
                        fut.wait()
                        last_ok[label] = time.monotonic()
                except Exception:  # noqa: BLE001 - timeout or broken connection
                    pass
            if self._stop.is_set() or self.is_finished():
                return
            now = time.monotonic()
            for label, t in last_ok.items():
                if now - t > self.timeout_s:
                    self.on_dead(label)
                    return
