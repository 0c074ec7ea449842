"""The compute <-> storage protocol: every request and reply as a typed, frozen value.

Both sides import this module and nothing of each other: compute processes
(graphstore.modes.graph_store.remote_dataset) send requests; storage session processes (graphstore.modes.graph_store.server)
answer them with a :class:`Service` (graphstore.dataset.service) registered here; a colocated
``DistDataset`` hands the same requests to the same service in-process.

Transport (graph store): GLT's ``request_server(storage_rank, call, request)`` runs :func:`call`
in the storage session process, which passes the request to the registered service and returns
its reply. GLT needs a module-level function as the RPC target, hence the one registered service
per session process (:func:`register_service`), the pattern GLT uses for its own server object.

Every request checks its arguments when it is built (a bad request fails on the compute side,
before any RPC); every reply checks its shape when it is built and :func:`check_reply` checks that
a reply is the one its request expects. Edge types travel as ``EdgeType`` values, never strings.
Torch RPC unpickles what it receives: the groups below are for the job's private network only,
and listen on loopback in local mode (docs/architecture.md, Runtime contract).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, Union

import numpy as np
import torch

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.config import EdgeType
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.dataset.splitter import SPLITS, Split

SERVER_GROUP = "gs_server"
"""GLT RPC group name of the storage session processes (``<group>_<storage rank>``)."""
CLIENT_GROUP = "gs_client"
"""GLT RPC group name of the compute processes (``<group>_<compute rank>``)."""
MAX_PORTS = 256


def _check_share(who: str, rank: int, world_size: int) -> None:
    if not (isinstance(world_size, int) and isinstance(rank, int)) or not 0 <= rank < world_size:
        raise UsageError(f"{who}: rank {rank!r} is not in [0, world_size {world_size!r})")


def _check_split(who: str, split: str | None) -> None:
    if split is not None and split not in SPLITS:
        raise UsageError(f"{who}: split must be one of {list(SPLITS)} or None, got {split!r}")


def _check_edge_type(who: str, value: object) -> None:
    if not isinstance(value, EdgeType):
        raise UsageError(f"{who}: supervision_edge_type must be an EdgeType, got {value!r}")


def _check_ids(who: str, name: str, t: object, rows: int | None = None) -> None:
    """``t`` is an int64 tensor: 1-D, or ``[rows, K]`` when ``rows`` is given."""
    ok = isinstance(t, torch.Tensor) and t.dtype == torch.long and (
        t.dim() == 1 if rows is None else (t.dim() == 2 and t.size(0) == rows))
    if not ok:
        shape = "[N]" if rows is None else f"[{rows}, K]"
        got = f"{t.dtype} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise UsageError(f"{who}: {name} must be an int64 tensor {shape}, got {got}")


WIRE_INT32_BOUND = 2**31
"""Ids below this travel as int32 (:func:`wire_ids`)."""


def wire_dtype(bound: int) -> np.dtype:
    """The dtype of wire ids (:func:`wire_ids`) that are all below ``bound``."""
    return np.dtype(np.int32 if bound <= WIRE_INT32_BOUND else np.int64)


def wire_ids(ids: np.ndarray, bound: int) -> torch.Tensor:
    """``ids`` as the partitioned sampler's requests and replies carry them: int32 when every id
    they could hold is below ``bound`` <= :data:`WIRE_INT32_BOUND` (a node type's count, a
    fanout), else int64. Half the bytes of that traffic for any type of fewer than 2^31 nodes;
    the receiver reads them as they are (the kernels of graphstore.dataset.kernels take
    either)."""
    return torch.from_numpy(np.ascontiguousarray(ids, dtype=wire_dtype(bound)))


def _check_wire_ids(who: str, name: str, t: object) -> None:
    """``t`` is a 1-D int32 or int64 tensor (:func:`wire_ids`)."""
    if not (isinstance(t, torch.Tensor) and t.dtype in (torch.int32, torch.int64)
            and t.dim() == 1):
        got = f"{t.dtype} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise UsageError(f"{who}: {name} must be an int32 or int64 tensor [N], got {got}")


# -- replies ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetadataReply:
    metadata: DatasetMetadata

    def __post_init__(self) -> None:
        if not isinstance(self.metadata, DatasetMetadata):
            raise UsageError(f"MetadataReply: not a DatasetMetadata: {type(self.metadata).__name__}")


@dataclass(frozen=True)
class FreePortsReply:
    """Ports free on the answering storage host, distinct."""

    ports: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.ports or len(set(self.ports)) != len(self.ports) or not all(
                isinstance(p, int) and 0 < p < 65536 for p in self.ports):
            raise UsageError(f"FreePortsReply: ports must be distinct ints in 1..65535, got {self.ports}")


@dataclass(frozen=True)
class NodeIdsReply:
    """``[N]`` int64 dense node ids, sorted ascending (possibly empty)."""

    ids: torch.Tensor

    def __post_init__(self) -> None:
        _check_ids("NodeIdsReply", "ids", self.ids)


@dataclass(frozen=True)
class AblpInputReply:
    input: ABLPInputNodes

    def __post_init__(self) -> None:
        if not isinstance(self.input, ABLPInputNodes):
            raise UsageError(f"AblpInputReply: not an ABLPInputNodes: {type(self.input).__name__}")


@dataclass(frozen=True)
class PairsReply:
    """``[2, K]`` int64 (anchor, label) dense id pairs."""

    pairs: torch.Tensor

    def __post_init__(self) -> None:
        _check_ids("PairsReply", "pairs", self.pairs, rows=2)


@dataclass(frozen=True)
class NeighboursReply:
    """The edges a :class:`NeighboursRequest`'s nodes sampled, grouped by node in request order:
    ``counts[i]`` edges of its node ``i``, then per edge the neighbour's global id and (only when
    the request asked for them, else None) the stored edge's id (int64). Neighbours and counts
    are wire ids (:func:`wire_ids`: int32 below 2^31 nodes of the neighbour type, a fanout below
    2^31)."""

    neighbours: torch.Tensor
    counts: torch.Tensor
    edge_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        _check_wire_ids("NeighboursReply", "neighbours", self.neighbours)
        _check_wire_ids("NeighboursReply", "counts", self.counts)
        if self.edge_ids is not None:
            _check_ids("NeighboursReply", "edge_ids", self.edge_ids)
            if self.edge_ids.numel() != self.neighbours.numel():
                raise UsageError("NeighboursReply: neighbours and edge_ids differ in length")


@dataclass(frozen=True)
class FeatureRowsReply:
    """``[N, dim]`` float32: the feature row of each id of a :class:`FeatureRowsRequest`, in its
    order."""

    rows: torch.Tensor

    def __post_init__(self) -> None:
        if not (isinstance(self.rows, torch.Tensor) and self.rows.dtype == torch.float32
                and self.rows.dim() == 2):
            raise UsageError(f"FeatureRowsReply: rows must be a float32 [N, dim] tensor, got "
                             f"{getattr(self.rows, 'dtype', type(self.rows).__name__)}")


Reply = Union[MetadataReply, FreePortsReply, NodeIdsReply, AblpInputReply, PairsReply,
              NeighboursReply, FeatureRowsReply]


# -- requests ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetadataRequest:
    """The served graph's :class:`DatasetMetadata` (every partition answers the same)."""

    reply_type: ClassVar[type] = MetadataReply


