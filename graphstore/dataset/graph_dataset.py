"""``GraphDataset``: the one dataset contract of every mode, and its shared implementation.

Graph-store mode (``RemoteDistDataset``, graphstore.modes.graph_store.remote_dataset) and colocated mode
(``DistDataset``, graphstore.modes.colocated.dataset) implement the same methods with the same signatures and
return shapes, so the default trainer, evaluator, inferencer and the loaders never ask which mode
they run in. Both derive from :class:`DatasetBase`, which writes every method once as requests
of the storage protocol (graphstore.dataset.protocol); a mode supplies only the transport
(``_ask`` / ``_ask_all``: RPC to storage ranks, or this machine's partition in-process), which
partitions its processes read (``input_partitions``), the default share of a process, and how a
GLT loader starts (``start_loader``).

Return shapes (GiGL's graph-store API, seed 000): id inputs are ``dict[int, Tensor]`` and ABLP
inputs ``dict[int, ABLPInputNodes]`` keyed by the partition (storage rank) that holds them; an
empty tensor for a partition is normal. Called without ``rank`` / ``world_size``, a fetch returns
this process's share: every process of the job together gets each id exactly once.

The mode is chosen once, in graphstore.modes.machine (a machine's parent, before spawning
workers), a module above both modes.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence

import torch

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.dataset.metadata import DatasetMetadata, EdgeTypeLike, EdgeTypeTuple, FeatureInfo
from graphstore.runtime.errors import UsageError
from graphstore.dataset.splitter import Split
from graphstore.dataset import protocol as P


@dataclass(frozen=True)
class LoaderOptions:
    """How a loader samples: ``kind`` names it in logs and worker keys ("nbr" / "ablp");
    ``num_workers`` sampling workers per storage server (graph store; >= 1), each running
    ``worker_concurrency`` batches at once; ``prefetch_size`` batches buffered per server.
    Replicated mode: ``num_workers`` sampling processes (Ray Data read tasks), 0 sampling inline
    in the consuming process; colocated mode samples inline whatever it is. ``num_workers``
    None: the dataset's default (:meth:`workers_or`)."""

    kind: Literal["nbr", "ablp"]
    num_workers: int | None = None
    worker_concurrency: int = 4
    prefetch_size: int = 4

    def __post_init__(self) -> None:
        if self.num_workers is not None and self.num_workers < 0:
            raise UsageError(f"num_workers must be >= 0, got {self.num_workers}")
        for name in ("worker_concurrency", "prefetch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")

    def workers_or(self, default: int) -> int:
        """``num_workers``, or ``default`` (the dataset's) when the loader left it None."""
        return default if self.num_workers is None else self.num_workers


@dataclass(frozen=True)
class SamplingOptions:
    """What a loader samples, the same in every mode: ``kind`` "node" (seeds) or "link" (anchor,
    label rows); ``num_neighbors`` the fan-out per hop (a list, or ``{edge type: list}``);
    ``batch_size`` units per batch; ``shuffle`` / ``drop_last`` per epoch; ``with_edge`` edge ids
    in batches; ``edge_dir`` the shards' sampling direction; ``seed`` the sampling seed (None:
    GLT's). GLT's modes hand GLT :meth:`glt_config`; replicated mode reads the fields itself
    (graphstore.modes.replicated.loading)."""

    kind: Literal["node", "link"]
    num_neighbors: Any
    batch_size: int
    shuffle: bool
    drop_last: bool
    edge_dir: Literal["in", "out"]
    seed: int | None
    with_edge: bool = False

    def glt_config(self) -> Any:
        """GLT's ``SamplingConfig`` of these options (labels collated, no negatives, no
        weights: the loaders add their own)."""
        from graphlearn_torch.sampler import SamplingConfig, SamplingType

        kind = SamplingType.NODE if self.kind == "node" else SamplingType.LINK
        return SamplingConfig(kind, self.num_neighbors, self.batch_size, self.shuffle,
                              self.drop_last, self.with_edge, True, with_neg=False,
                              with_weight=False, edge_dir=self.edge_dir, seed=self.seed)


