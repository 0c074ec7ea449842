"""``RemoteDistDataset``: a compute process's handle on the storage cluster (not a copy of it).

Create it after :func:`graphstore.init_compute_process`. It answers GiGL's ``RemoteDistDataset``
calls under GiGL's names and shapes (every method and its shape: graphstore.dataset.graph_dataset); it
asks the storage processes through graphstore.dataset.protocol, over GLT's RPC.

Every input fetch asks each storage rank for its contiguous slice ``rank`` of ``world_size`` of
what it holds, so the compute ranks together get every id exactly once (no overlap, no gap); the
result is keyed by storage rank, and an empty tensor for a storage rank is normal. Those dicts are
exactly what the loaders take. Without ``rank`` / ``world_size`` a fetch uses this process's rank
in the compute process group and that group's size.

Homogeneous graphs answer as GiGL's do: ``fetch_node_types()`` and ``fetch_edge_types()`` are
None, ``fetch_node_feature_info()`` is one ``FeatureInfo`` (not a dict), and ``node_type`` /
``edge_type`` arguments may be left out.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from graphstore.runtime.errors import UsageError
from graphstore.dataset import glt_adapter
from graphstore.dataset.glt_adapter import init_dist_loader
from graphstore.dataset.graph_dataset import DatasetBase, LoaderOptions, SamplingOptions
from graphstore.dataset.partitioned_sampler import RpcReply
from graphstore.modes.graph_store.info import GraphStoreInfo
from graphstore.dataset import protocol as P

CPU = torch.device("cpu")

log = logging.getLogger(__name__)
DEFAULT_SAMPLING_WORKERS = 1
"""GLT sampling workers per storage server of a loader that leaves ``num_workers`` None."""


class RemoteDistDataset(DatasetBase):
    """Client handle: metadata, inputs and labels served by the storage processes."""

    def __init__(self, cluster_info: GraphStoreInfo, local_rank: int) -> None:
        from graphstore.modes.graph_store import compute

        self.cluster_info = cluster_info
        self.local_rank = local_rank
        self._proc = compute.current()
        self._metadata = None

    @property
    def num_storage(self) -> int:
        return self.cluster_info.num_storage_nodes

    @property
    def input_partitions(self) -> tuple[int, ...]:
        """Every storage rank: each compute process reads (its slice of) every partition."""
        return tuple(range(self.num_storage))

    def _ask(self, partition: int, request: P.Request) -> P.Reply:
        from graphlearn_torch.distributed import request_server

        return P.check_reply(request, request_server(partition, P.call, request))

    def _ask_async(self, partition: int, request: P.Request) -> RpcReply:
        from graphlearn_torch.distributed import async_request_server

        return RpcReply(request, "graph-store loader", f"storage rank {partition}",
                        async_request_server(partition, P.call, request))

    def _ask_all(self, request: P.Request) -> dict[int, P.Reply]:
        from graphlearn_torch.distributed import async_request_server

        futures = {k: async_request_server(k, P.call, request) for k in self.input_partitions}
        return {k: P.check_reply(request, f.wait()) for k, f in futures.items()}

    def _default_share(self) -> tuple[int, int]:
        return self._proc.rank, self._proc.world_size

    def sampling_seed(self) -> int:
        return self._proc.info.runtime.random_seed + self._proc.rank

    def start_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                     options: LoaderOptions) -> None:
        """Drive ``loader`` with the partitioned sampler (graphstore.dataset.partitioned_loading:
        each storage session picks its own nodes' neighbours and serves their features, this
        process relabels and builds the batches), or, for a loader that draws hard negatives,
        with GLT's sampling workers on every storage server (:meth:`_start_glt_loader`)."""
        workers = options.workers_or(DEFAULT_SAMPLING_WORKERS)
        if workers < 1:
            raise UsageError(f"{type(loader).__name__}: num_workers={workers}: graph-store "
                             "loaders need >= 1 sampling worker per storage server (0, sampling "
                             "inline, is replicated mode's)")
        if getattr(loader, "hard_negatives_per_anchor", 0):
            self._start_glt_loader(loader, inputs, sampling, options)
            return
        from graphstore.dataset.partitioned_loading import PartitionedIteration

        loader.drive_with(PartitionedIteration.from_loader(
            self.metadata, self._ask_async, loader, list(inputs), sampling, options))
        if self._proc.rank == 0:
            log.info("%s loader ready on %d storage servers (partitioned sampler)", options.kind,
                     self.num_storage)

    def _start_glt_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                          options: LoaderOptions) -> None:
        """One sampler input per storage rank (an empty one too): GLT's sampling workers form
        one RPC group across all servers, so a loader that skipped a server would hang. Each
        loader gets a unique ``worker_key`` and its own free port on storage rank 0 for its
        sampling workers. The compute ranks create theirs at the same time: each storage server
        starts the ranks' producers side by side (graphstore.dataset.glt_adapter.prepare_sampling_server;
        GLT 0.2.4 started them one at a time under a server-wide lock, so ranks creating loaders
        at once could each hold one server and wait forever for the other)."""
        from graphlearn_torch.distributed import RemoteDistSamplingWorkerOptions

        workers = options.workers_or(DEFAULT_SAMPLING_WORKERS)
        info = self.cluster_info
        port = self._ask(0, P.FreePortsRequest(1)).ports[0]
        worker_options = RemoteDistSamplingWorkerOptions(
            server_rank=list(self.input_partitions), num_workers=workers,
            worker_devices=[CPU] * workers,
            worker_concurrency=options.worker_concurrency,
            master_addr=info.storage_cluster_master_ip, master_port=port,
            rpc_timeout=info.runtime.rpc_timeout_s, num_rpc_threads=2,
            buffer_size=f"{channel_mib(self.metadata, sampling) * workers}MB",
            prefetch_size=options.prefetch_size,
            worker_key=f"{options.kind}-{self._proc.rank}-{uuid.uuid4().hex[:10]}")
        t0 = time.perf_counter()
        init_dist_loader(loader, None, list(inputs),
                         sampling.glt_config(), CPU,
                         worker_options)
        if self._proc.rank == 0:  # creation starts sampling processes on every server: seconds
            log.info("%s loader ready on %d storage servers in %.1fs", options.kind,
                     self.num_storage, time.perf_counter() - t0)


