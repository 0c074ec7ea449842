"""Storage processes: build the partition once, then serve server sessions one after another.

Order (docs/runtime.md, "Graph-store sessions"):
  1. the temporary global group agrees on ``GraphStoreInfo`` (graphstore.modes.graph_store.info),
     then is destroyed: storage never keeps a process group of its own;
  2. the shard partition ``machine_index`` is loaded and split into tensors
     (graphstore.dataset.partition_graph.load_partition_graph: torch only, this process never imports GLT
     or PyG; each session process builds GLT's dataset over the same shared tensors); from
     gs:// only that partition's files and the shared metadata are downloaded (:func:`load_partition`);
  3. for each of ``num_server_sessions`` sessions, one spawned process: it marks itself ready,
     starts the GLT RPC server (``init_server``), pings its clients (graphstore.runtime.heartbeat), and
     returns when the clients shut the session down. An RPC server cannot accept a second client
     group after the first one left, hence one process per session. Its exit code is checked, and
     it is joined with ``sessionTimeoutS``.

Session 0's process is started before step 1 (:class:`SessionProcess`): it imports torch and GLT
and starts its sampling forkserver (several seconds on a busy machine) while the partition loads,
then waits for its dataset; a process started for a session that never comes is told to stop (or,
failing that, killed) when the storage process ends. Session k + 1's process starts once session
k has exited, not while it serves: started ahead, it held a second session's memory for the whole
of session k (its process and a forkserver with GLT loaded: the storage machine's peak in the
``large`` graph's infer stage, two sessions, was 2,212-2,226 MiB against 1,336-1,338 MiB in
training, 2026-12-05) to save a few seconds of imports per session.

Compute processes talk to a session only through graphstore.dataset.protocol: each session
process registers a :class:`~graphstore.dataset.service.StorageService` over its partition there,
and GLT's ``request_server`` runs ``protocol.call`` on it. This module is storage-only: nothing on
the compute side imports it.
"""

from __future__ import annotations

import io
import logging
import math
import multiprocessing as mp
import pickle
import time
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch

from graphstore.dataset import glt_adapter
from graphstore.config import StorageArgs
from graphstore.runtime.env import ClusterTopology
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.modes.graph_store.info import GraphStoreInfo, agree_on_cluster, mark_ready
from graphstore.runtime.heartbeat import Heartbeat
from graphstore.runtime.ports import PortHold
from graphstore.config.stage import StageContext
from graphstore.dataset import protocol
from graphstore.modes.graph_store.allocator import (map_own_blocks_from, release_freed_memory,
                                                   use_lean_allocators, use_sampling_allocator)
from graphstore.dataset.partition_graph import PartitionGraph, StorageState, glt_dataset, load_partition_graph
from graphstore.dataset.protocol import CLIENT_GROUP, SERVER_GROUP
from graphstore.dataset.service import StorageService

log = logging.getLogger(__name__)

PRODUCER_JOIN_S = 1.0
"""How long a server waits for a loader's sampling worker to exit before terminating it (GLT's
``MP_STATUS_CHECK_INTERVAL``, 5 s; graphstore.dataset.glt_adapter.prepare_sampling_server). A worker in
the middle of an epoch never reads the stop command, so shutting down a training loader cost 5 s
per server per loader (measured: 40 s to close the 4 loaders of a 2-type training run on 2
servers); an idle worker exits at once."""


# -- sessions --------------------------------------------------------------------------------------
def _session_entry(conn: Connection, session: int, storage_index: int,
                   log_level: int) -> None:
    """Body of one server-session process: prepare, then wait for the session's work (a
    ``(graph, state, info)`` tuple; None: no such session after all)."""
    import graphlearn_torch  # noqa: F401  (the slow import, while the previous step runs)

    from graphstore.runtime.cli import setup_logging

    setup_logging(f"storage{storage_index}/s{session}", log_level)
    use_sampling_allocator()  # answers sampling requests (allocator module docs)
    glt_adapter.prepare_sampling_server(PRODUCER_JOIN_S)  # before the session's first loader
    work = conn.recv()
    conn.close()
    if work is None:
        return
    graph, state, info = work
    _session_main(session, graph, state, info, storage_index)


