"""Colocated mode: each compute machine holds one partition itself (no storage processes).

Same shards, same splitter, same loaders, same dataset methods as graph-store mode; only where the
graph lives differs (seed 000: "the same loops also run colocated"). Order, per compute machine:

    dataset = DistDataset.from_shards(shards_uri, partition=machine_index, storage_args=...)
    mp.spawn(worker, args=(cluster_info, dataset, ...))   # the partition is shared, not copied
    # in each worker:
    init_compute_process(local_rank, cluster_info)        # GLT worker group + RPC, then the group
    loader = DistABLPLoader(dataset, ..., input_nodes=dataset.fetch_ablp_input("train"))

Loaders sample with the partitioned sampler, as graph-store mode's
(graphstore.dataset.partitioned_loading): this machine's partition answers its requests
in-process, the other machines' over the worker group's RPC (each compute process serves its machine's partition to the peer of its local rank
on every other machine, from the first loader on). A loader that draws hard negatives samples
inline with GLT's collocated worker instead.

Every ``fetch_*`` method is the graph-store one (graphstore.dataset.graph_dataset), answered in-process by
this machine's partition: results are keyed by that partition (``machine_index``), and
``rank`` / ``world_size`` slice it among the machine's local processes (default: this process's
local rank and the machine's process count), so the machines' processes together get every id
once. The loaders also take a plain ``Tensor`` (or ``(node_type, Tensor)``) of ids this machine
owns, or one ``ABLPInputNodes``, as the shortcuts below return.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.config import StorageArgs
from graphstore.dataset.metadata import EdgeTypeLike
from graphstore.runtime.errors import UsageError
from graphstore.dataset.glt_adapter import init_dist_loader
from graphstore.dataset.graph_dataset import DatasetBase, LoaderOptions, SamplingOptions
from graphstore.runtime.ports import PortHold
from graphstore.dataset.splitter import Split
from graphstore.dataset import protocol as P
from graphstore.dataset.partition_graph import (PartitionGraph, StorageState, glt_dataset,
                                                load_partition_graph)
from graphstore.dataset.partitioned_sampler import (Ask, InProcessReply, PendingReply,
                                                    RpcReply)
from graphstore.dataset.service import StorageService

CPU = torch.device("cpu")

log = logging.getLogger(__name__)


class DistDataset(DatasetBase):
    """One machine's partition: its rows and features (``graph``, what the partitioned sampler
    asks), GLT's dataset over the same tensors (``glt``, for hard-negative loaders), and its
    splits and labels (``state``); see module docs."""

    def __init__(self, graph: PartitionGraph, state: StorageState) -> None:
        self.graph = graph
        self.glt = glt_dataset(graph)  # no copy: GLT's view of the same tensors
        self.state = state
        self._metadata = state.metadata
        self._service: StorageService | None = None  # serving peers (per process: _serve_peers)

    @classmethod
    def from_shards(cls, shards_uri: str, partition: int, storage_args: StorageArgs) -> "DistDataset":
        from graphstore.formats.shards.reader import ShardSet

        with ShardSet.open(shards_uri) as shards:  # gs://: only this partition's files come down
            graph, state = load_partition_graph(shards, partition, storage_args,
                                                storage_args.sample_edge_direction)
        return cls(graph, state)

    def __getstate__(self) -> dict:
        """Pickled to the machine's workers (mp.spawn) without a service: each serves its own."""
        return {**self.__dict__, "_service": None}

    def open(self, info: Any, local_rank: int) -> "DistDataset":
        """The colocated :class:`~graphstore.modes.cluster_info.DatasetSource`: every worker of the
        machine uses the partition its parent built."""
        return self

    @property
    def input_partitions(self) -> tuple[int, ...]:
        """This machine's partition only."""
        return (self.state.partition,)

    def _ask(self, partition: int, request: P.Request) -> P.Reply:
        from graphstore.modes.graph_store import compute

        if partition != self.state.partition:
            raise UsageError(f"colocated: this machine holds partition {self.state.partition}, "
                               f"not {partition}")
        proc = compute.current() if isinstance(request, P.FreePortsRequest) else None
        return P.check_reply(request, self._new_service(proc).answer(request))

    def _new_service(self, proc: Any | None) -> StorageService:
        """A StorageService of this partition; its ports are free on this machine (``proc``'s
        port hold; None: a request that asks for no ports)."""
        host = "127.0.0.1" if proc is None or proc.info.is_local else ""
        return StorageService(self.state, host,
                              proc.port_hold if proc is not None else PortHold(), self.graph)

    def _default_share(self) -> tuple[int, int]:
        from graphstore.modes.graph_store import compute

        proc = compute.current()
        return proc.rank - proc.info.compute_rank(0), proc.info.num_processes_per_compute

    def sampling_seed(self) -> int:
        from graphstore.modes.graph_store import compute

        proc = compute.current()
        return proc.info.runtime.random_seed + proc.rank

    def start_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                     options: LoaderOptions) -> None:
        """Drive ``loader`` with the partitioned sampler (module docs), or, for a loader that
        draws hard negatives, with GLT's collocated sampling (:meth:`_start_glt_loader`). A
        collective, as creating a loader is: the first one makes every compute process serve
        its partition to the others (:meth:`_serve_peers`)."""
        from graphstore.dataset.partitioned_loading import PartitionedIteration
        from graphstore.modes.graph_store import compute

        proc = compute.current()
        self._serve_peers(proc)
        if getattr(loader, "hard_negatives_per_anchor", 0):
            self._start_glt_loader(loader, inputs, sampling, options)
            return
        loader.drive_with(PartitionedIteration.from_loader(
            self.metadata, self._sampler_ask(proc), loader, list(inputs), sampling, options))
        if proc.rank == 0:
            log.info("%s loader ready on %d colocated partitions (partitioned sampler)",
                     options.kind, self.graph.num_partitions)

    def _serve_peers(self, proc: Any) -> None:
        """Once per process: register this partition's StorageService as the answer to the
        storage protocol's RPC target (graphstore.dataset.protocol.call), then wait for every
        compute rank to have done the same (a barrier), so no request meets a process that does
        not serve yet."""
        import torch.distributed as dist

        if self._service is not None:
            return
        self._service = self._new_service(proc)
        P.register_service(self._service)
        dist.barrier()

    def _sampler_ask(self, proc: Any) -> Ask:
        """The partitioned sampler's ``ask``: this partition in-process; partition ``p`` over
        RPC to compute rank ``p * processes per machine + this local rank`` (machine ``p``
        holds partition ``p``), so each peer serves one process of every other machine."""
        from graphlearn_torch.distributed import DistRole, rpc_global_request_async

        own, service = self.state.partition, self._service
        per_machine = proc.info.num_processes_per_compute
        local_rank = proc.rank % per_machine

        def ask(partition: int, request: P.Request) -> PendingReply:
            if partition == own:
                return InProcessReply(service, request)
            peer = partition * per_machine + local_rank
            return RpcReply(request, "colocated loader",
                            f"partition {partition} (compute rank {peer})",
                            rpc_global_request_async(DistRole.WORKER, peer, P.call,
                                                     args=(request,)))
        return ask

    def _start_glt_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                          options: LoaderOptions) -> None:
        """Sampling inline in the compute process (GLT's collocated worker).

        GLT's multiprocessing sampling workers (``MpDistSamplingWorkerOptions``) stalled here with
        the sampler blocked sending into a full shared-memory channel while the loader waited on
        an empty one, when the partition was shared from the machine's parent process; inline
        sampling does not use that channel.
        """
        from graphlearn_torch.distributed import CollocatedDistSamplingWorkerOptions

        from graphstore.modes.graph_store import compute

        (only,) = inputs
        proc = compute.current()
        worker_options = CollocatedDistSamplingWorkerOptions(
            master_addr=proc.info.storage_cluster_master_ip, master_port=compute.shared_port(proc),
            rpc_timeout=proc.info.runtime.rpc_timeout_s)
        init_dist_loader(loader, self.glt, only, sampling.glt_config(), CPU, worker_options)

    # -- colocated shortcuts: this machine's part of the fetch_* results ----------------------------
    def node_ids(self, node_type: str | None = None, split: Split | None = None, rank: int = 0,
                 world_size: int = 1) -> torch.Tensor:
        """Ids this machine owns (or its anchors of ``split``), slice ``rank`` of ``world_size``."""
        ids = self.fetch_node_ids(rank=rank, world_size=world_size, split=split, node_type=node_type)
        return ids[self.state.partition]

    def ablp_input(self, split: Split | None, supervision_edge_type: EdgeTypeLike | None = None,
                   rank: int = 0, world_size: int = 1) -> ABLPInputNodes:
        """Anchors of ``split`` this machine owns (slice ``rank`` of ``world_size``) with their
        positive labels: of that split, for a per-edge split (graphstore.dataset.splitter)."""
        inputs = self.fetch_ablp_input(split=split, rank=rank, world_size=world_size,
                                       supervision_edge_type=supervision_edge_type)
        return inputs[self.state.partition]

    def anchor_ids(self, split: Split | None, supervision_edge_type: EdgeTypeLike | None = None,
                   rank: int = 0, world_size: int = 1) -> torch.Tensor:
        """Anchors of ``split`` this machine owns, slice ``rank`` of ``world_size``."""
        return self.ablp_input(split, supervision_edge_type, rank, world_size).anchor_nodes
