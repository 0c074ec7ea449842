"""A compute machine's parent in every mode: its cluster, its dataset source, how its workers run.

The default trainer and inferencer (graphstore.training.trainer, graphstore.inference.inferencer) do the same
thing in every mode::

    with compute_machine(ctx, topology, __name__) as machine:  # the mode is chosen here, once
        machine.run(_worker, (..., machine.source, ...))  # per session (inference: per node type)

and their workers ``_worker(local_rank, cluster_info, *args)`` open their dataset from
``machine.source`` and never ask which mode they run in. What a mode supplies:

- graph store and colocated (:class:`GltMachine`): the seed-000 sequence (``agree_on_cluster``:
  a temporary global group of all machines, storage included), the dataset source of
  :func:`_glt_dataset_source` (a ``RemoteDistDataset`` per worker, or this machine's partition),
  and one worker process per local rank and session, forked from a server that imported the
  worker's module once (graphstore.runtime.workers; started before the agreement, so its imports
  overlap with it and with the storage machines' loading);
- replicated (``resource config mode: replicated``; graphstore.modes.replicated.machine): the graph
  file on this machine's disk, this machine's part of the stage's Ray cluster, the
  ``ReplicatedDataset`` over the file, and one Ray Train ``TorchTrainer.fit`` per session over
  every machine's workers, which the leader machine drives while the others serve as Ray nodes.

``close()`` (the context's exit) ends what the machine started, whatever happened. The partition
task's mode-specific output (:func:`write_mode_files`) is chosen here too.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator, Protocol, Sequence

from graphstore.modes.cluster_info import ClusterInfo, DatasetSource
from graphstore.runtime.workers import spawn_workers, start_worker_server, stop_worker_server


class ComputeMachine(Protocol):
    """A compute machine's parent (module docs). ``info``: the cluster description workers get
    (graphstore.modes.cluster_info); ``source``: what each worker opens its dataset from."""

    info: ClusterInfo
    source: DatasetSource

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, session: int = 0) -> None:
        """``fn(local_rank, info.for_session(session), *args)`` on the workers; returns when
        every worker returned, raises the error contract's error otherwise."""

    def close(self) -> None: ...


class GltMachine:
    """Graph store and colocated: GLT's cluster, one spawned process per local rank."""

    def __init__(self, ctx: Any, topology: Any, worker_module: str) -> None:
        from graphstore.modes.graph_store.info import agree_on_cluster
        from graphstore.runtime.ports import PortHold

        start_worker_server((worker_module,))  # imports while we agree on the cluster
        self.session_ports = PortHold(hold_s=math.inf)  # bound by the sessions' compute groups
        self.info = agree_on_cluster(ctx, topology, self.session_ports)
        self.source = _glt_dataset_source(self.info, ctx.shards_uri, ctx.storage.storage_args)

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, session: int = 0) -> None:
        info = self.info.for_session(session)
        spawn_workers(fn, (info, *args), info.num_processes_per_compute,
                      first_rank=info.compute_rank(0))  # a worker's death: one line

    def close(self) -> None:
        """Release the session ports (spawn_workers joined the processes that bound them), stop
        the worker server."""
        self.session_ports.close()
        stop_worker_server()


def _glt_dataset_source(info: Any, shards_uri: str, storage_args: Any) -> DatasetSource:
    """Graph store or colocated (``info``: the GraphStoreInfo agreed on): colocated, this
    machine's partition, built once and shared by its workers; graph store, a handle that opens
    a ``RemoteDistDataset`` in each worker."""
    if info.colocated:
        from graphstore.modes.colocated.dataset import DistDataset

        return DistDataset.from_shards(shards_uri, info.machine_index, storage_args)
    from graphstore.modes.graph_store.remote_dataset import RemoteSource

    return RemoteSource()


@contextlib.contextmanager
def compute_machine(ctx: Any, topology: Any, worker_module: str) -> Iterator[ComputeMachine]:
    """This compute machine's parent for ``ctx``'s stage (a graphstore.config.stage.StageContext and
    the graphstore.runtime.env.ClusterTopology of the job), closed on exit. ``worker_module``: the module
    of the worker function ``run`` will be given (its imports are done once, ahead)."""
    if ctx.stage_resources.replicated:
        from graphstore.modes.replicated.machine import ReplicatedMachine

        machine: ComputeMachine = ReplicatedMachine(ctx, topology)
    else:
        machine = GltMachine(ctx, topology, worker_module)
    try:
        yield machine
    finally:
        machine.close()


def write_mode_files(task: Any, res: Any, run_dir: str) -> dict:
    """What the partition task writes beyond the shards for the stages' mode (``task`` and
    ``res``: the run's frozen configs), as a summary for its stage record: replicated mode, the
    graph and features files (graphstore.modes.replicated.run_files, each replaced whole); graph
    store and colocated read the shards themselves, so nothing ({})."""
    if not res.trainer.replicated:
        return {}
    from graphstore.modes.replicated.run_files import write_run_graph_files

    return write_run_graph_files(task, run_dir)


__all__ = ["ComputeMachine", "GltMachine", "compute_machine", "write_mode_files"]
