"""``DistNeighborLoader`` and ``DistABLPLoader`` over GLT, for graph-store (and colocated) mode.

Graph-store inputs are keyed by storage rank (what ``RemoteDistDataset.fetch_*`` returns). Every
loader sends each storage rank its own input (an empty one too): GLT's sampling workers form one
RPC group across all servers, so a loader that skipped a server would hang, and GLT's own remote
link loader, which sends everything to the first server, hangs with 2+ servers (DESIGN §8). Each
loader gets a unique ``worker_key``, its own free port on storage rank 0 for its sampling workers,
and a fixed ``random_seed`` (``graphStoreRuntimeConfig.randomSeed`` + compute rank unless given):
unseeded GLT sampling measured ~1.8x slower here.

ABLP batches (``DistABLPLoader``): the sampled subgraph around the anchors and their positive
label nodes, with features, plus

- ``batch.y_positive``: ``[2, E]`` local index pairs (row: index into the anchor type's nodes of
  the batch, col: index into the label type's nodes), one per (anchor, positive) pair;
- ``batch.supervision_edge_type``, ``batch.anchor_node_type``, ``batch.label_node_type``.

``batch_size`` counts (anchor, positive) pairs. Creating a loader is a collective over the compute
process group (every rank creates the same loaders in the same order; see ``_in_rank_order``).
Call ``shutdown()`` on every loader before ``shutdown_compute_process()``.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import torch
from graphlearn_torch.distributed import (
    CollocatedDistSamplingWorkerOptions, DistLoader, RemoteDistSamplingWorkerOptions,
)
from graphlearn_torch.typing import reverse_edge_type
from graphlearn_torch.sampler import (
    EdgeSamplerInput, NodeSamplerInput, SamplingConfig, SamplingType,
)

from graphstore import compute
from graphstore.ablp import ABLPInputNodes
from graphstore.colocated import DistDataset
from graphstore.errors import UsageError
from graphstore.remote_dataset import RemoteDistDataset, edge_type_key

CPU = torch.device("cpu")

log = logging.getLogger(__name__)


class _LabeledEdgeInput(EdgeSamplerInput):
    """GLT 0.2.4's ``EdgeSamplerInput.to`` / ``share_memory`` touch ``neg_sampling`` whenever a
    label is set, and crash when it is None; labels without GLT's random negatives are our case."""

    def to(self, device: torch.device) -> "_LabeledEdgeInput":
        return self

    def share_memory(self) -> "_LabeledEdgeInput":
        for t in (self.row, self.col, self.label):
            t.share_memory_()
        return self


def _one_supervision_type(per_rank: list, supervision_edge_type) -> tuple[str, str, str]:
    types = {et for x in per_rank if x is not None for et in x.positive_labels}
    if supervision_edge_type is not None:
        key = edge_type_key(supervision_edge_type)
        types = {et for et in types if edge_type_key(et) == key} or {tuple(key.split("__"))}
    if len(types) != 1:
        raise UsageError(f"DistABLPLoader: the input holds supervision edge types {sorted(types)}; "
                         "pass supervision_edge_type= to pick one")
    return next(iter(types))


def _per_rank(inputs: dict[int, Any], num_storage: int, what: str) -> list[Any]:
    bad = [k for k in inputs if not isinstance(k, int) or not 0 <= k < num_storage]
    if bad:
        raise UsageError(f"{what}: keys must be storage ranks 0..{num_storage - 1}, got {bad}")
    return [inputs.get(k) for k in range(num_storage)]


def _remote_options(dataset: RemoteDistDataset, kind: str, num_workers: int,
                    worker_concurrency: int, prefetch_size: int) -> RemoteDistSamplingWorkerOptions:
    info = dataset.cluster_info
    return RemoteDistSamplingWorkerOptions(
        server_rank=list(range(dataset.num_storage)), num_workers=num_workers,
        worker_devices=[CPU] * num_workers, worker_concurrency=worker_concurrency,
        master_addr=info.storage_cluster_master_ip, master_port=dataset.sampling_port(),
        rpc_timeout=info.runtime.rpc_timeout_s, num_rpc_threads=2,
        buffer_size=f"{max(64, 64 * num_workers)}MB", prefetch_size=prefetch_size,
        worker_key=f"{kind}-{dataset._proc.rank}-{uuid.uuid4().hex[:10]}")


