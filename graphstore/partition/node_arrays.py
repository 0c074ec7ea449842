"""The in-memory node path: a raw Parquet node table -> id map and per-partition node files.

Used when a node table fits the memory budget (:func:`estimated_bytes`); the engine's DuckDB path
handles larger tables and CSV. Both write the same rows (format: graphstore.formats.shards.format):

- the ``r``-th raw id in ascending order (strings by byte order, as DuckDB) has rank ``r``, goes
  to partition ``r % P`` and gets the dense id :class:`~graphstore.formats.shards.format.NodeRanges`
  gives it; partition ``p``'s file lists its range ascending.

Validation that needs row numbers for its message (null ids, duplicates, bad features) is left
to the caller's SQL checks; this module only detects nulls and duplicates.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphstore.partition.edge_stream import feature_matrix, write_shard_file
from graphstore.partition.read_errors import arrow_reading
from graphstore.formats.shards.format import NodeRanges


def estimated_bytes(num_rows: int, string_ids: bool, feature_width: int) -> int:
    """Peak memory of :func:`read_nodes` plus the writers, per the arrays they hold (the id
    map's permutation included)."""
    return num_rows * (32 + (40 if string_ids else 8) + 8 * feature_width)


@dataclass(frozen=True)
class NodeArrays:
    """One node type held in memory, ordered by dense id."""

    sorted_ids: pa.Array  # raw ids, ascending: position = rank
    feats: np.ndarray | None  # float32 [count, width], row = rank
    nulls: int  # null ids found (the table is unusable when > 0)
    duplicates: int  # rows whose id repeats an earlier one (unusable when > 0)

    @property
    def count(self) -> int:
        return len(self.sorted_ids)


def read_nodes(path: str, id_column: str, string_ids: bool, feature_columns: tuple[str, ...],
               feature_width: int, *, source: str | None = None) -> NodeArrays:
    """Read a Parquet node table and order it by raw id. A file that cannot be decoded raises
    InputDataError naming ``source`` (the uri the user gave; default ``path``)."""
    with arrow_reading(source or path):
        table = pq.read_table(path, columns=list(dict.fromkeys([id_column, *feature_columns])))
    ids = pc.cast(table.column(id_column), pa.string() if string_ids else pa.int64())
    ids = ids.combine_chunks()
    if ids.null_count:
        return NodeArrays(ids, None, ids.null_count, 0)
    order = pc.sort_indices(ids).to_numpy() if string_ids else np.argsort(ids.to_numpy(),
                                                                           kind="stable")
    sorted_ids = ids.take(pa.array(order))
    duplicates = 0
    if len(sorted_ids) > 1:
        same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, len(sorted_ids) - 1))
        duplicates = int(pc.sum(same).as_py() or 0)
    feats = feature_matrix(table, feature_columns, feature_width)
    return NodeArrays(sorted_ids, None if feats is None else feats[order], 0, duplicates)


def write_id_map(nodes: NodeArrays, num_partitions: int, path: str, compression: str) -> None:
    """``int_id, raw_id`` in dense id order (partition 0's range first)."""
    ranges = NodeRanges(nodes.count, num_partitions)
    ranks = np.concatenate([ranges.ranks_of_partition(p) for p in range(num_partitions)])
    write_shard_file(os.path.dirname(path), os.path.basename(path),
                     {"int_id": np.arange(nodes.count, dtype=np.int64),
                      "raw_id": nodes.sorted_ids.take(pa.array(ranks))}, None, compression)


def write_node_files(nodes: NodeArrays, num_partitions: int, folder_for, compression: str) -> None:
    """Each partition's range of dense ids (and their features) to
    ``folder_for(p)/000000.parquet``, ascending."""
    bounds = NodeRanges(nodes.count, num_partitions).bounds
    for p in range(min(num_partitions, nodes.count)):
        ids = np.arange(bounds[p], bounds[p + 1], dtype=np.int64)
        block = nodes.feats[p::num_partitions] if nodes.feats is not None else None
        write_shard_file(folder_for(p), "000000.parquet", {"int_id": ids}, block, compression)
