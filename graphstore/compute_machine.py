"""A compute machine's parent in every mode: its cluster, its dataset source, how its workers run.

The default trainer and inferencer (graphstore.training.trainer, graphstore.inference) do the same
thing in every mode::

    with compute_machine(ctx, topology) as machine:      # the mode is chosen here, once
        machine.run(_worker, (..., machine.source, ...))  # per session (inference: per node type)

and their workers ``_worker(local_rank, cluster_info, *args)`` open their dataset from
``machine.source`` and never ask which mode they run in. What a mode supplies:

- graph store and colocated (:class:`GltMachine`): the seed-000 sequence (``agree_on_cluster``:
  a temporary global group of all machines, storage included), the dataset source of
  graphstore.dataset_source (a ``RemoteDistDataset`` per worker, or this machine's partition),
  and a graphstore.workers ``WorkerPool`` per session (one process per local rank), each started
  one step ahead: session 0's before the agreement, session k + 1's when session k starts, so
  the workers' imports overlap with what the machine does meanwhile;
- replicated (``resource config mode: replicated``; graphstore.replicated.machine): the graph
  file on this machine's disk, this machine's part of the stage's Ray cluster, the
  ``ReplicatedDataset`` over the file, and one Ray Train ``TorchTrainer.fit`` per session over
  every machine's workers, which the leader machine drives while the others serve as Ray nodes.

``close()`` (the context's exit) ends what the machine started, whatever happened.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Protocol, Sequence

from graphstore.dataset_source import DatasetSource, dataset_source
from graphstore.workers import WorkerPool


class ComputeMachine(Protocol):
    """A compute machine's parent (module docs). ``info``: the cluster description workers get
    (``GraphStoreInfo`` / ``ReplicatedInfo``); ``source``: what each worker opens its dataset from."""

    info: Any
    source: DatasetSource

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, session: int = 0) -> None:
        """``fn(local_rank, info.for_session(session), *args)`` on the workers; returns when
        every worker returned, raises the error contract's error otherwise."""

    def close(self) -> None: ...


class GltMachine:
    """Graph store and colocated: GLT's cluster, one spawned process per local rank."""

    def __init__(self, ctx: Any, topology: Any) -> None:
        from graphstore.graph_store_info import agree_on_cluster
        from graphstore.ports import PortHold

        self.sessions = ctx.storage.storage_args.num_server_sessions
        # spawned, not forked from a server: see graphstore.processes for why
        self._pools = {0: WorkerPool(ctx.stage_resources.procs_per_compute)}
        self.session_ports = PortHold(hold_s=math.inf)  # bound by the sessions' compute groups
        try:
            self.info = agree_on_cluster(ctx, topology, self.session_ports)
            self.source = dataset_source(self.info, ctx.shards_uri, ctx.storage.storage_args)
        except BaseException:
            self.close()
            raise

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, session: int = 0) -> None:
        info = self.info.for_session(session)
        nprocs = info.num_processes_per_compute
        pool = self._pools.pop(session, None) or WorkerPool(nprocs)
        if session + 1 < self.sessions and session + 1 not in self._pools:
            self._pools[session + 1] = WorkerPool(nprocs)  # imports while this session runs
        try:
            pool.run(fn, (info, *args), first_rank=info.compute_rank(0))  # a death: one line
        finally:
            pool.close()

    def close(self) -> None:
        """End the pools that got no session, release the session ports (the pools' joined
        processes bound them)."""
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self.session_ports.close()


@contextlib.contextmanager
def compute_machine(ctx: Any, topology: Any) -> Iterator[ComputeMachine]:
    """This compute machine's parent for ``ctx``'s stage (a graphstore.stage.StageContext and
    the graphstore.env.ClusterTopology of the job), closed on exit."""
    if ctx.stage_resources.replicated:
        from graphstore.replicated.machine import ReplicatedMachine

        machine: ComputeMachine = ReplicatedMachine(ctx, topology)
    else:
        machine = GltMachine(ctx, topology)
    try:
        yield machine
    finally:
        machine.close()


__all__ = ["ComputeMachine", "GltMachine", "compute_machine"]