def _in_rank_order(create) -> None:
    """Run ``create()`` on one compute rank at a time (a collective over the compute group).

    A GLT server builds one loader's sampling producer under a server-wide lock, and the producer
    waits for its peers on every other server. Two ranks creating loaders at once can each get one
    server first and wait forever for the other (seen here as a 60 s RPC timeout). So every rank
    must construct the same loaders in the same order, as DDP training does anyway.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        create()
        return
    for rank in range(dist.get_world_size()):
        if rank == dist.get_rank():
            create()
        dist.barrier()


def _colocated_options() -> CollocatedDistSamplingWorkerOptions:
    """Sampling inline in the compute process (GLT's collocated worker).

    GLT's multiprocessing sampling workers (``MpDistSamplingWorkerOptions``) stalled here with the
    sampler blocked sending into a full shared-memory channel while the loader waited on an empty
    one, when the partition was shared from the machine's parent process; inline sampling does not
    use that channel.
    """
    proc = compute.current()
    return CollocatedDistSamplingWorkerOptions(
        master_addr=proc.info.storage_cluster_master_ip, master_port=compute.shared_port(proc),
        rpc_timeout=proc.info.runtime.rpc_timeout_s)


def _seed(random_seed: int | None) -> int:
    if random_seed is not None:
        return random_seed
    proc = compute.current()
    return proc.info.runtime.random_seed + proc.rank


def _start(loader: DistLoader, dataset, inputs: list, config: SamplingConfig, kind: str,
           num_workers: int, worker_concurrency: int, prefetch_size: int) -> None:
    """Start GLT's loader: colocated (one input, inline sampling) or graph store (one input per
    storage rank, remote sampling workers, created one rank at a time)."""
    if isinstance(dataset, DistDataset):
        (only,) = inputs
        DistLoader.__init__(loader, dataset.glt, only, config, CPU, _colocated_options())
        return
    options = _remote_options(dataset, kind, num_workers, worker_concurrency, prefetch_size)
    t0 = time.perf_counter()
    _in_rank_order(lambda: DistLoader.__init__(loader, None, inputs, config, CPU, options))
    if dataset._proc.rank == 0:  # creation starts sampling processes on every server: seconds
        log.info("%s loader ready on %d storage servers in %.1fs", kind, dataset.num_storage,
                 time.perf_counter() - t0)


def _check_dataset(dataset, who: str) -> None:
    if not isinstance(dataset, (RemoteDistDataset, DistDataset)):
        raise UsageError(f"{who}: dataset must be a RemoteDistDataset (graph store) or a "
                         f"DistDataset (colocated), got {type(dataset).__name__}")


def _inputs_per_rank(dataset, value, kind_of_value: type, who: str, shapes: str) -> list:
    """Colocated: ``[value]``; graph store: the dict's values in storage-rank order (None = empty)."""
    if isinstance(dataset, DistDataset):
        if not isinstance(value, kind_of_value):
            raise UsageError(f"{who}: colocated input must be {shapes[0]}")
        return [value]
    if not isinstance(value, dict):
        raise UsageError(f"{who}: graph-store input must be {shapes[1]}")
    return _per_rank(value, dataset.num_storage, f"{who} input_nodes")


class DistNeighborLoader(DistLoader):
    """Neighbourhood samples around node seeds. Graph store: ``input_nodes`` is
    ``dict[int, Tensor]`` (homogeneous) or ``(node_type, dict[int, Tensor])``, as
    ``fetch_node_ids`` returns; colocated: ``Tensor`` or ``(node_type, Tensor)``."""

    def __init__(self, dataset: RemoteDistDataset | DistDataset, num_neighbors, input_nodes,
                 batch_size: int = 1, num_workers: int = 1, shuffle: bool = False,
                 drop_last: bool = False, with_edge: bool = False, random_seed: int | None = None,
                 worker_concurrency: int = 4, prefetch_size: int = 4) -> None:
        _check_dataset(dataset, "DistNeighborLoader")
        node_type = None
        if isinstance(input_nodes, tuple):
            node_type, input_nodes = input_nodes
        if not dataset.is_homogeneous and node_type is None:
            raise UsageError("DistNeighborLoader: give input_nodes=(node_type, ...) in a "
                             "heterogeneous graph")
        seeds = _inputs_per_rank(dataset, input_nodes, torch.Tensor, "DistNeighborLoader",
                                 ("a Tensor of ids this machine owns",
                                  "dict[int, Tensor] (storage rank -> node ids)"))
        input_type = None if dataset.is_homogeneous else node_type
        inputs = [NodeSamplerInput(node=(t if t is not None else torch.empty(0, dtype=torch.long)),
                                   input_type=input_type) for t in seeds]
        self.num_seeds = sum(len(i) for i in inputs)
        config = SamplingConfig(SamplingType.NODE, num_neighbors, batch_size, shuffle, drop_last,
                                with_edge, True, with_neg=False, with_weight=False,
                                edge_dir=dataset.edge_dir, seed=_seed(random_seed))
        _start(self, dataset, inputs, config, "nbr", num_workers, worker_concurrency, prefetch_size)