SEED_STRIDE = 100_003
"""The sampling seed of epoch ``e`` of a loader seeded ``s`` (the loops that sample themselves:
replicated and graph-store mode): ``s * SEED_STRIDE + e``, distinct per epoch and rank."""


def loader_units(loader: Any, inputs: Sequence[Any], node_types: Sequence[str]
                 ) -> tuple[Any, str, tuple[str, str, str] | None]:
    """``(units, node type, supervision type)`` of a loader's GLT sampler inputs, end to end in
    input order: node seeds ``[N]`` int64 (``NodeSamplerInput``: ``node``, ``input_type``; the
    first of ``node_types`` when it has none; supervision None) or (anchor, label) pairs
    ``[2, P]`` (a labelled ``EdgeSamplerInput``: ``row``, ``col``; the supervision type is the
    loader's ``supervision_edge_type``, its source the node type)."""
    import numpy as np

    if hasattr(inputs[0], "node"):
        units = np.concatenate([i.node.numpy() for i in inputs])
        node_type, supervision = inputs[0].input_type or node_types[0], None
    else:
        supervision = tuple(loader.supervision_edge_type)
        node_type = supervision[0]
        units = np.concatenate([np.stack([i.row.numpy(), i.col.numpy()]) for i in inputs], axis=1)
    return np.ascontiguousarray(units, dtype=np.int64), node_type, supervision


def epoch_units(units: Any, shuffle: bool, seed: int, epoch: int) -> Any:
    """``units`` (``[N]`` or ``[2, P]``) in epoch ``epoch``'s order: as given, or permuted by a
    generator seeded with ``(seed, epoch)`` when the loader shuffles."""
    import numpy as np

    if not shuffle:
        return units
    return units[..., np.random.default_rng([seed, epoch]).permutation(units.shape[-1])]


class GraphDataset(Protocol):
    """What the trainer, evaluator, inferencer and loaders use (see module docs for shapes).

    The methods' documentation is on :class:`DatasetBase`, which implements all of them."""

    @property
    def metadata(self) -> DatasetMetadata: ...

    @property
    def input_partitions(self) -> tuple[int, ...]: ...

    def fetch_node_types(self) -> list[str] | None: ...

    def fetch_edge_types(self) -> list[EdgeTypeTuple] | None: ...

    def fetch_edge_dir(self) -> Literal["in", "out"]: ...

    def fetch_node_feature_info(self) -> FeatureInfo | dict[str, FeatureInfo] | None: ...

    def fetch_edge_feature_info(self) -> FeatureInfo | dict[EdgeTypeTuple, FeatureInfo] | None: ...

    def fetch_node_partition_book(self, node_type: str | None = None) -> Any: ...

    def fetch_edge_partition_book(self, edge_type: EdgeTypeLike | None = None) -> Any: ...

    def fetch_free_ports_on_storage_cluster(self, num_ports: int) -> list[int]: ...

    def sampling_seed(self) -> int: ...

    def fetch_node_ids(self, rank: int | None = None, world_size: int | None = None,
                       split: Split | None = None,
                       node_type: str | None = None) -> dict[int, torch.Tensor]: ...

    def fetch_ablp_input(self, split: Split | None = None, rank: int | None = None,
                         world_size: int | None = None, anchor_node_type: str | None = None,
                         supervision_edge_type: EdgeTypeLike | None = None,
                         ) -> dict[int, ABLPInputNodes]: ...

    def fetch_positive_pairs(self, label_ids: torch.Tensor,
                             supervision_edge_type: EdgeTypeLike | None = None) -> torch.Tensor: ...

    def fetch_labels(self, anchors: dict[int, torch.Tensor],
                     supervision_edge_type: EdgeTypeLike | None = None) -> dict[int, torch.Tensor]: ...

    def start_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                     options: LoaderOptions) -> None: ...


