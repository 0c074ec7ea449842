"""The manifest of a new shard set (step 5 of :mod:`graphstore.partition.engine`).

Written LAST into the version folder, after every shard file is complete: it lists every file
with its sha256, size and rows (readers verify them, graphstore.formats.shards.reader), the node and edge
types with their per-partition counts, and :func:`config_hash`. Publishing the version (the
``CURRENT`` switch) is graphstore.formats.shards.publish's job and happens after the manifest is on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from graphstore.io import uris
from graphstore.formats.shards.format import (
    MANIFEST,
    SCHEMA_VERSION,
    EdgeTypeInfo,
    FileEntry,
    Manifest,
    NodeTypeInfo,
)
from graphstore.formats.shards.publish import MARKER
from graphstore.formats.shards.reader import sha256_file

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.config import TaskConfig


def _file_entry(out: str, rel: str) -> FileEntry:
    path = os.path.join(out, rel)
    rows = None
    if rel.endswith(".parquet"):
        rows = pq.ParquetFile(path).metadata.num_rows
    elif rel.endswith(".npy"):
        rows = int(np.load(path, mmap_mode="r").shape[0])
    return FileEntry(sha256=sha256_file(path), bytes=os.path.getsize(path), rows=rows)


def file_entries(out: str) -> dict[str, FileEntry]:
    """Checksum every output file under ``out`` but the manifest and the marker; hashlib
    releases the GIL, so threads use every core."""
    rels = [r for r in uris.iter_files(out) if r not in (MANIFEST, MARKER)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(rels, pool.map(lambda r: _file_entry(out, r), rels)))


def config_hash(task: "TaskConfig", num_partitions: int) -> str:
    """sha256 over what determines the shard contents (graph, data sources, direction, P)."""
    d = task.to_dict()
    keyed = {k: d.get(k) for k in ("graphMetadata", "taskMetadata", "datasetConfig")}
    keyed["sample_edge_direction"] = task.trainer.storage.storage_args.sample_edge_direction
    keyed["num_partitions"] = num_partitions
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()


def write_manifest(out: str, task: "TaskConfig", *, num_partitions: int,
                   node_types: dict[str, NodeTypeInfo], edge_types: dict[str, EdgeTypeInfo],
                   stats: dict[str, float]) -> Manifest:
    """Checksum the finished files under ``out``, then write ``out/manifest.json``; call it
    only when every other file of the version is complete."""
    manifest = Manifest(
        schema_version=SCHEMA_VERSION, num_partitions=num_partitions,
        sample_edge_direction=task.trainer.storage.storage_args.sample_edge_direction,
        node_types=node_types, edge_types=edge_types, files=file_entries(out),
        config_hash=config_hash(task, num_partitions),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), stats=stats)
    with open(os.path.join(out, MANIFEST), "w") as fh:
        fh.write(manifest.to_json())
    return manifest