def _session_main(session: int, graph: PartitionGraph, state: StorageState,
                  info: GraphStoreInfo, storage_index: int) -> None:
    """One server session, in its own process (module docs, step 3)."""
    import graphlearn_torch as glt

    dataset = glt_dataset(graph)
    protocol.register_service(StorageService(state, "127.0.0.1" if info.is_local else "",
                                             PortHold(), graph))
    torch.set_num_threads(1)
    mark_ready(info, session, storage_index)
    t0 = time.perf_counter()
    glt.distributed.init_server(
        num_servers=info.num_storage_nodes, server_rank=storage_index, dataset=dataset,
        master_addr=info.storage_cluster_master_ip, master_port=info.storage_rpc_ports[session],
        num_clients=info.num_compute_processes, num_rpc_threads=16,
        request_timeout=int(info.runtime.rpc_timeout_s), server_group_name=SERVER_GROUP)
    log.info("session=%d serving clients=%d connect_s=%.2f", session, info.num_compute_processes,
             time.perf_counter() - t0)
    peers = {f"compute rank {j}": f"{CLIENT_GROUP}_{j}" for j in range(info.num_compute_processes)}
    beat = Heartbeat(peers, interval_s=info.runtime.heartbeat_interval_s,
                     timeout_s=info.runtime.heartbeat_timeout_s,
                     is_finished=glt_adapter.server_session_finished).start()
    glt.distributed.wait_and_shutdown_server()
    beat.stop()
    log.info("session=%d done seconds=%.1f", session, time.perf_counter() - t0)