class DatasetBase(abc.ABC):
    """Every :class:`GraphDataset` method, written once over the storage protocol.

    Public methods check and normalise their arguments, then ask the partitions; a subclass
    implements the transport and the mode's defaults (the abstract members below).
    """

    _metadata: DatasetMetadata | None = None

    # -- what a mode provides -------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def input_partitions(self) -> tuple[int, ...]:
        """The partitions (storage ranks) this process's inputs come from: the keys of every
        fetch result, and the keys the loaders accept."""

    @abc.abstractmethod
    def _ask(self, partition: int, request: P.Request) -> P.Reply:
        """``partition``'s reply to ``request`` (checked with ``protocol.check_reply``)."""

    def _ask_all(self, request: P.Request) -> dict[int, P.Reply]:
        """Every input partition's reply to ``request``, keyed by partition."""
        return {k: self._ask(k, request) for k in self.input_partitions}

    @abc.abstractmethod
    def _default_share(self) -> tuple[int, int]:
        """``(rank, world_size)`` of this process's share when a fetch is given neither."""

    @abc.abstractmethod
    def sampling_seed(self) -> int:
        """The seed a loader samples with when given none: ``graphStoreRuntimeConfig.randomSeed``
        plus this process's compute rank (each rank draws differently, every run the same)."""

    @abc.abstractmethod
    def start_loader(self, loader: Any, inputs: Sequence[Any], sampling: SamplingOptions,
                     options: LoaderOptions) -> None:
        """Start GLT's ``DistLoader`` part of ``loader`` on ``inputs`` (one sampler input per
        input partition, in ``input_partitions`` order)."""

    # -- metadata (GiGL's names and shapes) -------------------------------------------------------
    @property
    def metadata(self) -> DatasetMetadata:
        """The served graph's :class:`DatasetMetadata` (asked once, then cached)."""
        if self._metadata is None:
            reply = self._ask(self.input_partitions[0], P.MetadataRequest())
            self._metadata = reply.metadata
        return self._metadata

    def fetch_node_types(self) -> list[str] | None:
        """Node types; None for a homogeneous graph (as GiGL)."""
        meta = self.metadata
        return None if meta.is_homogeneous else list(meta.node_types)

    def fetch_edge_types(self) -> list[EdgeTypeTuple] | None:
        """Message-passing edge types as ``(src, relation, dst)`` tuples, the reverse types the
        partitioner added included; None for a homogeneous graph (as GiGL)."""
        meta = self.metadata
        return None if meta.is_homogeneous else [et.as_tuple() for et in meta.edge_types]

    def fetch_edge_dir(self) -> Literal["in", "out"]:
        """The sampling direction the shards were partitioned for."""
        return self.metadata.edge_dir

    def fetch_node_feature_info(self) -> FeatureInfo | dict[str, FeatureInfo] | None:
        """``FeatureInfo(dim, dtype)`` (homogeneous), ``{node type: FeatureInfo}`` for the types
        with features (heterogeneous), or None without node features."""
        return self.metadata.node_feature_info

    def fetch_edge_feature_info(self) -> FeatureInfo | dict[EdgeTypeTuple, FeatureInfo] | None:
        """None: the storage serves no edge features."""
        return self.metadata.edge_feature_info

    def fetch_node_partition_book(self, node_type: str | None = None) -> Any:
        """The partition book of ``node_type`` (None: the only node type of a homogeneous graph;
        required in a heterogeneous one): GLT's ``RangePartitionBook``, ``book[ids]`` the
        partition of each id. Each partition owns one range of ids, so the book is ``P + 1``
        bounds from the metadata; no request reaches storage."""
        from graphstore.dataset.glt_adapter import range_partition_book

        meta = self.metadata
        return range_partition_book(meta.node_bounds(meta.node_type(node_type)))

    def fetch_edge_partition_book(self, edge_type: EdgeTypeLike | None = None) -> Any:
        """The partition book of ``edge_type``'s edge ids (None: the only edge type of a
        homogeneous graph; required in a heterogeneous one), as for nodes."""
        from graphstore.dataset.glt_adapter import range_partition_book

        meta = self.metadata
        return range_partition_book(meta.edge_bounds(meta.edge_type(edge_type)))

    def fetch_free_ports_on_storage_cluster(self, num_ports: int) -> list[int]:
        """``num_ports`` ports free on the host of partition ``input_partitions[0]`` (graph store:
        storage rank 0). Compute rank 0 asks, then broadcasts: every rank of the compute process
        group gets the same list. A collective: call it on every compute rank."""
        import torch.distributed as dist

        if not dist.is_initialized():
            raise UsageError("fetch_free_ports_on_storage_cluster needs the compute process group "
                             "(call init_compute_process first)")
        request = P.FreePortsRequest(num_ports)
        ports: list[Any] = [None] * num_ports
        if dist.get_rank() == 0:
            ports = list(self._ask(self.input_partitions[0], request).ports)
        dist.broadcast_object_list(ports, src=0)
        return [int(p) for p in ports]

    # -- inputs -----------------------------------------------------------------------------------
    def _share(self, rank: int | None, world_size: int | None) -> tuple[int, int]:
        if (rank is None) != (world_size is None):
            raise UsageError("give both rank and world_size, or neither")
        if rank is None:
            return self._default_share()
        return rank, world_size

    def fetch_node_ids(self, rank: int | None = None, world_size: int | None = None,
                       split: Split | None = None,
                       node_type: str | None = None) -> dict[int, torch.Tensor]:
        """``{partition: [N] int64}``: the ids of ``node_type`` each partition owns, or only its
        anchors of ``split`` ("train" / "val" / "test", as the storage's splitter assigned them;
        the node type must anchor a supervision edge type), each partition's sorted ids sliced
        contiguously: slice ``rank`` of ``world_size``. ``node_type`` may be None in a
        homogeneous graph."""
        nt = self.metadata.node_type(node_type)
        rank, world = self._share(rank, world_size)
        replies = self._ask_all(P.NodeIdsRequest(nt, split, rank, world))
        return {k: r.ids for k, r in replies.items()}

    def fetch_ablp_input(self, split: Split | None = None, rank: int | None = None,
                         world_size: int | None = None, anchor_node_type: str | None = None,
                         supervision_edge_type: EdgeTypeLike | None = None,
                         ) -> dict[int, ABLPInputNodes]:
        """``{partition: ABLPInputNodes}``: each partition's anchors of ``split`` (slice ``rank``
        of ``world_size``) with their positive labels, keyed by the supervision edge type as the
        user reads it. ``supervision_edge_type`` may be None when the graph has only one;
        ``anchor_node_type``, when given, must be its source type."""
        sup = self.metadata.supervision_edge_type(supervision_edge_type)
        if anchor_node_type is not None and anchor_node_type != sup.src_node_type:
            raise UsageError(f"anchor_node_type {anchor_node_type!r} is not the source of {sup}")
        rank, world = self._share(rank, world_size)
        request = P.AblpInputRequest(sup, split, rank, world)
        replies = self._ask_all(request)
        return {k: r.input for k, r in replies.items()}

    def fetch_positive_pairs(self, label_ids: torch.Tensor,
                             supervision_edge_type: EdgeTypeLike | None = None) -> torch.Tensor:
        """``[2, K]`` (anchor, label) pairs of every split whose label is in ``label_ids``, for the
        anchors of every input partition (what a filtered evaluation skips)."""
        sup = self.metadata.supervision_edge_type(supervision_edge_type)
        replies = self._ask_all(P.PositivePairsRequest(sup, label_ids.to(torch.long)))
        return torch.cat([replies[k].pairs for k in sorted(replies)], dim=1)

    def fetch_labels(self, anchors: dict[int, torch.Tensor],
                     supervision_edge_type: EdgeTypeLike | None = None) -> dict[int, torch.Tensor]:
        """``{partition: [2, P]}`` (anchor, label) pairs, every split, of the anchors given per
        partition (each partition must own the anchors given to it)."""
        sup = self.metadata.supervision_edge_type(supervision_edge_type)
        bad = [k for k in anchors if k not in self.input_partitions]
        if bad:
            raise UsageError(f"fetch_labels: partitions {bad} are not among {self.input_partitions}")
        return {k: self._ask(k, P.LabelsRequest(sup, a.to(torch.long))).pairs
                for k, a in anchors.items()}
