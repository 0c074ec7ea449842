"""Spawn a compute machine's worker processes and turn a worker's death into one line.

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
import re
from typing import Any, Callable, Sequence

from graphstore.errors import GraphstoreError, RuntimeFailure, UsageError

_EXCEPTION_LINE = re.compile(r"^graphstore(\.\w+)+(: |$)")


def spawn_workers(fn: Callable[..., None], args: Sequence[Any], nprocs: int, *, first_rank: int,
                  what: str = "compute process") -> None:
    """Run ``fn(local_rank, *args)`` in ``nprocs`` spawned processes and join them.

    ``first_rank``: the global rank of local rank 0 (named in errors with each local rank).
    Returns when every worker exited 0; raises as the module docs say otherwise.
    """
    import torch.multiprocessing as mp

    try:
        mp.spawn(fn, args=tuple(args), nprocs=nprocs, join=True)
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
