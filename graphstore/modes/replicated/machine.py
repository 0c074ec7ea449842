"""A compute machine's parent in replicated mode (the ``ComputeMachine`` of
graphstore.modes.machine).

Order, on every machine of the stage's job (C compute machines, no storage):

  1. the run's graph files on this machine's disk (graphstore.modes.replicated.run_files: used in
     place from a local run folder, copied and verified from ``gs://``);
  2. the dataset source: a :class:`~graphstore.modes.replicated.dataset.ReplicatedDataset` over them
     (training samples the ``train`` view when the file has one, inference the ``full`` view);
  3. this machine's part of the Ray cluster (graphstore.modes.replicated.cluster: an embedded Ray for
     one machine; a head node and joined nodes for more);
  4. runs: on the leader (machine 0), each :meth:`ReplicatedMachine.run` is one
     ``TorchTrainer.fit`` over the C x L workers of every machine (graphstore.modes.replicated.workers),
     its outcome published to the others; the others wait for that outcome;
  5. close: the cluster is ended (every Ray process this machine started), then the copies of
     the graph files are removed.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Sequence

from graphstore.runtime.errors import GraphstoreError, UsageError
from graphstore.modes.replicated.cluster import RayCluster, ReplicatedInfo

log = logging.getLogger(__name__)
LOCAL_OBJECT_STORE_BYTES = 1 << 30
"""Ray's object store per node in local runs (batches only pass through it; Ray's default, 30% of
the memory per node, is what Vertex AI machines get)."""


class ReplicatedMachine:
    """See the module docs. ``info`` and ``source`` are what every worker gets."""

    def __init__(self, ctx: Any, topology: Any) -> None:
        from graphstore.modes.replicated.dataset import ReplicatedDataset
        from graphstore.modes.replicated.graph_file import GraphFile
        from graphstore.modes.replicated.run_files import local_graph_files

        res = ctx.stage_resources
        if (res.num_compute_machines, 0) != (topology.num_compute_machines,
                                             topology.num_storage_machines):
            raise UsageError(
                f"resource config says {res.num_compute_machines} compute machines and no storage "
                f"for the replicated {ctx.stage} stage, the cluster has "
                f"{topology.num_compute_machines} compute x {topology.num_storage_machines} storage")
        self.stage = ctx.stage
        self.files = local_graph_files(ctx.run_dir)
        self.cluster: RayCluster | None = None
        try:
            views = GraphFile.open(self.files.graph).views
            view = "train" if ctx.stage == "train" and "train" in views else "full"
            self.source = ReplicatedDataset(self.files.graph, self.files.features, view=view,
                                            bind_host="127.0.0.1" if topology.is_local else "")
            self.info = ReplicatedInfo(
                num_compute_nodes=res.num_compute_machines,
                num_processes_per_compute=res.procs_per_compute, runtime=ctx.task.runtime,
                is_local=topology.is_local,
                num_server_sessions=ctx.storage.storage_args.num_server_sessions,
                gpus_per_compute_machine=res.gpus_per_compute_machine)
            self.cluster = RayCluster.form(
                topology, procs_per_machine=res.procs_per_compute,
                timeout_s=ctx.task.runtime.cluster_init_timeout_s,
                object_store_bytes=LOCAL_OBJECT_STORE_BYTES if topology.is_local else None)
        except BaseException:
            self.close()
            raise
        log.info("replicated %s: graph=%s view=%s machine=%d/%d workers=%d", ctx.stage,
                 self.files.graph, view, topology.machine_index, topology.num_compute_machines,
                 self.info.num_compute_processes)

    def run(self, fn: Callable[..., None], args: Sequence[Any], *, session: int = 0) -> None:
        """The leader runs ``fn`` on every worker of the job (one ``TorchTrainer.fit``); the other
        machines wait for that run's end (RuntimeFailure when it failed)."""
        from graphstore.modes.replicated.workers import run_ray_workers

        if not self.cluster.leader:
            self.cluster.wait_run()
            return
        t0 = time.perf_counter()
        try:
            run_ray_workers(fn, args, self.info.for_session(session),
                            name=f"{self.stage}-{session}")
        except GraphstoreError as exc:
            self.cluster.finish_run(str(exc))
            raise
        except BaseException as exc:
            self.cluster.finish_run(f"{type(exc).__name__}: {exc}")
            raise
        self.cluster.finish_run(None)
        log.info("replicated %s session %d: every worker finished in %.1f s", self.stage, session,
                 time.perf_counter() - t0)

    def close(self) -> None:
        """End the cluster part (every Ray process this machine started), remove the copies."""
        try:
            if self.cluster is not None:
                self.cluster.close()
        finally:
            self.files.remove_copies()


__all__ = ["ReplicatedMachine"]
