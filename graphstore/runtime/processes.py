"""Start GLT's sampling worker processes from a preloaded forkserver instead of a bare spawn.

GLT's ``DistMpSamplingProducer.init`` starts every sampling worker with
``torch.multiprocessing.get_context('spawn')``: a fresh interpreter that imports torch and GLT
before it can sample (4.4 s for that import alone here, more while other processes compete for
the 2 cores). A graph-store loader starts one worker per storage server for each compute rank, one
rank after the other, so creating one loader took ~11 s with 2 ranks and 2 servers, and a training
run creates four. From a *forkserver* that imported GLT once, each worker is forked in a fraction
of a second: loaders are ready in ~2.5–5 s. Arguments still travel to the child by pickling
(tensors through shared memory), exactly as under spawn; the forkserver never touches CUDA or
RPC, so forking from it is safe.

A forkserver child ends with ``os._exit`` (no interpreter shutdown), so a process whose last act
is a *graceful* RPC shutdown vanishes the moment its own shutdown returns, while slower peers may
still be finishing theirs: one training run with compute workers on a forkserver failed in rank
1's ``rpc.shutdown`` with "Connection reset by peer" while another pipeline loaded the machine.
Sampling workers end with ``shutdown_rpc(graceful=False)`` (GLT), so nothing waits on them;
compute workers (forked from their machine's own worker server, graphstore.runtime.workers) wait for each
other after their RPC shutdown (graphstore.modes.graph_store.compute.shutdown_compute_process); storage server
sessions stay on spawn.

GLT has no hook for its start method: :func:`graphstore.dataset.glt_adapter.prepare_sampling_server`
puts a :class:`PreloadedMultiprocessing` in place of the ``mp`` module global that
``DistMpSamplingProducer.init`` calls ``mp.get_context('spawn')`` on, in each process that creates
sampling producers (a storage session process) before its first loader. Ordering: the forkserver
starts when the first sampling producer asks for its context (a GLT loader: one that draws hard
negatives; the partitioned sampler starts none), not when the proxy is built: its preload costs
~3 s of CPU per storage session, which, started with the session, competed with the first
seconds of sampling on a small machine (graph store sampled at 0.44x replicated with it, see
docs/performance.md). It keeps the environment of that moment for the life of the calling
process.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import forkserver
from types import ModuleType
from typing import Any

SAMPLING_PRELOAD = ("graphlearn_torch.distributed.dist_sampling_producer", "graphstore.runtime.rendezvous",
                    "graphstore.runtime.stack_dumps", "graphstore.dataset.sampling_worker")
"""What a GLT sampling worker imports; the forkserver imports it once. graphstore.runtime.rendezvous makes
the RPC store a worker hosts (the first worker of a loader) listen on loopback in local mode;
graphstore.runtime.stack_dumps lets a stalled fetch ask the worker for its stacks;
graphstore.dataset.sampling_worker ends a worker whose batch raised (named as a module: this layer
does not import the dataset layer)."""


def _has_forkserver() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def _preloaded_context():
    """A forkserver context that has imported :data:`SAMPLING_PRELOAD` (started now); spawn
    where there is no forkserver."""
    if not _has_forkserver():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(SAMPLING_PRELOAD))
    forkserver.ensure_running()
    return ctx


class PreloadedMultiprocessing:
    """``torch.multiprocessing`` (``base``) whose ``get_context('spawn')`` answers a forkserver
    context that preloaded :data:`SAMPLING_PRELOAD` (started at the first such call: module
    docs); every other attribute is ``base``'s."""

    def __init__(self, base: ModuleType) -> None:
        self._base = base
        self._context: Any = None

    @property
    def started(self) -> bool:
        """Whether the forkserver (or, without one, the spawn context) was asked for yet."""
        return self._context is not None

    @property
    def answers_stack_dumps(self) -> bool:
        """True when its workers come from the preloaded forkserver (they imported
        graphstore.runtime.stack_dumps; spawned ones did not, and the signal would end them)."""
        return _has_forkserver()

    def get_context(self, method: str | None = None) -> Any:
        if method == "spawn":
            if self._context is None:
                self._context = _preloaded_context()
            return self._context
        return self._base.get_context(method)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)
