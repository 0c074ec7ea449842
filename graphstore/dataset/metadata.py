"""``DatasetMetadata``: what a served graph is, one frozen value in every mode.

Graph-store storage builds it from the shard manifest (``DatasetMetadata.from_manifest``) and sends
it to compute processes over RPC (graphstore.dataset.protocol); a colocated ``DistDataset`` holds the
same value. Trainer, evaluator, inferencer and loaders read only this, never the mode.

Edge types are :class:`~graphstore.config.EdgeType` values (``src_node_type``, ``relation``,
``dst_node_type``). Strings of the form ``"src__relation__dst"`` (config files, shard manifests,
metrics keys) become values in one place, ``EdgeType.parse``; :func:`as_edge_type` is how every
other input (a value, a ``(src, relation, dst)`` tuple as PyG / GLT / GiGL spell it, or that string)
enters the library. Nothing else splits an edge type name.

Invariants (checked when a metadata value is built):

- ``node_types`` is non-empty and has no duplicates; ``node_counts`` and ``node_feature_dims`` have
  exactly those keys (counts >= 0, dims >= 0 where 0 means "no features");
- every edge type's two node types are in ``node_types``; ``supervision_edge_types`` are among
  ``edge_types`` (as the user reads them, ``src -> dst``);
- ``hard_negative_edge_types`` maps a supervision edge type to the edge type of its anchors'
  known negatives (``hardNegativeEdgeTypes``), which joins the same node types and is NOT among
  ``edge_types``: it is labels only, never passes messages;
- ``edge_counts_per_partition`` has a count per partition for every edge type (message-passing
  types, the reverse types the partitioner added included), in partition order: edge ids are
  contiguous per partition, partition 0 first (graphstore.formats.shards.format);
- ``node_counts_per_partition`` likewise for every node type (default: the shard format's
  numbering of ``node_counts``): partition ``p`` owns one range of dense ids, so every partition
  book is ``P + 1`` bounds (:meth:`DatasetMetadata.node_bounds`), never an array of ``N``;
- mappings are read-only; the value pickles (it crosses RPC).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, Mapping

import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError

EdgeTypeTuple = tuple[str, str, str]
EdgeTypeLike = EdgeType | tuple[str, str, str] | str
FEATURE_DTYPE = torch.float32
"""The dtype of every node feature the storage serves (the shard format stores float32)."""


def as_edge_type(value: EdgeTypeLike) -> EdgeType:
    """An :class:`EdgeType` from a value, a ``(src, relation, dst)`` tuple or ``"src__rel__dst"``.

    Raises UsageError naming the value when it is none of these."""
    if isinstance(value, EdgeType):
        return value
    try:
        if isinstance(value, tuple) and len(value) == 3:
            return EdgeType(src_node_type=value[0], relation=value[1], dst_node_type=value[2])
        if isinstance(value, str):
            return EdgeType.parse(value)
    except ValueError as exc:
        raise UsageError(f"edge type {value!r}: {exc}") from None
    raise UsageError(f"edge type {value!r} is not an EdgeType, a (src, relation, dst) tuple or "
                     "a 'src__relation__dst' string")


@dataclass(frozen=True)
class FeatureInfo:
    """The width and dtype of a feature (GiGL's ``FeatureInfo``): ``dim >= 1``."""

    dim: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"FeatureInfo: dim must be an int >= 1, got {self.dim!r}")


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, kw_only=True)
class DatasetMetadata:
    """Node and edge types, direction, features, counts of the served graph (see module docs)."""

    num_partitions: int
    edge_dir: Literal["in", "out"]
    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    supervision_edge_types: tuple[EdgeType, ...]
    node_counts: Mapping[str, int]
    edge_counts_per_partition: Mapping[EdgeType, tuple[int, ...]]
    node_feature_dims: Mapping[str, int]
    has_splits: bool = False
    hard_negative_edge_types: Mapping[EdgeType, EdgeType] = field(default_factory=dict)
    node_counts_per_partition: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not self.node_counts_per_partition and self.num_partitions >= 1:
            from graphstore.formats.shards.format import NodeRanges

            set_(self, "node_counts_per_partition", {
                nt: NodeRanges(n, self.num_partitions).counts for nt, n in self.node_counts.items()
                if n >= 0})
        set_(self, "node_counts_per_partition", _frozen(
            {nt: tuple(c) for nt, c in self.node_counts_per_partition.items()}))
        for name in ("node_counts", "node_feature_dims", "hard_negative_edge_types"):
            set_(self, name, _frozen(getattr(self, name)))
        for name in ("node_types", "edge_types", "supervision_edge_types"):
            set_(self, name, tuple(getattr(self, name)))
        set_(self, "edge_counts_per_partition", MappingProxyType(
            {et: tuple(c) for et, c in self.edge_counts_per_partition.items()}))
        problems = self._problems()
        if problems:
            raise ValueError("DatasetMetadata: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        out = []
        if self.edge_dir not in ("in", "out"):
            out.append(f"edge_dir must be 'in' or 'out', got {self.edge_dir!r}")
        if self.num_partitions < 1:
            out.append(f"num_partitions must be >= 1, got {self.num_partitions}")
        nodes = set(self.node_types)
        if not self.node_types or len(nodes) != len(self.node_types):
            out.append(f"node_types must be non-empty and distinct, got {list(self.node_types)}")
        for name in ("node_counts", "node_feature_dims"):
            m = getattr(self, name)
            if set(m) != nodes or any(v < 0 for v in m.values()):
                out.append(f"{name} must hold a value >= 0 for exactly {sorted(nodes)}, got {dict(m)}")
        for nt, n in self.node_counts.items():
            counts = self.node_counts_per_partition.get(nt)
            if counts is None or len(counts) != self.num_partitions or sum(counts) != n \
                    or any(c < 0 for c in counts):
                out.append(f"node_counts_per_partition[{nt}] must hold {self.num_partitions} "
                           f"counts >= 0 adding up to {n}, got {counts}")
        if len(set(self.edge_types)) != len(self.edge_types):
            out.append("edge_types must be distinct")
        for et in self.edge_types:
            if et.src_node_type not in nodes or et.dst_node_type not in nodes:
                out.append(f"edge type {et} joins a node type not in {sorted(nodes)}")
            counts = self.edge_counts_per_partition.get(et)
            if counts is None or len(counts) != self.num_partitions or any(c < 0 for c in counts):
                out.append(f"edge_counts_per_partition[{et}] must hold {self.num_partitions} "
                           f"counts >= 0, got {counts}")
        if set(self.edge_counts_per_partition) != set(self.edge_types):
            out.append("edge_counts_per_partition must have exactly the edge_types as keys")
        stray = [str(et) for et in self.supervision_edge_types if et not in set(self.edge_types)]
        if stray:
            out.append(f"supervision edge types {stray} are not among the edge types")
        for sup, neg in self.hard_negative_edge_types.items():
            if sup not in self.supervision_edge_types or neg in set(self.edge_types) or \
                    (sup.src_node_type, sup.dst_node_type) != (neg.src_node_type, neg.dst_node_type):
                out.append(f"hard negatives {neg} of {sup}: the key must be a supervision edge type, "
                           "the value an edge type of the same node types that is not among edge_types")
        return out

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickle as plain dicts (read-only mapping proxies do not pickle)."""
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("node_counts", "edge_counts_per_partition", "node_feature_dims",
                     "hard_negative_edge_types", "node_counts_per_partition"):
            plain[name] = dict(plain[name])
        return (_rebuild, (plain,))

    # -- built once at the edge -----------------------------------------------------------------
    @classmethod
    def from_manifest(cls, manifest: Any, has_splits: bool) -> DatasetMetadata:
        """From a shard ``Manifest`` (graphstore.formats.shards.format): its edge type names are parsed
        here, once. Hard-negative types (``negative_of``) are not edge types of the graph."""
        negatives = {EdgeType.parse(info.negative_of): EdgeType.parse(key)
                     for key, info in manifest.edge_types.items()
                     if info.negative_of}
        parsed = {key: EdgeType.parse(key) for key, info in manifest.edge_types.items()
                  if not info.negative_of}
        return cls(
            num_partitions=manifest.num_partitions, edge_dir=manifest.sample_edge_direction,
            node_types=tuple(manifest.node_types), edge_types=tuple(parsed.values()),
            supervision_edge_types=tuple(et for key, et in parsed.items()
                                         if manifest.edge_types[key].is_supervision),
            node_counts={nt: i.count for nt, i in manifest.node_types.items()},
            node_counts_per_partition={nt: tuple(i.counts_per_partition)
                                       for nt, i in manifest.node_types.items()},
            edge_counts_per_partition={et: tuple(manifest.edge_types[key].counts_per_partition)
                                       for key, et in parsed.items()},
            node_feature_dims={nt: i.feature_dim for nt, i in manifest.node_types.items()},
            has_splits=has_splits, hard_negative_edge_types=negatives)

    # -- derived views ----------------------------------------------------------------------------
    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type: loaders take plain tensors, batches are ``Data``."""
        return len(self.node_types) == 1 and len(self.edge_types) == 1

    @property
    def homogeneous_types(self) -> tuple[str, EdgeTypeTuple] | None:
        """``(node type, edge type tuple)`` of a homogeneous graph, None for a heterogeneous one."""
        if not self.is_homogeneous:
            return None
        return self.node_types[0], self.edge_types[0].as_tuple()

    def edge_count(self, edge_type: EdgeType) -> int:
        """Edges of ``edge_type`` in the shards (before any split removed supervision edges)."""
        return sum(self.edge_counts_per_partition[edge_type])

    @property
    def node_feature_info(self) -> FeatureInfo | dict[str, FeatureInfo] | None:
        """GiGL's shape: one ``FeatureInfo`` (homogeneous), ``{node type: FeatureInfo}`` over the
        types with features (heterogeneous), None when no node type has features."""
        infos = {nt: FeatureInfo(dim, FEATURE_DTYPE)
                 for nt, dim in self.node_feature_dims.items() if dim > 0}
        if not infos:
            return None
        return next(iter(infos.values())) if self.is_homogeneous else infos

    @property
    def edge_feature_info(self) -> None:
        """Always None: storage serves no edge features (GiGL's answer without edge features)."""
        return None

    def node_bounds(self, node_type: str) -> tuple[int, ...]:
        """``P + 1`` numbers: partition ``p`` owns dense ids ``[b[p], b[p + 1])`` of the type."""
        return _running_sum(self.node_counts_per_partition[node_type])

    def edge_bounds(self, edge_type: EdgeType) -> tuple[int, ...]:
        """``P + 1`` numbers: partition ``p`` holds edge ids ``[b[p], b[p + 1])`` of the type
        (contiguous per partition, partition 0 first)."""
        return _running_sum(self.edge_counts_per_partition[edge_type])

    # -- argument resolution (UsageError naming the choices) ------------------------------------
    def node_type(self, value: str | None) -> str:
        """``value`` checked, or the only node type when it is None (homogeneous graphs)."""
        if value is None:
            if len(self.node_types) != 1:
                raise UsageError(f"node_type is required in a heterogeneous graph (one of "
                                 f"{list(self.node_types)})")
            return self.node_types[0]
        if value not in self.node_types:
            raise UsageError(f"unknown node_type {value!r} (one of {list(self.node_types)})")
        return value

    def edge_type(self, value: EdgeTypeLike | None) -> EdgeType:
        """``value`` as a known edge type, or the only one when it is None."""
        return self._pick(value, self.edge_types, "edge_type", "an edge type")

    def supervision_edge_type(self, value: EdgeTypeLike | None) -> EdgeType:
        """``value`` as a supervision edge type, or the only one when it is None."""
        return self._pick(value, self.supervision_edge_types, "supervision_edge_type",
                          "a supervision edge type")

    @staticmethod
    def _pick(value: EdgeTypeLike | None, choices: tuple[EdgeType, ...], arg: str,
              what: str) -> EdgeType:
        names = [str(c) for c in choices]
        if value is None:
            if len(choices) != 1:
                raise UsageError(f"{arg} is required (one of {names})")
            return choices[0]
        et = as_edge_type(value)
        if et not in choices:
            raise UsageError(f"{et} is not {what} of this graph (one of {names})")
        return et


def _running_sum(counts: tuple[int, ...]) -> tuple[int, ...]:
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    return tuple(out)


def _rebuild(plain: dict[str, Any]) -> DatasetMetadata:
    return DatasetMetadata(**plain)


__all__ = ["DatasetMetadata", "EdgeType", "EdgeTypeLike", "FeatureInfo", "as_edge_type"]
