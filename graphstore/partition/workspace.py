"""What the steps of one partition run share: :class:`Workspace`.

A workspace holds the run's DuckDB database (one connection per thread, :attr:`Workspace.db`),
its folders (the scratch ``work_dir`` with DuckDB's ``hive/`` output and spill files, and the
version folder ``out_dir`` the shard files go to), the run's settings (partition count, sampling
direction, dangling-edge policy, memory limit and
:class:`~graphstore.partition.tuning.PartitionTuning`) and what the node step leaves for the edge
and node-file steps: node tables and arrays, id lookups, dropped-edge counts, per-step rates.

Invariants:
- the registries (``node_tables``, ``node_arrays``, ``lookups``, ``ranges``) are filled by the node step
  (:mod:`graphstore.partition.nodes`) before any edge or node-file step starts, and only read
  after that; ``dropped`` and ``stats`` take one key per edge type, each written by one thread;
- a DuckDB connection is never shared between threads; :meth:`Workspace.close` closes them all;
- hive folders are moved from ``work_dir`` into ``out_dir`` (same file system), so ``out_dir``
  holds only finished files.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Callable, Literal, Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from graphstore.io import uris
from graphstore.partition import node_arrays, read_errors
from graphstore.partition import sources as src_mod
from graphstore.partition.edge_stream import IdLookup
from graphstore.partition.sources import IdKind, Table, sql_ident, sql_str
from graphstore.partition.tuning import PartitionTuning
from graphstore.formats.shards.format import NodeRanges

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import NodeSource, TaskConfig


def source_format(uri: str, declared: str | None) -> Literal["parquet", "csv"]:
    """The declared format of a source, else ``csv`` for ``.csv`` / ``.csv.gz`` and ``parquet``."""
    if declared:
        return declared  # type: ignore[return-value]
    return "csv" if uri.lower().endswith((".csv", ".csv.gz")) else "parquet"


class Workspace:
    """State of one partition run (a DuckDB connection and the staging folders)."""

    def __init__(self, task: "TaskConfig", num_partitions: int, work_dir: str, out_dir: str,
                 tuning: PartitionTuning) -> None:
        """``out_dir``: the (existing) folder the shard files go to; ``work_dir``: scratch on
        the same file system (hive folders are moved from there into ``out_dir``)."""
        self.task = task
        self.P = num_partitions
        self.direction = task.trainer.storage.storage_args.sample_edge_direction
        self.out = out_dir
        self.work = work_dir
        self.hive = os.path.join(work_dir, "hive")
        os.makedirs(os.path.join(self.hive, "edges"))
        os.makedirs(os.path.join(self.hive, "nodes"))
        os.makedirs(os.path.join(self.hive, "labels"))
        pcfg = task.dataset.partition
        self.dangling = pcfg.dangling_edges
        self.memory_limit_mb = pcfg.memory_limit_mb  # named when a step runs out of memory
        self.compression = pcfg.parquet_compression
        # COPY options of every file written; uncompressed is the default: dense int64 ids and
        # float features barely compress, and snappy cost ~25% of the run (DuckDB 1.5.5, 10 M edges)
        self.parquet = f"FORMAT PARQUET, COMPRESSION {sql_str(pcfg.parquet_compression)}"
        self.con = duckdb.connect(config={
            "memory_limit": f"{pcfg.memory_limit_mb}MB",
            "temp_directory": os.path.join(work_dir, "spill"),
            "preserve_insertion_order": False,
        })
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._cursor_lock = threading.Lock()
        self.tuning = tuning
        self.dropped: dict[str, int] = {}
        self.node_tables: dict[str, tuple["NodeSource", Table, IdKind]] = {}
        self.node_arrays: dict[str, node_arrays.NodeArrays] = {}  # node tables held in memory
        self._node_tables_made: set[str] = set()  # of those, which have their DuckDB table too
        self._node_table_lock = threading.Lock()
        self.lookups: dict[str, IdLookup | None] = {}  # node type -> in-memory id map, if it fits
        self.ranges: dict[str, NodeRanges] = {}  # node type -> its numbering, once counted
        self.lookup_budget = tuning.lookup_budget_bytes(pcfg.memory_limit_mb)
        self.stats: dict[str, float] = {}

    @property
    def db(self) -> duckdb.DuckDBPyConnection:
        """The calling thread's connection to the run's database (steps 3 and 4 run on a few
        threads at once; a DuckDB connection must not be shared between threads)."""
        cur = getattr(self._local, "con", None)
        if cur is None:
            cur = self.con.cursor()
            cur.execute("SET enable_progress_bar = false")
            self._local.con = cur
            with self._cursor_lock:
                self._cursors.append(cur)
        return cur

    def close(self) -> None:
        """Close every DuckDB connection (idempotent)."""
        for cur in self._cursors:
            cur.close()
        self._cursors.clear()
        self.con.close()

    @read_errors.step("opening {uri}")
    def open_source(self, uri: str, declared_format: str | None,
                    columns: Sequence[str]) -> Table:
        """A source table, local, on gs:// (copied locally) or in BigQuery (``bq://``: the
        ``columns`` the config uses copied to a local Parquet file, graphstore.io.bigquery_source)."""
        inputs = os.path.join(self.work, "inputs")
        if declared_format == "bigquery":
            from graphstore.io import bigquery_source

            name = uri[len(bigquery_source.SCHEME):].replace(".", "__") + ".parquet"
            path = bigquery_source.to_parquet(uri, columns, os.path.join(inputs, "bigquery", name))
            return src_mod.open_table(self.db, uri, path, "parquet")
        path = uris.localize(uri, inputs)
        return src_mod.open_table(self.db, uri, path, source_format(uri, declared_format))

    def node_table(self, nt: str) -> str:
        """The DuckDB table ``(int_id, raw_id)`` of a node type. For a type numbered in memory it
        is created on first use (only the SQL paths need it: error reports, edge types that
        cannot stream), from the sorted ids."""
        name = sql_ident(f"nodes__{nt}")
        arrays = self.node_arrays.get(nt)
        if arrays is not None and nt not in self._node_tables_made:
            with self._node_table_lock:
                if nt not in self._node_tables_made:
                    ranks = np.arange(arrays.count, dtype=np.int64)
                    ids = pa.table({"int_id": self.ranges[nt].dense_of_rank(ranks),
                                    "raw_id": arrays.sorted_ids})
                    view = f"__ids_{nt}"
                    self.db.register(view, ids)
                    self.db.execute(f"CREATE TABLE {name} AS SELECT * FROM {sql_ident(view)}")
                    self.db.unregister(view)
                    self._node_tables_made.add(nt)
        return name

    def move_hive(self, hive_dir: str, dest_for: Callable[[int], str]) -> None:
        """Move DuckDB's ``part=<p>/*.parquet`` folders to the shard layout."""
        if not os.path.isdir(hive_dir):
            return
        for entry in os.listdir(hive_dir):
            part = int(entry.split("=", 1)[1])
            dest = os.path.join(self.out, dest_for(part))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.replace(os.path.join(hive_dir, entry), dest)

    def rows_per_partition(self, rel_dir_for: Callable[[int], str]) -> tuple[int, ...]:
        """Rows of the Parquet files in each partition's folder ``rel_dir_for(p)`` (0 when
        the folder is missing: a partition that got no rows)."""
        counts = []
        for p in range(self.P):
            d = os.path.join(self.out, rel_dir_for(p))
            files = sorted(os.listdir(d)) if os.path.isdir(d) else []
            counts.append(sum(pq.ParquetFile(os.path.join(d, f)).metadata.num_rows for f in files))
        return tuple(counts)


def log_rate(logger: logging.Logger, what: str, rows: int, t0: float) -> None:
    """Log one step's rows, seconds and rows/s (``t0``: its ``time.perf_counter()`` start)."""
    dt = max(time.perf_counter() - t0, 1e-9)
    logger.info("step=%r rows=%d seconds=%.2f rows_per_s=%.0f", what, rows, dt, rows / dt)
