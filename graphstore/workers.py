"""Spawn a compute machine's worker processes and turn a worker's death into one line.

:class:`WorkerPool` starts the processes of one session before the session has work: each imports
torch, GLT and PyG (seconds on a busy machine) while its parent agrees on the cluster or runs
the previous session, then waits for ``(fn, args)`` and runs ``fn(local_rank, *args)``, once.
:func:`spawn_workers` is a pool used at once.

``torch.multiprocessing.spawn`` ends the other workers when one fails (each worker also gets
SIGINT if the machine's main process dies: torch sets ``PR_SET_PDEATHSIG``), then raises
``ProcessExitedException`` (killed, or exited non-zero without a Python exception, e.g. a
heartbeat's ``os._exit(1)``) or ``ProcessRaisedException`` (with the worker's traceback as text).
:func:`spawn_workers` maps them onto the error contract (graphstore.errors), naming the worker:

- killed / non-zero exit -> :class:`RuntimeFailure`: ``compute process rank 1 (local rank 1,
  pid 4242) was killed by signal SIGKILL`` (exit 1);
- a ``GraphstoreError`` raised inside a worker -> ``UsageError`` or ``RuntimeFailure`` as its class
  derives (so a user's mistake still exits 2), its message prefixed with the worker, no traceback;
- any other exception (a bug) -> re-raised as is, with the worker's traceback.
"""

from __future__ import annotations

import importlib
import os
import re
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

from graphstore.errors import GraphstoreError, RuntimeFailure, UsageError

_EXCEPTION_LINE = re.compile(r"^graphstore(\.\w+)+(: |$)")


def _pooled(local_rank: int, inboxes: Sequence[Connection]) -> None:
    """A pool process: wait for its one piece of work (None: none after all), then run it."""
    import graphlearn_torch  # noqa: F401  (the slow import, torch and PyG with it, before the work)

    inbox = inboxes[local_rank]
    work = inbox.recv()
    for conn in inboxes:
        conn.close()
    if work is None:
        return
    fn, args = work
    fn(local_rank, *args)


class WorkerPool:
    """``nprocs`` spawned processes waiting for one ``fn(local_rank, *args)`` each (module docs).

    ``run`` hands every process the work and joins them (the error contract of
    :func:`spawn_workers`); ``close`` ends processes that never got work. Use it once.
    """

    def __init__(self, nprocs: int) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        pipes = [ctx.Pipe(duplex=False) for _ in range(nprocs)]  # (reader, writer) each
        self._writers = [w for _, w in pipes]
        self.nprocs = nprocs
        self._context = mp.start_processes(_pooled, args=([r for r, _ in pipes],), nprocs=nprocs,
                                           join=False, start_method="spawn")
        for reader, _ in pipes:
            reader.close()
        self._used = False

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, first_rank: int,
            what: str = "compute process") -> None:
        """Run ``fn(local_rank, *args)`` on every process and join them: returns when all exited
        0, raises as the module docs say otherwise."""
        if self._used:
            raise RuntimeError("WorkerPool.run: a pool runs one piece of work")
        self._used = True
        for writer in self._writers:
            writer.send((fn, tuple(args)))
        _join(self._context, first_rank, what)

    def close(self) -> None:
        """End the processes: told to stop when they never got work; any still running after
        that (a failed ``run``) are killed. Idempotent."""
        import signal

        if not self._used:
            self._used = True
            for writer in self._writers:
                try:
                    writer.send(None)
                except OSError:  # that process is gone already
                    pass
        for writer in self._writers:
            writer.close()
        for proc in self._context.processes:
            proc.join(timeout=10)
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
                proc.join(timeout=10)


def spawn_workers(fn: Callable[..., None], args: Sequence[Any], nprocs: int, *, first_rank: int,
                  what: str = "compute process") -> None:
    """Run ``fn(local_rank, *args)`` in ``nprocs`` spawned processes and join them.

    ``first_rank``: the global rank of local rank 0 (named in errors with each local rank).
    Returns when every worker exited 0; raises as the module docs say otherwise.
    """
    pool = WorkerPool(nprocs)
    try:
        pool.run(fn, args, first_rank=first_rank, what=what)
    finally:
        pool.close()


def _join(context: Any, first_rank: int, what: str) -> None:
    """Join a torch ``ProcessContext``, the error contract applied (module docs)."""
    import torch.multiprocessing as mp

    try:
        while not context.join():
            pass
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
