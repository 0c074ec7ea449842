"""Warehouse rows of one node type: embeddings joined back to raw ids, in the table's schema.

Input: ``<run-dir>/embeddings/<node_type>/`` (the inferencer's Parquet shards and ``_SUCCESS``
marker; graphstore.inference.inferencer) and the shard set (``<run-dir>/shards``, graphstore.formats.run_paths)'s
id map of ``node_type`` (one or more Parquet files, ``Manifest.id_map_files``). Output: one Parquet file with the warehouse schema
(docs/architecture.md), the only thing a warehouse loads::

    node_id        the raw id, STRING or INT64 as the input had it
    node_type      STRING
    embedding      LIST<DOUBLE>  (BigQuery: ARRAY<FLOAT64>, REPEATED FLOAT)
    model_version  STRING        (exportConfig.modelVersion)
    run_id         STRING
    created_at     TIMESTAMP UTC (when the embeddings were made: the marker's ``finished_at``,
                                  so exporting the same run again yields the very same rows)

Rows are ordered by the dense id (so exporting the same run again writes the same file). The
join reads the id map from its Parquet files inside DuckDB, streamed, within
:data:`JOIN_MEMORY_MB` (spilling to the temporary folder beyond it): no whole id map is held in
this process's memory, whatever the node type's size. A missing marker, a listed shard that is
missing, or a row count that differs from the marker's fails before anything is written.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from dataclasses import dataclass

from graphstore.io import uris
from graphstore.runtime.errors import RuntimeFailure
from graphstore.formats.run_paths import RunPaths

TABLE_COLUMNS = ("node_id", "node_type", "embedding", "model_version", "run_id", "created_at")
JOIN_MEMORY_MB = 1024
"""DuckDB's memory limit for the embeddings / id map join (it spills to disk beyond it)."""


@dataclass(frozen=True)
class Rows:
    """A built rows file and what the warehouse needs to check it."""

    path: str  # local Parquet file
    node_type: str
    count: int
    dim: int
    node_id_type: str  # "STRING" or "INT64"
    created_at: datetime.datetime


@dataclass(frozen=True)
class JoinedRun:
    """The inputs of the join for a warehouse that joins by itself
    (graphstore.export.bigquery_warehouse ``load_run_joined``): a node type's embeddings files
    and its id map files (gs:// uris), the marker's ``count`` and ``created_at``, the raw ids'
    type (``STRING`` or ``INT64``) and ``model_version``."""

    node_type: str
    embeddings_uris: tuple[str, ...]
    id_map_uris: tuple[str, ...]
    node_id_type: str
    count: int
    model_version: str
    created_at: datetime.datetime


def _listed_files(run_dir: str, node_type: str):
    """``(marker, folder, uris)``: the ``_SUCCESS`` marker of ``node_type``'s embeddings, their
    folder and the uri of every file it lists; RuntimeFailure naming a listed file that is
    missing."""
    from graphstore.formats.embeddings import SUCCESS, embeddings_uri, read_success

    marker = read_success(run_dir, node_type)
    folder = embeddings_uri(run_dir, node_type)
    files = []
    for name in marker.files:
        uri = uris.join(folder, name)
        if not uris.exists(uri):
            raise RuntimeFailure(f"{uri} is listed in {uris.join(folder, SUCCESS)} but missing; "
                                 "rerun the infer stage")
        files.append(uri)
    return marker, folder, files


def joined_run(run_dir: str, node_type: str, *, model_version: str, workdir: str) -> JoinedRun:
    """The :class:`JoinedRun` of ``node_type`` in the gs:// ``run_dir``: its marker checked,
    every file it lists present and their rows (from the Parquet footers) the marker's count;
    the shard set's manifest (downloaded into ``workdir``) names the id map files. Nothing else
    is read."""
    from graphstore.formats.embeddings import SUCCESS
    from graphstore.formats.shards.reader import ShardSet

    marker, folder, files = _listed_files(run_dir, node_type)
    rows = sum(uris.parquet_rows(uri) for uri in files)
    if rows != marker.count:
        raise RuntimeFailure(f"embeddings of {node_type!r}: their files hold {rows} rows, "
                             f"{uris.join(folder, SUCCESS)} says {marker.count}; rerun the infer "
                             "stage")
    shards = ShardSet.open(RunPaths(run_dir).shards, workdir=workdir)
    info = shards.manifest.node_types[node_type]
    return JoinedRun(node_type=node_type, embeddings_uris=tuple(files),
                     id_map_uris=tuple(uris.join(shards.source_uri, rel)
                                       for rel in shards.manifest.id_map_files(node_type)),
                     node_id_type="STRING" if info.id_dtype == "string" else "INT64",
                     count=marker.count, model_version=model_version,
                     created_at=marker.finished_at)


def build_rows(run_dir: str, node_type: str, *, run_id: str, model_version: str,
               out_path: str) -> Rows:
    """Write the rows of ``node_type`` to the local Parquet file ``out_path`` (see module docs)."""
    import duckdb
    import pyarrow.parquet as pq

    from graphstore.formats.shards.reader import ShardSet

    marker, _, listed = _listed_files(run_dir, node_type)
    created = marker.finished_at
    with tempfile.TemporaryDirectory(prefix="export-") as tmp:
        files = [uris.localize(uri, tmp) for uri in listed]
        id_map = ShardSet.open(RunPaths(run_dir).shards, workdir=tmp).id_map_files(node_type)
        con = duckdb.connect(config={"memory_limit": f"{JOIN_MEMORY_MB}MB",
                                     "temp_directory": os.path.join(tmp, "spill")})
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        tmp_out = out_path + ".tmp"
        con.execute(
            "COPY (SELECT m.raw_id AS node_id, ?::VARCHAR AS node_type, "
            "CAST(e.embedding AS DOUBLE[]) AS embedding, ?::VARCHAR AS model_version, "
            "?::VARCHAR AS run_id, ?::TIMESTAMPTZ AS created_at "
            "FROM read_parquet(?) e JOIN read_parquet(?) m ON m.int_id = e.int_id "
            "ORDER BY e.int_id) TO '" + tmp_out.replace("'", "''") + "' (FORMAT PARQUET)",
            [node_type, model_version, run_id, created, files, id_map])
        con.close()
    count = pq.ParquetFile(tmp_out).metadata.num_rows
    if count != marker.count:
        os.remove(tmp_out)
        raise RuntimeFailure(f"embeddings of {node_type!r}: {count} rows join the id map, the marker "
                             f"says {marker.count}; the embeddings and shards are from different "
                             "runs? (rerun infer)")
    os.replace(tmp_out, out_path)
    raw_type = pq.read_schema(out_path).field("node_id").type
    return Rows(path=out_path, node_type=node_type, count=count, dim=marker.dim,
                node_id_type="STRING" if str(raw_type) in ("string", "large_string") else "INT64",
                created_at=created)
