"""Rendezvous stores whose address is loopback listen on loopback only.

Every process group and every torch RPC agent of a graph-store job meets through a c10d
``TCPStore`` hosted by its rank 0: our own groups (``graphstore.modes.graph_store.info``,
``graphstore.modes.graph_store.compute``), a user module's ``init_process_group``, and everything GLT 0.2.4 starts
(``init_server`` / ``init_client`` / ``init_worker_group`` + ``init_rpc``, each loader's sampling
workers), which all pass a ``tcp://host:port`` init method to torch. torch 2.3 builds that store in
``torch.distributed.rendezvous._create_c10d_store`` (``tcp://`` and ``env://`` alike), and the
store's server binds every interface whatever ``host`` says (measured: ``LISTEN [::]:port`` for
``tcp://127.0.0.1:port``, i.e. reachable from the network, unauthenticated).

torch 2.3's ``TCPStore`` accepts ``master_listen_fd``: a socket the caller has bound and put in
listening state. :func:`bind_loopback_stores` wraps ``_create_c10d_store`` so that rank 0 of a
store whose host is a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) gets such a
socket bound to that very address. This changes nothing for the store's clients: they connect to
that loopback address, which is the only one a loopback host can be reached at anyway. Every other
store (a private-network address on Vertex AI, another rank, a port of 0, torchelastic's agent
store, a ``use_libuv`` request: torch 2.3's libuv backend hung given a listen fd, measured) is built
by torch's own function unchanged. When the port is already bound in this process (a multi-tenant
store torch reuses), torch's function runs too, as before.

The other listeners of a job follow ``TP_SOCKET_IFNAME`` (TensorPipe's transport and channel
listeners) and ``GLOO_SOCKET_IFNAME`` (gloo's device listener), else the address the host name
resolves to; the local launcher sets both to the loopback interface (pipeline/launch.py).

Invariant: once this module is imported, every rendezvous store created in this process and in
processes forked from it after the import (GLT's sampling workers fork from a forkserver that
imports it: graphstore.runtime.processes) obeys the rule above. Importing it installs the wrapper
(idempotent); ``graphstore.modes.graph_store.info`` imports it, so every graph-store program has it
before its first process group.
"""

from __future__ import annotations

import datetime
import socket
from typing import Any, Callable

from graphstore.runtime.env import is_loopback
from graphstore.runtime.errors import RuntimeFailure

_PATCHED_ATTR = "_graphstore_loopback"
_EXPECTED_PARAMS = ("hostname", "port", "rank", "world_size", "timeout", "use_libuv")


def loopback_listener(host: str, port: int) -> socket.socket | None:
    """A socket bound to ``host:port`` (``localhost`` -> ``127.0.0.1``) and listening, or None
    when the port is taken. ``SO_REUSEADDR`` as torch sets it on its own listeners."""
    address = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        return None
    return sock


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def _create_c10d_store(hostname: str, port: int, rank: int, world_size: int,
                           timeout: datetime.timedelta, use_libuv: bool = False) -> Any:
        from torch.distributed import TCPStore
        from torch.distributed.rendezvous import _torchelastic_use_agent_store

        if (rank != 0 or port == 0 or use_libuv or not is_loopback(hostname)
                or _torchelastic_use_agent_store()):
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        sock = loopback_listener(hostname, port)
        if sock is None:  # taken (maybe by a store of this process torch reuses): torch decides
            return original(hostname, port, rank, world_size, timeout, use_libuv)
        # the store owns the descriptor from here on (it closes it when it is destroyed)
        return TCPStore(hostname, port, world_size, True, timeout, multi_tenant=True,
                        master_listen_fd=sock.detach())

    setattr(_create_c10d_store, _PATCHED_ATTR, True)
    _create_c10d_store.__wrapped__ = original  # type: ignore[attr-defined]
    return _create_c10d_store


def bind_loopback_stores() -> None:
    """Install the wrapper described in the module docs into this process. Idempotent.

    Raises:
        RuntimeFailure: torch's ``_create_c10d_store`` is missing or has another signature than
            torch 2.3's (the stack pins torch 2.3.0; docs/stack.md), so loopback binding cannot be
            guaranteed.
    """
    import importlib
    import inspect

    import torch

    # the module (``torch.distributed.rendezvous`` the attribute is the function of that name)
    rendezvous = importlib.import_module("torch.distributed.rendezvous")

    original = getattr(rendezvous, "_create_c10d_store", None)
    if original is not None and getattr(original, _PATCHED_ATTR, False):
        return
    params = tuple(inspect.signature(original).parameters) if callable(original) else ()
    if params != _EXPECTED_PARAMS:
        raise RuntimeFailure(
            f"torch {torch.__version__}: torch.distributed.rendezvous._create_c10d_store is not "
            f"the torch 2.3 function graphstore.runtime.rendezvous wraps (parameters {params}); local "
            "rendezvous stores cannot be bound to loopback. Install the pinned torch==2.3.0")
    rendezvous._create_c10d_store = _wrap(original)


bind_loopback_stores()
