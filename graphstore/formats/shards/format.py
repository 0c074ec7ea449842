"""The shard set format (schema_version 3): what the partition stage writes and storage reads.

A shard-set *root* (the partition stage's ``--output``) holds versions and a ``CURRENT`` pointer
naming the complete one (graphstore.formats.shards.publish). Layout of one version folder
(``<root>/v-<UTC>-<hex>/``)::

    .graphstore-shards                    marker (JSON: format, schema_version, writer): written first
    manifest.json                         written LAST; its presence marks a complete shard set
    id_map/<node_type>.parquet            int_id INT64, raw_id (STRING or INT64): one row per node;
      or id_map/<node_type>/*.parquet     the same rows in any number of files (id_map_files)
    part_<p>/nodes/<node_type>/*.parquet  the nodes partition p owns: int_id INT64 [, f_0..f_{d-1} FLOAT],
                                          each id of its range (below) once, in any order
    part_<p>/edges/<edge_type>/*.parquet  the edges partition p owns: src INT64, dst INT64
                                          [, weight FLOAT] [, f_0..f_{k-1} FLOAT]  (dense ids)
    part_<p>/labels/<edge_type>/*.parquet supervision edge types only: src INT64, dst INT64 of the
                                          edges whose SOURCE (the anchor) partition p owns; absent
                                          when ``labels_from`` names the reverse type, whose edges
                                          (flipped) are exactly these labels (``in`` sampling).
                                          Hard-negative edge types (``negative_of`` set: the
                                          supervision type they serve) have labels only: their
                                          edge counts are 0, there is no reverse type for them

Files are written in row groups of at most ~4 MiB uncompressed (graphstore.partition.edge_stream,
``ROW_GROUP_BYTES``): a reader holds a whole row group while it decodes it, so this bounds a
storage process's read buffers. A reader does not depend on it (older sets have one row group per
file and still load, holding more while they do).

Rules (every writer and reader keeps them):
- **Ranges.** Partition ``p`` owns one contiguous range of dense ids per node type,
  ``[bounds[p], bounds[p + 1])``, where ``bounds`` is the running sum of the manifest's
  ``counts_per_partition`` (:meth:`Manifest.node_ranges`, :class:`NodeRanges`): a partition book is
  P + 1 numbers, never an array of N, and a partition's row of a dense id is ``id - bounds[p]``.
  Readers rely on this rule only.
- **Numbering** (how the partition stage fills the ranges; :class:`NodeRanges`): per node type,
  the raw ids sorted ascending (strings by UTF-8 byte order) get ranks ``0..N-1``; the node of rank
  ``r`` belongs to partition ``r % P`` and gets dense id ``bounds[r % P] + r // P``. So
  partition ``p`` holds ranks ``p, p + P, p + 2P, ...`` (``ceil((N - p) / P)`` nodes): node counts
  differ by at most one, and anchored edge counts stay balanced even when degree follows the raw
  id (neighbouring ranks go to different partitions). Within a partition, dense ids follow raw ids.
  ``id_map`` is the only way back to raw ids.
- Edge assignment: an edge lives in the partition of its *anchor*: the source node when
  ``sample_edge_direction == "out"``, the destination node when ``"in"``, so that every edge a
  sampler walks from a node is stored beside that node.
- Edge ids: per edge type, the edges of partition 0 (in file order: files sorted by name, rows in
  order) get ids ``0..E0-1``, partition 1 the next ``E1`` ids, and so on (:func:`edge_id_base`):
  also one range per partition.
- A partition with no rows of a type has no folder for it; the manifest's counts say 0.
- ``edge_type`` folder names are ``src__relation__dst`` (names never contain ``__``).
- Reverse edge types (``addReverseEdges``, default on): for every edge type whose node types differ,
  ``dst__rev_<relation>__src`` holds each edge flipped, placed by its own anchor; its manifest entry
  has ``reverse_of`` set. Edge ids of a reverse type are its own range.
- ``manifest.files`` maps every other file's relative path to its byte size, row count and one
  checksum: ``sha256`` (hex; the local engine computes it) or ``crc32c`` (8 hex digits, the
  big-endian CRC32C Cloud Storage keeps for every object; the BigQuery engine, whose files
  BigQuery writes straight to gs://, reads it from the object's metadata instead of reading the
  file back). Readers verify whichever the entry has.
- Row order is never a rule a reader may rely on: id maps and node files are joined or placed by
  ``int_id`` (the local engine happens to write them ascending); an edge's id is its position
  (the edge-id rule below).
- Floating columns (weights, features) are FLOAT (float32) or DOUBLE (BigQuery has no FLOAT32:
  the BigQuery engine's files hold the source's FLOAT64 values); readers round them to float32,
  as the local engine does when it writes, so both engines' sets load the same numbers.

Schema history: 2 assigned dense id ``i`` (the ``i``-th raw id) to partition ``i % P`` and stored
an int32 partition book of N entries per node type (``partition_book/<type>.npy``), which every
storage machine had to hold; 3 makes each partition's ids one range. A schema-2 set is refused
with the command that re-partitions it (:data:`SCHEMA_FIX`). Schema 3 later admitted (readers
from 2026-12-07 on) id maps as folders, ``crc32c`` checksums and DOUBLE floating columns, for the
BigQuery engine; an earlier reader refuses such a set naming its missing ``id_map/<type>.parquet``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

SCHEMA_VERSION = 3
FORMAT_NAME = "graphstore-shards"
MANIFEST = "manifest.json"
SCHEMA_FIX = ("re-partition the raw tables with this version (python -m components.partition, or "
              "pipeline run --start-at partition)")
"""What a user does with a shard set of another schema version."""


@dataclass(frozen=True, slots=True)
class NodeRanges:
    """The dense-id ranges of one node type of ``count`` nodes over ``num_partitions``
    partitions, by the numbering rule of the module docs: rank ``r`` (the raw id's position in
    ascending order) goes to partition ``r % P`` as dense id ``bounds[r % P] + r // P``.

    With ``count = a * P + c`` (``0 <= c < P``), partitions ``0..c-1`` hold ``a + 1`` nodes and the
    others ``a``, so ``bounds[p] = p * a + min(p, c)``. Every method is a closed form of these
    numbers (numpy, or a DuckDB SQL expression over integer columns): nothing here
    grows with ``count``.
    """

    count: int
    num_partitions: int

    def __post_init__(self) -> None:
        if self.count < 0 or self.num_partitions < 1:
            raise ValueError(f"NodeRanges needs count >= 0 and num_partitions >= 1, got "
                             f"{self.count}, {self.num_partitions}")

    @property
    def _a_c(self) -> tuple[int, int]:
        return divmod(self.count, self.num_partitions)

    def start(self, partition: int) -> int:
        """First dense id of ``partition`` (``bounds[partition]``; ``count`` for ``P``)."""
        a, c = self._a_c
        return partition * a + min(partition, c)

    @property
    def bounds(self) -> tuple[int, ...]:
        """``P + 1`` numbers: partition ``p`` owns ``[bounds[p], bounds[p + 1])``."""
        return tuple(self.start(p) for p in range(self.num_partitions + 1))

    @property
    def counts(self) -> tuple[int, ...]:
        """Nodes per partition (what the manifest's ``counts_per_partition`` holds)."""
        b = self.bounds
        return tuple(b[p + 1] - b[p] for p in range(self.num_partitions))

    def dense_of_rank(self, ranks: np.ndarray) -> np.ndarray:
        """int64 dense ids of int64 ``ranks`` (each in ``[0, count)``)."""
        a, c = self._a_c
        p = ranks % self.num_partitions
        return p * a + np.minimum(p, c) + ranks // self.num_partitions

    def rank_of_dense(self, dense: np.ndarray) -> np.ndarray:
        """int64 ranks of int64 dense ids (the inverse of :meth:`dense_of_rank`)."""
        p = self.partition_of(dense)
        a, c = self._a_c
        return (dense - (p * a + np.minimum(p, c))) * self.num_partitions + p

    def partition_of(self, dense: np.ndarray) -> np.ndarray:
        """int64 partition owning each dense id."""
        a, c = self._a_c
        big = c * (a + 1)  # the first id of the partitions holding a nodes
        return np.where(dense < big, dense // (a + 1), c + (dense - big) // max(a, 1))

    def ranks_of_partition(self, partition: int) -> np.ndarray:
        """The ranks partition ``partition`` holds, ascending (= its dense ids' order)."""
        return np.arange(partition, self.count, self.num_partitions, dtype=np.int64)

    def sql_dense_of_rank(self, rank: str) -> str:
        """DuckDB SQL of :meth:`dense_of_rank` over the integer expression ``rank`` (``%`` and
        ``//``; BigQuery's is graphstore.partition.bigquery_numbering.dense_of_rank_sql)."""
        a, c, P = *self._a_c, self.num_partitions
        return f"(({rank}) % {P} * {a} + least(({rank}) % {P}, {c}) + ({rank}) // {P})"

    def sql_partition_of(self, dense: str) -> str:
        """SQL (DuckDB) of :meth:`partition_of` over the integer expression ``dense``."""
        a, c = self._a_c
        big = c * (a + 1)
        return (f"(CASE WHEN ({dense}) < {big} THEN ({dense}) // {a + 1} "
                f"ELSE {c} + (({dense}) - {big}) // {max(a, 1)} END)")


def anchor_side(sample_edge_direction: Literal["in", "out"]) -> Literal["src", "dst"]:
    """Which endpoint an edge is stored with: ``dst`` for inbound sampling, ``src`` for outbound."""
    return "dst" if sample_edge_direction == "in" else "src"


def id_map_path(node_type: str) -> str:
    """The one-file id map of ``node_type`` (the local engine's)."""
    return f"id_map/{node_type}.parquet"


def id_map_dir(node_type: str) -> str:
    """The id map folder of ``node_type`` (the BigQuery engine's: any number of files)."""
    return f"id_map/{node_type}"


def node_dir(partition: int, node_type: str) -> str:
    return f"part_{partition}/nodes/{node_type}"


def edge_dir(partition: int, edge_type: str) -> str:
    return f"part_{partition}/edges/{edge_type}"


def label_dir(partition: int, edge_type: str) -> str:
    return f"part_{partition}/labels/{edge_type}"


@dataclass(frozen=True, kw_only=True)
class FileEntry:
    """One file of the set: its size, rows (Parquet) and exactly one checksum (module docs)."""

    bytes: int
    rows: int | None = None
    sha256: str | None = None
    crc32c: str | None = None

    def __post_init__(self) -> None:
        if (self.sha256 is None) == (self.crc32c is None):
            raise ValueError("a file entry has exactly one of sha256 and crc32c")


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

    def node_bounds(self, node_type: str) -> tuple[int, ...]:
        """``P + 1`` numbers: partition ``p`` owns dense ids ``[b[p], b[p + 1])`` of the type."""
        out = [0]
        for n in self.node_types[node_type].counts_per_partition:
            out.append(out[-1] + n)
        return tuple(out)

    def id_map_files(self, node_type: str) -> list[str]:
        """The relative paths of ``node_type``'s id map: ``id_map/<type>.parquet``, or every file
        under ``id_map/<type>/`` sorted by name; together they hold each node's row once."""
        if id_map_path(node_type) in self.files:
            return [id_map_path(node_type)]
        prefix = id_map_dir(node_type) + "/"
        return sorted(rel for rel in self.files if rel.startswith(prefix))

    def node_ranges(self, node_type: str) -> NodeRanges:
        """The numbering of ``node_type`` (:class:`NodeRanges`)."""
        return NodeRanges(self.node_types[node_type].count, self.num_partitions)

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