class DistABLPLoader(DistLoader):
    """Anchor-based link prediction batches (see module docs). Graph store: ``input_nodes`` is
    ``dict[int, ABLPInputNodes]``, as ``fetch_ablp_input`` returns; colocated: an
    ``ABLPInputNodes`` as ``DistDataset.ablp_input`` returns (the labels of one split), or a
    ``Tensor`` (or ``(anchor_node_type, Tensor)``) of anchors this machine owns, with all their
    labels."""

    def __init__(self, dataset: RemoteDistDataset | DistDataset, num_neighbors, input_nodes,
                 batch_size: int = 1, num_workers: int = 1, shuffle: bool = False,
                 drop_last: bool = False, supervision_edge_type=None,
                 random_seed: int | None = None, worker_concurrency: int = 4,
                 prefetch_size: int = 4) -> None:
        _check_dataset(dataset, "DistABLPLoader")
        if isinstance(dataset, DistDataset) and isinstance(input_nodes, ABLPInputNodes):
            sup = _one_supervision_type([input_nodes], supervision_edge_type)
            pairs_per_input = [input_nodes.positive_labels.get(
                sup, torch.empty((2, 0), dtype=torch.long))]
        elif isinstance(dataset, DistDataset):
            anchors = input_nodes[1] if isinstance(input_nodes, tuple) else input_nodes
            (anchors,) = _inputs_per_rank(dataset, anchors, torch.Tensor, "DistABLPLoader",
                                          ("a Tensor of anchors this machine owns", ""))
            key = dataset.supervision_key(supervision_edge_type)
            sup = tuple(key.split("__"))
            pairs_per_input = [dataset.labels_for(anchors, key)]
        else:
            per_rank = _inputs_per_rank(dataset, input_nodes, ABLPInputNodes, "DistABLPLoader",
                                        ("", "dict[int, ABLPInputNodes] (storage rank -> input)"))
            sup = _one_supervision_type(per_rank, supervision_edge_type)
            empty = torch.empty((2, 0), dtype=torch.long)
            pairs_per_input = [x.positive_labels.get(sup, empty) if x is not None else empty
                               for x in per_rank]
        self.supervision_edge_type = sup
        self._hetero = not dataset.is_homogeneous
        # a label tensor is required: with label=None GLT puts a None into the sample message,
        # its shared-memory queue rejects it, and the batch is silently lost (seen here)
        inputs = [_LabeledEdgeInput(row=p[0].contiguous(), col=p[1].contiguous(),
                                    label=torch.ones(p.size(1), dtype=torch.long),
                                    input_type=sup if self._hetero else None)
                  for p in pairs_per_input]
        self.num_pairs = sum(len(i) for i in inputs)
        config = SamplingConfig(SamplingType.LINK, num_neighbors, batch_size, shuffle, drop_last,
                                False, True, with_neg=False, with_weight=False,
                                edge_dir=dataset.edge_dir, seed=_seed(random_seed))
        _start(self, dataset, inputs, config, "ablp", num_workers, worker_concurrency, prefetch_size)

    def _collate_fn(self, msg):
        data = super()._collate_fn(msg)
        sup = self.supervision_edge_type
        if not self._hetero:
            # GLT's to_data stores edge_label_index flipped; undo it: [anchor idx, label idx]
            data.y_positive = data.edge_label_index.flip(0)
        elif self.edge_dir == "in":
            data.y_positive = data[sup].edge_label_index
        else:
            data.y_positive = data[reverse_edge_type(sup)].edge_label_index.flip(0)
        data.supervision_edge_type = sup
        data.anchor_node_type, data.label_node_type = sup[0], sup[2]
        return data
