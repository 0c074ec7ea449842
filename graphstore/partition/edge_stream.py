"""The in-memory edge path: raw Parquet edges -> dense shard files in one chunked pass.

When every endpoint node type's id map fits in memory (:meth:`IdLookup.build`), an edge type is
written without a database join: the raw file is read in chunks (:func:`chunk_rows`), both
id columns are mapped to dense ids in memory, and each chunk writes the forward edges, the
reverse edges and the labels of every partition at once (the SQL path reads its own output back
for the last two). The edge step (:mod:`graphstore.partition.edges`) falls back to its DuckDB
join, which spills to disk, for larger id maps and for CSV input; both paths write the same rows.

Ordering rule: chunk ``i`` writes ``<folder>/<i:06d>.parquet``, so files sorted by name hold the
input's rows in input order, and edge ids (format: files by name, rows in order) do not depend
on thread timing. A partition that gets no rows from a chunk gets no file for it.

Chunk sizes and the progress interval come from the run's
:class:`~graphstore.partition.tuning.PartitionTuning` (defaults: 1 M rows, at most 4 M, a line
every 10 s); they change the files' sizes, never their rows.

Memory: the lookups, plus about :data:`IN_FLIGHT` + 1 chunks in their several forms, whatever the
edge count (peak RSS measured at 10 M and 50 M edges: ~0.5-0.6 GB with 1 M-row chunks, ~1.1-1.2 GB
with the 2 M-row chunks a 1 M-id string lookup asks for; the partitioning table of docs/performance.md).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from graphstore.partition.read_errors import arrow_reading
from graphstore.partition.tuning import DEFAULT_MAX_CHUNK_ROWS, DEFAULT_TUNING, PartitionTuning
from graphstore.formats.shards.format import NodeRanges

log = logging.getLogger(__name__)
MIN_CHUNK_ROWS = 1 << 16
"""The floor under a chunk that the memory budget shrinks (:func:`chunk_rows`)."""
BYTES_PER_CHUNK_ROW = 300
"""Peak memory per chunk row, all chunks in flight and their mapped and split copies together
(measured: peak RSS rose ~300 MB with 1 M-row chunks and ~600 MB with 2 M-row chunks)."""
MAX_HASHED_IDS = DEFAULT_MAX_CHUNK_ROWS // 2
"""A hashed lookup (string ids, or sparse integer ids) is rebuilt for every chunk, so node types
with more ids than this use the SQL join instead (fixed: it does not follow a run's tuning)."""
IN_FLIGHT = 2
"""Chunks processed at the same time (Arrow and numpy release the GIL for the heavy parts)."""
CODECS = {"uncompressed": "none", "snappy": "snappy", "zstd": "zstd"}
ROW_GROUP_BYTES = 4 << 20
"""The largest row group (uncompressed) a shard file is written with. A Parquet reader holds a
whole row group's column chunks while it decodes batches from it, so this bounds what a storage
process reads a partition with: a node file of 200 k rows x 128 float32 features written as one
row group (161 MB) was held beside the feature matrix it was read into. Measured on partition 0
of that graph (2026-12-05, the storage main process's anonymous memory at its peak during
``load_partition_graph``, against +24 MiB for a 20 k-edge graph): +89 MiB with 16 MiB row groups,
+45 MiB with 4 MiB and +40 MiB with 1 MiB (both with 1 MiB feature batches), load time unchanged
(0.55-0.67 s)."""


def row_group_rows(row_bytes: int) -> int:
    """Rows per row group for rows of ``row_bytes``: :data:`ROW_GROUP_BYTES` (at least one)."""
    return max(1, ROW_GROUP_BYTES // max(1, row_bytes))


class IdLookup:
    """Raw id -> dense id of one node type, in memory (the numbering of
    :class:`~graphstore.formats.shards.format.NodeRanges`: a raw id's rank in ascending order, then its
    partition's range).

    Integer ids whose range is small enough use a direct table (``dense = table[raw - low]``);
    other ids use Arrow's hashed ``index_in`` against the sorted ids, whose rank is then mapped.
    """

    def __init__(self, sorted_ids: pa.Array, table: np.ndarray | None, low: int,
                 ranges: NodeRanges) -> None:
        self.sorted_ids = sorted_ids
        self.table = table
        self.low = low
        self.ranges = ranges

    @staticmethod
    def could_fit(integer_ids: bool, count: int, span: int, budget_bytes: int) -> bool:
        """False when :meth:`build` would surely refuse ids of this kind, count and (integers)
        ``max - min + 1``: lets a caller skip fetching ids it would then throw away."""
        return (integer_ids and span * 8 <= budget_bytes) or count <= MAX_HASHED_IDS

    @classmethod
    def build(cls, sorted_ids: pa.Array, budget_bytes: int,
              num_partitions: int) -> "IdLookup | None":
        """A lookup for ``sorted_ids`` (ascending, unique, no nulls), or None when it would
        cost more than ``budget_bytes`` or be slower than the database join."""
        n = len(sorted_ids)
        ranges = NodeRanges(n, num_partitions)
        if pa.types.is_integer(sorted_ids.type) and n:
            ids = sorted_ids.to_numpy()
            low, span = int(ids[0]), int(ids[-1]) - int(ids[0]) + 1
            if span * 8 <= budget_bytes:
                table = np.full(span, -1, dtype=np.int64)
                table[ids - low] = ranges.dense_of_rank(np.arange(n, dtype=np.int64))
                return cls(sorted_ids, table, low, ranges)
        if n > MAX_HASHED_IDS or 3 * sorted_ids.nbytes > budget_bytes:
            return None
        return cls(sorted_ids, None, 0, ranges)

    def map(self, column: pa.Array) -> np.ndarray:
        """int64 dense ids of ``column``'s raw ids; -1 where the id is null or unknown."""
        if self.table is not None:
            raw = pc.cast(column, pa.int64())
            values = raw.fill_null(0).to_numpy()
            known = (values >= self.low) & (values < self.low + len(self.table))
            if raw.null_count:
                known &= raw.is_valid().to_numpy(zero_copy_only=False)
            out = np.full(len(values), -1, dtype=np.int64)
            out[known] = self.table[values[known] - self.low]
            return out
        if column.type != self.sorted_ids.type:
            column = pc.cast(column, self.sorted_ids.type)
        rank = pc.index_in(column, value_set=self.sorted_ids).fill_null(-1).to_numpy()
        rank = rank.astype(np.int64)
        known = rank >= 0
        rank[known] = self.ranges.dense_of_rank(rank[known])
        return rank


@dataclass(frozen=True)
class EdgeOutput:
    """One set of files an edge chunk is written to.

    ``src_side`` names the input endpoint that becomes the output's ``src`` column (``dst``
    flips the edge); ``anchor_side`` the input endpoint whose partition holds the row.
    """

    folder_for: Callable[[int], str]  # partition -> folder (absolute)
    src_side: Literal["src", "dst"]
    anchor_side: Literal["src", "dst"]
    with_attributes: bool  # weight and features (labels carry only src, dst)


@dataclass
class StreamResult:
    rows_in: int = 0
    missing: int = 0  # rows whose endpoint is null or unknown (not written)
    stopped_early: bool = False  # stop_on_missing hit a missing endpoint
    bad_values: bool = False  # a weight or feature is null, NaN or infinite (pass stopped)


def _float32(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.cast(column, pa.float32()).to_numpy(zero_copy_only=False))


def feature_matrix(batch: pa.RecordBatch | pa.Table, columns: tuple[str, ...],
                   width: int) -> np.ndarray | None:
    """float32 [rows, width] of validated features: one list column, or one scalar per column."""
    if not width:
        return None
    kind = batch.schema.field(columns[0]).type
    if len(columns) == 1 and (pa.types.is_list(kind) or pa.types.is_large_list(kind)
                              or pa.types.is_fixed_size_list(kind)):
        return _float32(pc.list_flatten(batch.column(columns[0]))).reshape(-1, width)
    return np.stack([_float32(batch.column(c)) for c in columns], axis=1)


def chunk_rows(num_rows: int, budget_bytes: int, *lookups: IdLookup,
               tuning: PartitionTuning = DEFAULT_TUNING) -> int:
    """Rows per chunk: ``tuning.chunk_rows``, or twice the largest hashed lookup (which is
    rebuilt for every chunk), at most ``tuning.max_chunk_rows`` and what ``budget_bytes`` holds
    at :data:`BYTES_PER_CHUNK_ROW` (not below :data:`MIN_CHUNK_ROWS`); fewer when that leaves a
    small table fewer than :data:`IN_FLIGHT` chunks (so it still uses every thread)."""
    hashed = max((len(lk.sorted_ids) for lk in lookups if lk.table is None), default=0)
    cap = min(tuning.max_chunk_rows, max(budget_bytes // BYTES_PER_CHUNK_ROW, MIN_CHUNK_ROWS))
    target = min(max(tuning.chunk_rows, 2 * hashed), cap)
    return max(min(target, -(-num_rows // IN_FLIGHT)), min(2 * hashed, target), 1)


@dataclass(frozen=True)
class _ChunkWriter:
    """Maps one chunk of raw edges to dense ids and writes it to every output (a pool thread
    each): ``(rows dropped for a missing endpoint, whether a weight or feature is not
    finite)``; nothing is written when either stops the pass."""

    src_column: str
    dst_column: str
    weight_column: str | None
    feature_columns: tuple[str, ...]
    feature_width: int
    src_lookup: IdLookup
    dst_lookup: IdLookup
    outputs: list[EdgeOutput]
    compression: str
    stop_on_missing: bool
    ranges: dict[str, Any]

    def __call__(self, chunk: int, batch: pa.RecordBatch) -> tuple[int, bool]:
        weight = _float32(batch.column(self.weight_column)) if self.weight_column else None
        feats = feature_matrix(batch, self.feature_columns, self.feature_width)
        if any(a is not None and not np.isfinite(a).all() for a in (weight, feats)):
            return 0, True
        ends = {"src": self.src_lookup.map(batch.column(self.src_column)),
                "dst": self.dst_lookup.map(batch.column(self.dst_column))}
        keep = (ends["src"] >= 0) & (ends["dst"] >= 0)
        missing = len(keep) - int(np.count_nonzero(keep))
        if missing and self.stop_on_missing:
            return missing, False
        if missing:
            ends = {k: v[keep] for k, v in ends.items()}
            weight = weight[keep] if weight is not None else None
            feats = feats[keep] if feats is not None else None
        for out in self.outputs:
            _write_output(chunk, out, ends, weight, feats, self.ranges, self.compression)
        return missing, False


def stream_edges(path: str, *, src_column: str, dst_column: str, weight_column: str | None,
                 feature_columns: tuple[str, ...], feature_width: int,
                 src_lookup: IdLookup, dst_lookup: IdLookup, num_partitions: int,
                 outputs: list[EdgeOutput], compression: str, stop_on_missing: bool,
                 budget_bytes: int, label: str = "edges", source: str | None = None,
                 tuning: PartitionTuning = DEFAULT_TUNING) -> StreamResult:
    """Map and write every chunk of one raw Parquet edge file (rules in the module docstring).

    Rows with a null or unknown endpoint are counted and not written; with ``stop_on_missing``
    the pass stops at the first chunk that has one (the caller then reports the error). A null,
    NaN or infinite weight or feature stops the pass (``bad_values``). Feature columns must be
    scalar, or one list column of ``feature_width`` values per row (already checked). Chunks
    are sized so that those in flight fit ``budget_bytes`` (:func:`chunk_rows`, with
    ``tuning``). Every ``tuning.progress_s`` seconds a progress line (rows done, rows/s) is
    logged under ``label``.
    A raw file that cannot be decoded raises InputDataError naming ``source`` (default ``path``);
    errors while writing pass through. Each row goes to the partition whose range holds its
    anchor's dense id (the lookups' :class:`~graphstore.formats.shards.format.NodeRanges`).
    """
    columns = list(dict.fromkeys([src_column, dst_column,
                                  *([weight_column] if weight_column else []), *feature_columns]))
    result = StreamResult()
    ranges = {"src": src_lookup.ranges, "dst": dst_lookup.ranges}
    if any(r.num_partitions != num_partitions for r in ranges.values()):
        raise ValueError(f"lookups numbered for other than {num_partitions} partitions")

    write = _ChunkWriter(src_column, dst_column, weight_column, feature_columns, feature_width,
                         src_lookup, dst_lookup, outputs, compression, stop_on_missing, ranges)

    def collect(job: Future) -> bool:
        """Add a finished chunk to the result; True when the pass must stop."""
        missing, bad = job.result()
        result.missing += missing
        result.bad_values |= bad
        return bad or bool(missing and stop_on_missing)

    pending: list[Future] = []
    stop = False
    t0 = last_report = time.perf_counter()
    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        with arrow_reading(source or path):
            reader = pq.ParquetFile(path)
        total = reader.metadata.num_rows
        batches = _decoded(reader.iter_batches(columns=columns, batch_size=chunk_rows(
            total, budget_bytes, src_lookup, dst_lookup, tuning=tuning)), source or path)
        for chunk, batch in enumerate(batches):
            result.rows_in += batch.num_rows
            pending.append(pool.submit(write, chunk, batch))
            if len(pending) >= IN_FLIGHT and collect(pending.pop(0)):
                stop = True
                break
            now = time.perf_counter()
            if now - last_report >= tuning.progress_s:
                last_report = now
                log.info("step=%r progress rows=%d of %d rows_per_s=%.0f", label,
                         result.rows_in, total, result.rows_in / (now - t0))
        for job in pending:
            stop = collect(job) or stop
    result.stopped_early = stop
    return result


def _decoded(batches: Iterator[pa.RecordBatch], source: str) -> Iterator[pa.RecordBatch]:
    """``batches``, with decoding errors of the raw file reported as InputDataError naming
    ``source`` (only the reads are guarded: the consumer's own errors never pass through here)."""
    while True:
        with arrow_reading(source):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def write_shard_file(folder: str, name: str, columns: dict[str, np.ndarray | pa.Array],
                     feats: np.ndarray | None, compression: str) -> None:
    """One shard Parquet file: ``columns``, then ``f_0 .. f_{k-1}`` from the ``[rows, k]``
    ``feats``, in row groups of at most :data:`ROW_GROUP_BYTES`. No dictionary encoding: it made
    int64 writes ~3x slower and barely shrinks them."""
    if feats is not None:
        columns = {**columns, **{f"f_{i}": np.ascontiguousarray(feats[:, i])
                                 for i in range(feats.shape[1])}}
    os.makedirs(folder, exist_ok=True)
    table = pa.table(columns)
    pq.write_table(table, os.path.join(folder, name), compression=CODECS[compression],
                   use_dictionary=False,
                   row_group_size=row_group_rows(table.nbytes // max(1, table.num_rows)))


def _write_output(chunk: int, out: EdgeOutput, ends: dict[str, np.ndarray],
                  weight: np.ndarray | None, feats: np.ndarray | None,
                  ranges: dict[str, NodeRanges], compression: str) -> None:
    """Split one mapped chunk by anchor partition and write a file per partition."""
    src = ends[out.src_side]
    dst = ends["dst" if out.src_side == "src" else "src"]
    num_partitions = ranges[out.anchor_side].num_partitions
    part = ranges[out.anchor_side].partition_of(ends[out.anchor_side])
    if num_partitions == 1:
        order, bounds = None, np.array([0, len(part)])
    else:  # a stable sort keeps input order within each partition (a radix sort for uint16)
        order = np.argsort(part.astype(np.uint16 if num_partitions <= 1 << 16 else np.int64),
                           kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(part, minlength=num_partitions))])
    for p in range(num_partitions):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        if lo == hi:
            continue
        rows = slice(lo, hi) if order is None else order[lo:hi]
        cols = {"src": src[rows], "dst": dst[rows]}
        if out.with_attributes and weight is not None:
            cols["weight"] = weight[rows]
        block = feats[rows] if out.with_attributes and feats is not None else None
        write_shard_file(out.folder_for(p), f"{chunk:06d}.parquet", cols, block, compression)
