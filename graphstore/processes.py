"""Start the library's worker processes from preloaded forkservers instead of bare spawns.

Every process the runtime starts used to be a *spawn*: a fresh interpreter that imports torch,
PyG and GLT before doing anything (4.4 s for GLT's sampling module alone here, ~7 s while the
other processes of a 2-core machine do the same). That cost was paid

- by every GLT sampling worker: a graph-store loader starts one per storage server for each
  compute rank, one rank after the other, so creating one loader took ~11 s with 2 ranks and
  2 servers (a training run creates four);
- by every storage server session and every compute worker, once per inference node type.

A *forkserver* imports the modules once; each process is then forked from it in a fraction of a
second. The rules stay those of spawn: arguments travel to the child by pickling (tensors through
shared memory) and the child shares no threads, RPC agents or CUDA state with its parent, because
the forkserver never creates any. Where the platform has no forkserver, spawn is used as before.

Ordering: the forkserver starts (in the background) when :func:`preloaded_context` is first
called, and keeps the environment and the preload list of that moment for the life of the calling
process; nothing in the library changes ``os.environ`` after that.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import forkserver
from types import ModuleType
from typing import Any, Callable, Sequence

COMPUTE_PRELOAD = ("graphstore.training.trainer", "graphstore.inference", "graphlearn_torch")
"""What compute workers (training and inference) import."""
SESSION_PRELOAD = ("graphstore.storage.server", "graphlearn_torch")
"""What a storage server session imports."""
SAMPLING_PRELOAD = ("graphlearn_torch.distributed.dist_sampling_producer",)
"""What a GLT sampling worker imports."""


def preloaded_context(preload: Sequence[str]):
    """A multiprocessing context whose new processes start with ``preload`` already imported.

    The forkserver is started now, so its imports overlap with whatever the caller does next.
    One forkserver serves a process: the first call's ``preload`` is the one it keeps.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    forkserver.ensure_running()
    return ctx


def start_workers(fn: Callable[..., None], args: tuple, nprocs: int,
                  preload: Sequence[str] = COMPUTE_PRELOAD) -> None:
    """``torch.multiprocessing.spawn(fn, args, nprocs, join=True)``, from a preloaded forkserver.

    Raises torch's ``ProcessRaisedException`` / ``ProcessExitedException`` when a worker fails,
    as spawn does.
    """
    import torch.multiprocessing as tmp

    method = preloaded_context(preload).get_start_method()
    tmp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method=method)


class _PreloadedMultiprocessing:
    """``torch.multiprocessing`` whose ``get_context('spawn')`` answers a preloaded context."""

    def __init__(self, base: ModuleType) -> None:
        self._base = base
        self._context = preloaded_context(SAMPLING_PRELOAD)

    def get_context(self, method: str | None = None) -> Any:
        if method == "spawn":
            return self._context
        return self._base.get_context(method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def preload_glt_sampling_workers() -> None:
    """Make GLT start its sampling workers from a preloaded forkserver. Idempotent.

    ``DistMpSamplingProducer.init`` calls ``mp.get_context('spawn')`` on its module's ``mp``;
    this replaces that module global with a proxy (GLT keeps no other hook; the storage session
    patches ``MP_STATUS_CHECK_INTERVAL`` of the same module the same way). Call it in each
    process that creates sampling producers (a storage session process) before its first loader.
    """
    from graphlearn_torch.distributed import dist_sampling_producer

    if not isinstance(dist_sampling_producer.mp, _PreloadedMultiprocessing):
        dist_sampling_producer.mp = _PreloadedMultiprocessing(dist_sampling_producer.mp)