def _tensor_view(storage: torch.UntypedStorage, dtype: torch.dtype, size: torch.Size,
                 stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """A tensor over ``storage`` (the inverse of :func:`_reduce_tensor`)."""
    return torch.empty(0, dtype=dtype).set_(storage, offset, size, stride)


def _reduce_tensor(tensor: torch.Tensor) -> tuple[Any, tuple]:
    """Pickle a plain CPU tensor as its storage (shared through a file descriptor, by torch's
    own storage reducer) and its view. torch's tensor reducer does the same, but first imports
    ``torch.nested._internal.nested_tensor`` (torch._dynamo, sympy, torch.onnx, pandas): 48 MiB
    of anonymous memory in the storage main process, which never uses them (torch 2.3,
    measured 2026-12-06)."""
    if tensor.requires_grad or tensor.is_nested or tensor.layout != torch.strided:
        raise TypeError(f"a session's tensors are plain CPU tensors, got {tensor!r:.80}")
    return _tensor_view, (tensor.untyped_storage(), tensor.dtype, tensor.size(), tensor.stride(),
                          tensor.storage_offset())


def _session_work_bytes(work: tuple | None) -> bytes:
    """``work`` pickled for a session process: as ``Connection.send`` would (storages through
    shared memory), tensors by :func:`_reduce_tensor`; the session reads it with ``recv``."""
    buf = io.BytesIO()
    pickler = ForkingPickler(buf, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table[torch.Tensor] = _reduce_tensor  # this pickler's own copy
    pickler.dump(work)
    return buf.getvalue()


class SessionProcess:
    """One server session's process, started before its session has work (module docs).

    ``give(work)`` hands it ``(graph, state, info)`` (tensors travel as shared memory, as
    spawn arguments would); ``join_checked`` waits for it with the session timeout; ``stop``
    ends it whatever state it is in (idempotent).
    """

    def __init__(self, session: int, storage_index: int) -> None:
        ctx = mp.get_context("spawn")  # not a forkserver: see graphstore.runtime.processes
        self.session, self.storage_index = session, storage_index
        reader, self._conn = ctx.Pipe(duplex=False)  # it receives, we send
        self.process = ctx.Process(target=_session_entry,
                                   args=(reader, session, storage_index,
                                         logging.getLogger().level),
                                   name=f"storage{storage_index}-session{session}")
        self.process.start()
        reader.close()
        self._given = False

    def give(self, work: tuple | None) -> None:
        self._conn.send_bytes(_session_work_bytes(work))
        self._given = work is not None

    def join_checked(self, info: GraphStoreInfo) -> None:
        """Wait for the session to end: RuntimeFailure when it outlives ``sessionTimeoutS`` or
        exits non-zero."""
        proc, i, s = self.process, self.storage_index, self.session
        proc.join(timeout=info.runtime.session_timeout_s)
        if proc.is_alive():
            self.stop(info.runtime.shutdown_timeout_s)
            raise RuntimeFailure(f"storage {i}: session {s} exceeded "
                                 f"{info.runtime.session_timeout_s:.0f}s (sessionTimeoutS)")
        if proc.exitcode != 0:
            raise RuntimeFailure(f"storage {i}: session {s} process exited with code "
                                 f"{proc.exitcode}")

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the process: told to stop when it has no work yet, killed otherwise or when it
        does not exit within ``timeout_s``."""
        if self.process.exitcode is None and not self._given:
            try:
                self.give(None)
            except OSError:
                pass
            self.process.join(timeout=timeout_s)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join(timeout=timeout_s)
        self._conn.close()


def serve_sessions(graph: PartitionGraph, state: StorageState, info: GraphStoreInfo,
                   storage_index: int,
                   first: SessionProcess | None = None) -> None:
    """Run every server session in its own process, one after another; ``first``: session 0's
    process, already started (module docs)."""
    current: SessionProcess | None = first or SessionProcess(0, storage_index)
    try:
        for session in range(info.num_server_sessions):
            if current is None:  # the previous session has exited (module docs)
                current = SessionProcess(session, storage_index)
            current.give((graph, state, info))
            current.join_checked(info)
            current = None
    finally:
        if current is not None:
            current.stop(info.runtime.shutdown_timeout_s)


def load_partition(shards_uri: str, partition: int, num_storage: int,
                   storage_args: StorageArgs) -> tuple[PartitionGraph, StorageState, list[str]]:
    """Build the tensors of ``partition`` from the shard set at ``shards_uri``: ``(PartitionGraph,
    StorageState, the shard files downloaded)``. From gs:// only the manifest and
    ``part_<partition>/`` come down (graphstore.formats.shards.reader), each checked against its sha256,
    and the local copies are removed once the partition is in memory."""
    from graphstore.formats.shards.reader import ShardSet

    with ShardSet.open(shards_uri) as shards:
        if shards.manifest.num_partitions != num_storage:
            raise UsageError(f"{shards_uri} has {shards.manifest.num_partitions} partitions but the "
                             f"cluster has {num_storage} storage processes; re-partition with "
                             f"--num-partitions {num_storage}")
        graph, state = load_partition_graph(shards, partition, storage_args,
                                            storage_args.sample_edge_direction)
        fetched = shards.fetched()
    log.info("storage %d read partition %d: downloaded_files=%d", partition, partition, len(fetched))
    return graph, state, fetched


def run_storage(ctx: StageContext, topology: ClusterTopology) -> int:
    """The whole life of one storage machine process (see module docs for the order)."""
    if topology.role != "storage":
        raise UsageError(f"this process has role {topology.role!r} in CLUSTER_SPEC, not storage")
    use_lean_allocators()  # before any child starts: they inherit it
    map_own_blocks_from()  # this process builds the partition (allocator module docs)
    session_ports = PortHold(hold_s=math.inf)  # bound by the sessions, one after another
    first = SessionProcess(0, topology.machine_index)  # imports while we agree and load
    try:
        info = agree_on_cluster(ctx, topology, session_ports)
        graph, state, _ = load_partition(ctx.shards_uri, topology.machine_index,
                                           info.num_storage_nodes, ctx.storage.storage_args)
        release_freed_memory()
        serve_sessions(graph, state, info, topology.machine_index, first)
    finally:
        first.stop(ctx.task.runtime.shutdown_timeout_s)
        session_ports.close()
    log.info("storage %d served %d session(s); exiting", topology.machine_index,
             info.num_server_sessions)
    return 0


__all__ = ["SessionProcess", "load_partition", "run_storage", "serve_sessions", "SERVER_GROUP",
           "CLIENT_GROUP"]