@dataclass(frozen=True)
class FreePortsRequest:
    """``num_ports`` ports free on the answering host (sampling workers' master ports)."""

    num_ports: int
    reply_type: ClassVar[type] = FreePortsReply

    def __post_init__(self) -> None:
        if isinstance(self.num_ports, bool) or not isinstance(self.num_ports, int) or not (
                1 <= self.num_ports <= MAX_PORTS):
            raise UsageError(f"num_ports must be an int in 1..{MAX_PORTS}, got {self.num_ports!r}")


@dataclass(frozen=True)
class NodeIdsRequest:
    """Owned ids of ``node_type`` (all, or its anchors in ``split``), slice ``rank`` of
    ``world_size`` (contiguous: the slices of all ranks cover every id once)."""

    node_type: str
    split: Split | None
    rank: int
    world_size: int
    reply_type: ClassVar[type] = NodeIdsReply

    def __post_init__(self) -> None:
        _check_split("NodeIdsRequest", self.split)
        _check_share("NodeIdsRequest", self.rank, self.world_size)


@dataclass(frozen=True)
class AblpInputRequest:
    """Owned anchors of ``split`` (None: every anchor), slice ``rank`` of ``world_size``, with
    their positive labels (of that split, for a per-edge split)."""

    supervision_edge_type: EdgeType
    split: Split | None
    rank: int
    world_size: int
    reply_type: ClassVar[type] = AblpInputReply

    def __post_init__(self) -> None:
        _check_edge_type("AblpInputRequest", self.supervision_edge_type)
        _check_split("AblpInputRequest", self.split)
        _check_share("AblpInputRequest", self.rank, self.world_size)


