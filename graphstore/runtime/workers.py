"""Start a compute machine's worker processes and turn a worker's death into one line.

Workers are forked from a *forkserver* that imported the worker's module (the trainer or the
inferencer: torch, GLT and PyG, ~3.5 s of CPU per process here) once: :func:`start_worker_server`
starts it early, so its imports overlap with the machine's agreement on the cluster, and every
session's workers then start in a fraction of a second instead of importing it all again (a
machine with L local ranks saved L imports per session: the inferencer runs one session per node
type). A forkserver child leaves with ``os._exit``, without interpreter shutdown, so a worker must
not exit while a peer is still in its graceful RPC shutdown: ``shutdown_compute_process`` ends
with a barrier of the compute group after the RPC shutdown (graphstore.modes.graph_store.compute). Where there is
no forkserver (not Linux), workers are spawned.

``torch.multiprocessing.start_processes`` ends the other workers when one fails, then raises
``ProcessExitedException`` (killed, or exited non-zero without a Python exception, e.g. a
heartbeat's ``os._exit(1)``) or ``ProcessRaisedException`` (with the worker's traceback as text).
A worker whose machine's main process dies goes with it: torch sets ``PR_SET_PDEATHSIG`` to the
forkserver, which exits when the main process does. :func:`spawn_workers` maps the errors onto the
error contract (graphstore.runtime.errors), naming the worker:

- killed / non-zero exit -> :class:`RuntimeFailure`: ``compute process rank 1 (local rank 1,
  pid 4242) was killed by signal SIGKILL`` (exit 1);
- a ``GraphstoreError`` raised inside a worker -> ``UsageError`` or ``RuntimeFailure`` as its class
  derives (so a user's mistake still exits 2), its message prefixed with the worker, no traceback;
- any other exception (a bug) -> re-raised as is, with the worker's traceback.
"""

from __future__ import annotations

import importlib
import multiprocessing
import re
from typing import Any, Callable, Sequence

from graphstore.runtime.errors import GraphstoreError, RuntimeFailure, UsageError

_EXCEPTION_LINE = re.compile(r"^graphstore(\.\w+)+(: |$)")


def _start_method() -> str:
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start_worker_server(preload: Sequence[str]) -> None:
    """Start this process's forkserver now, importing ``preload`` (module names) in the
    background; call it before anything slow, once (later calls change nothing: the server keeps
    the modules and the environment of its start)."""
    if _start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    forkserver.ensure_running()


def stop_worker_server() -> None:
    """Stop this process's forkserver, if one runs, and wait for it (it would stop once this
    process exits anyway, but a launcher that ends a machine's leftover processes would find it
    still running). CPython's ``ForkServer`` has no public stop; ``_stop`` closes the pipe the
    server watches and reaps it."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._stop()


def spawn_workers(fn: Callable[..., None], args: Sequence[Any], nprocs: int, *, first_rank: int,
                  what: str = "compute process") -> None:
    """Run ``fn(local_rank, *args)`` in ``nprocs`` worker processes and join them.

    ``first_rank``: the global rank of local rank 0 (named in errors with each local rank).
    Returns when every worker exited 0; raises as the module docs say otherwise.
    """
    import torch.multiprocessing as mp

    try:
        mp.start_processes(fn, args=tuple(args), nprocs=nprocs, join=True,
                           start_method=_start_method())
    except mp.ProcessExitedException as exc:
        how = (f"was killed by signal {exc.signal_name}" if exc.signal_name
               else f"exited with code {exc.exit_code}")
        raise RuntimeFailure(f"{_who(what, first_rank, exc.error_index, exc.pid)} {how}; the "
                             "machine's other processes were ended") from None
    except mp.ProcessRaisedException as exc:
        error = _contract_error(str(exc))
        if error is None:
            raise
        cls, message = error
        raise cls(f"{_who(what, first_rank, exc.error_index, exc.pid)}: {message}") from None


def _who(what: str, first_rank: int, local_rank: int, pid: int) -> str:
    return f"{what} rank {first_rank + local_rank} (local rank {local_rank}, pid {pid})"


def _contract_error(trace: str) -> tuple[type[GraphstoreError], str] | None:
    """The error class and message when ``trace`` (a worker's formatted traceback) ends with one
    of our exceptions (a ``graphstore`` ``GraphstoreError``; its message may span lines); None
    otherwise."""
    lines = trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if _EXCEPTION_LINE.match(lines[i]):
            break
    else:
        return None
    if any(line.startswith("Traceback (most recent call last)") for line in lines[i + 1:]):
        return None  # ours was handled, and another exception ended the worker
    name, _, first = lines[i].partition(": ")
    module, _, cls_name = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), cls_name, None)
    except ImportError:
        return None
    if not isinstance(cls, type) or not issubclass(cls, GraphstoreError):
        return None
    # the base class of the same exit code: subclasses may take other constructor arguments
    base = UsageError if issubclass(cls, UsageError) else RuntimeFailure
    return base, "\n".join([first, *lines[i + 1:]]).strip() or cls_name
