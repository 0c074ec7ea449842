"""The shard set format (schema_version 2): what the partition stage writes and storage reads.

A shard-set *root* (the partition stage's ``--output``) holds versions and a ``CURRENT`` pointer
naming the complete one (graphstore.shards.publish: schema 2 added that layout; a version's own
files are as in schema 1). Layout of one version folder (``<root>/v-<UTC>-<hex>/``)::

    .graphstore-shards                    marker (JSON: format, schema_version, writer): written first
    manifest.json                         written LAST; its presence marks a complete shard set
    id_map/<node_type>.parquet            int_id INT64 (dense 0..N-1, ascending), raw_id (STRING or INT64)
    partition_book/<node_type>.npy        int32[N]: the partition owning each dense id
    part_<p>/nodes/<node_type>/*.parquet  the nodes partition p owns: int_id INT64 [, f_0..f_{d-1} FLOAT]
    part_<p>/edges/<edge_type>/*.parquet  the edges partition p owns: src INT64, dst INT64
                                          [, weight FLOAT] [, f_0..f_{k-1} FLOAT]  (dense ids)
    part_<p>/labels/<edge_type>/*.parquet supervision edge types only: src INT64, dst INT64 of the
                                          edges whose SOURCE (the anchor) partition p owns; absent
                                          when ``labels_from`` names the reverse type, whose edges
                                          (flipped) are exactly these labels (``in`` sampling).
                                          Hard-negative edge types (``negative_of`` set: the
                                          supervision type they serve) have labels only: their
                                          edge counts are 0, there is no reverse type for them

Rules (every writer and reader keeps them):
- Dense ids: per node type, raw ids sorted ascending get 0..N-1. ``id_map`` is the only way back.
- Node assignment: ``partition(int_id) = int_id % num_partitions`` (balanced node counts; a pure
  function, see :func:`node_partition`); the partition book stores it explicitly for GLT.
- Edge assignment: an edge lives in the partition of its *anchor*: the source node when
  ``sample_edge_direction == "out"``, the destination node when ``"in"``, so that every edge a
  sampler walks from a node is stored beside that node.
- Edge ids: per edge type, the edges of partition 0 (in file order: files sorted by name, rows in
  order) get ids ``0..E0-1``, partition 1 the next ``E1`` ids, and so on (:func:`edge_id_base`).
- A partition with no rows of a type has no folder for it; the manifest's counts say 0.
- ``edge_type`` folder names are ``src__relation__dst`` (names never contain ``__``).
- Reverse edge types (``addReverseEdges``, default on): for every edge type whose node types differ,
  ``dst__rev_<relation>__src`` holds each edge flipped, placed by its own anchor; its manifest entry
  has ``reverse_of`` set. Edge ids of a reverse type are its own range.
- ``manifest.files`` maps every other file's relative path to its sha256, byte size and row count.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

SCHEMA_VERSION = 2
FORMAT_NAME = "graphstore-shards"
MANIFEST = "manifest.json"


def node_partition(int_id: int, num_partitions: int) -> int:
    """The partition that owns a dense node id (the SQL writer uses the same ``int_id % P``)."""
    return int_id % num_partitions


def anchor_side(sample_edge_direction: Literal["in", "out"]) -> Literal["src", "dst"]:
    """Which endpoint an edge is stored with: ``dst`` for inbound sampling, ``src`` for outbound."""
    return "dst" if sample_edge_direction == "in" else "src"


def id_map_path(node_type: str) -> str:
    return f"id_map/{node_type}.parquet"


def partition_book_path(node_type: str) -> str:
    return f"partition_book/{node_type}.npy"


def node_dir(partition: int, node_type: str) -> str:
    return f"part_{partition}/nodes/{node_type}"


def edge_dir(partition: int, edge_type: str) -> str:
    return f"part_{partition}/edges/{edge_type}"


def label_dir(partition: int, edge_type: str) -> str:
    return f"part_{partition}/labels/{edge_type}"


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    sha256: str
    bytes: int
    rows: int | None = None


@dataclass(frozen=True, kw_only=True)
class NodeTypeInfo:
    count: int
    id_dtype: Literal["string", "int64"]
    feature_dim: int
    counts_per_partition: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class EdgeTypeInfo:
    src_node_type: str
    relation: str
    dst_node_type: str
    count: int
    counts_per_partition: tuple[int, ...]
    has_weight: bool
    feature_dim: int
    is_supervision: bool
    labels_per_partition: tuple[int, ...] | None = None  # supervision types: label rows per part
    labels_from: str | None = None  # labels are this (reverse) type's edges, flipped
    reverse_of: str | None = None  # set on a reverse type the partitioner added (datasetConfig.partitionConfig.addReverseEdges)
    dropped_dangling: int = 0
    negative_of: str | None = None  # hard negatives of this supervision type: labels only, no edges


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """The contents of ``manifest.json``. ``from_json(to_json(m)) == m``."""

    schema_version: int
    num_partitions: int
    sample_edge_direction: Literal["in", "out"]
    node_types: dict[str, NodeTypeInfo]
    edge_types: dict[str, EdgeTypeInfo]
    files: dict[str, FileEntry]
    config_hash: str
    created_at: str
    format: str = FORMAT_NAME
    stats: dict[str, float] = field(default_factory=dict)

    def edge_id_base(self, edge_type: str, partition: int) -> int:
        """First global edge id of ``edge_type`` in ``partition`` (ids are contiguous per part)."""
        return sum(self.edge_types[edge_type].counts_per_partition[:partition])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict) -> "Manifest":
        return cls(
            schema_version=raw["schema_version"],
            num_partitions=raw["num_partitions"],
            sample_edge_direction=raw["sample_edge_direction"],
            node_types={
                k: NodeTypeInfo(**{**v, "counts_per_partition": tuple(v["counts_per_partition"])})
                for k, v in raw["node_types"].items()
            },
            edge_types={
                k: EdgeTypeInfo(**{**v, "counts_per_partition": tuple(v["counts_per_partition"]),
                                    "labels_per_partition": (tuple(v["labels_per_partition"])
                                                             if v.get("labels_per_partition")
                                                             is not None else None)})
                for k, v in raw["edge_types"].items()
            },
            files={k: FileEntry(**v) for k, v in raw["files"].items()},
            config_hash=raw["config_hash"],
            created_at=raw["created_at"],
            format=raw.get("format", FORMAT_NAME),
            stats=dict(raw.get("stats", {})),
        )