@dataclass(frozen=True)
class PositivePairsRequest:
    """Every (anchor, label) pair of owned anchors, every split, whose label is in ``label_ids``."""

    supervision_edge_type: EdgeType
    label_ids: torch.Tensor
    reply_type: ClassVar[type] = PairsReply

    def __post_init__(self) -> None:
        _check_edge_type("PositivePairsRequest", self.supervision_edge_type)
        _check_ids("PositivePairsRequest", "label_ids", self.label_ids)


@dataclass(frozen=True)
class LabelsRequest:
    """Every (anchor, label) pair of the given anchors, which the answering partition must own."""

    supervision_edge_type: EdgeType
    anchors: torch.Tensor
    reply_type: ClassVar[type] = PairsReply

    def __post_init__(self) -> None:
        _check_edge_type("LabelsRequest", self.supervision_edge_type)
        _check_ids("LabelsRequest", "anchors", self.anchors)


@dataclass(frozen=True)
class NeighboursRequest:
    """One hop of the partitioned sampler (graphstore.dataset.partitioned_sampler) on the
    answering partition's rows of the stored ``edge_type``: up to ``fanout`` neighbours of each of
    ``nodes`` (ids of the type the rows belong to, owned by that partition; ``-1``: every
    neighbour), without replacement unless ``replace``, drawn from ``seed``
    (graphstore.dataset.kernels.pick_neighbours); the sampled edges' ids too when
    ``with_edge_ids``. ``nodes``: wire ids (:func:`wire_ids`)."""

    edge_type: EdgeType
    nodes: torch.Tensor
    fanout: int
    replace: bool
    seed: int
    with_edge_ids: bool = False
    reply_type: ClassVar[type] = NeighboursReply

    def __post_init__(self) -> None:
        if not isinstance(self.edge_type, EdgeType):
            raise UsageError(f"NeighboursRequest: edge_type must be an EdgeType, got "
                             f"{self.edge_type!r}")
        _check_wire_ids("NeighboursRequest", "nodes", self.nodes)
        if isinstance(self.fanout, bool) or not isinstance(self.fanout, int) or self.fanout < -1:
            raise UsageError(f"NeighboursRequest: fanout must be an int >= -1, got {self.fanout!r}")


@dataclass(frozen=True)
class FeatureRowsRequest:
    """The feature rows of ``ids`` of ``node_type`` (each owned by the answering partition;
    wire ids, :func:`wire_ids`)."""

    node_type: str
    ids: torch.Tensor
    reply_type: ClassVar[type] = FeatureRowsReply

    def __post_init__(self) -> None:
        _check_wire_ids("FeatureRowsRequest", "ids", self.ids)


Request = Union[MetadataRequest, FreePortsRequest, NodeIdsRequest, AblpInputRequest,
                PositivePairsRequest, LabelsRequest, NeighboursRequest,
                FeatureRowsRequest]
REQUEST_TYPES: tuple[type, ...] = (MetadataRequest, FreePortsRequest, NodeIdsRequest,
                                   AblpInputRequest, PositivePairsRequest, LabelsRequest,
                                   NeighboursRequest, FeatureRowsRequest)


def check_reply(request: Request, reply: object) -> Reply:
    """``reply`` when it is what ``request`` expects; RuntimeFailure naming both otherwise."""
    if not isinstance(reply, request.reply_type):
        raise RuntimeFailure(f"storage answered {type(request).__name__} with "
                             f"{type(reply).__name__}, expected {request.reply_type.__name__} "
                             "(compute and storage run different graphstore versions?)")
    return reply


# -- the server side's entry point ------------------------------------------------------------------
class Service(Protocol):
    """What answers requests: one partition's storage state (graphstore.dataset.service)."""

    def answer(self, request: Request) -> Reply: ...


_SERVICE: Service | None = None


def register_service(service: Service | None) -> None:
    """Make ``service`` answer :func:`call` in this process (a storage session process)."""
    global _SERVICE
    _SERVICE = service


def call(request: Request) -> Reply:
    """The RPC target: the registered service's reply to ``request``, checked."""
    if not isinstance(request, REQUEST_TYPES):
        raise UsageError(f"not a storage protocol request: {type(request).__name__}")
    if _SERVICE is None:
        raise RuntimeFailure("no storage service is registered in this process "
                             "(not a storage session process?)")
    return check_reply(request, _SERVICE.answer(request))