MIN_CHANNEL_MIB = 64
"""The smallest shared-memory channel a sampling worker gets (GLT's sample buffer)."""


def batch_message_bytes(meta: Any, num_neighbors: Sequence[int], batch_size: int,
                        link: bool) -> int | None:
    """An upper estimate of one sampled batch's message (what a sampling worker writes into
    its channel): ``batch_size`` seeds (two per pair for link batches), at each hop every node
    of the previous one sampling ``fanout`` neighbours along each edge type its type has (at
    most the most such types of any node type), each node its id and the widest type's
    float32 features, each edge its two ends and its edge id. None for a full-neighbourhood
    (-1) fan-out: not boundable."""
    if any(f < 0 for f in num_neighbors):
        return None
    anchor_of = (lambda et: et.dst_node_type) if meta.edge_dir == "in" else (lambda et: et.src_node_type)
    types_per_node = max([sum(1 for et in meta.edge_types if anchor_of(et) == nt)
                          for nt in meta.node_types] or [1]) or 1
    frontier = nodes = batch_size * (2 if link else 1)
    for fanout in num_neighbors:
        frontier *= fanout * types_per_node
        nodes += frontier
    edges = nodes - batch_size
    widest = max([0, *meta.node_feature_dims.values()])
    return nodes * (8 + 4 * widest) + edges * 24


def channel_mib(meta: Any, sampling: SamplingOptions) -> int:
    """MiB of the shared-memory channel of each sampling worker of a loader: room for one batch
    message by :func:`batch_message_bytes`, at least :data:`MIN_CHANNEL_MIB`. A message larger
    than the channel is never sent and GLT 0.2.4 says nothing: the loader waited for a batch
    that never came until ``rpcTimeoutS`` (seen with inference batches of 8192 seeds, fan-out
    [10, 5], 16 features, in the 64 MiB channel every loader had)."""
    fanout = sampling.num_neighbors
    if isinstance(fanout, dict):  # per edge type: the widest at each hop
        fanout = [max(hops) for hops in zip(*fanout.values())] if fanout else []
    message = batch_message_bytes(meta, list(fanout or []), sampling.batch_size,
                                  sampling.kind == "link")
    if message is None:
        return MIN_CHANNEL_MIB
    return max(MIN_CHANNEL_MIB, -(-message // (1 << 20)))


@dataclass(frozen=True)
class RemoteSource:
    """The graph-store :class:`~graphstore.modes.cluster_info.DatasetSource`: each worker opens its
    own ``RemoteDistDataset`` (after ``init_compute_process``)."""

    def open(self, info: GraphStoreInfo, local_rank: int) -> RemoteDistDataset:
        return RemoteDistDataset(info, local_rank)
