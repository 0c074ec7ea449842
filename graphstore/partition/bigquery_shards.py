"""Shard files written by BigQuery: ``EXPORT DATA`` of each folder of the shard format straight
into the new version's folder on gs://, and the manifest's file entries read from GCS's listing.

One export statement per folder (:class:`Export`): a node type's id map, and per partition that
holds rows of it, a node type's node files, an edge type's edge files, a supervision or
hard-negative type's label files. BigQuery names the files ``part-<12 digits>.parquet`` (the
wildcard of the uri; about 1 GB each) and always writes at least one, so a folder whose partition
holds no rows is never exported (the format: no folder). The scratch tables are filtered by
``part``, the partition column each of them has and is range-partitioned on, so an export
reads (and bills) its own partition's rows only. Exports run :data:`PARALLEL_EXPORTS` at a time
(each one is a BigQuery job; the slots are BigQuery's).

File entries (:func:`file_entries`): size and crc32c from one listing of the version folder,
rows from each Parquet file's footer (two ranged reads of its last bytes): no shard file is read
back whole, whatever the graph's size.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from graphstore.formats.shards.format import MANIFEST, FileEntry
from graphstore.formats.shards.publish import MARKER
from graphstore.io import uris
from graphstore.partition.bigquery_jobs import BigQueryJobs
from graphstore.runtime.errors import RuntimeFailure

log = logging.getLogger(__name__)
PARALLEL_EXPORTS = 8
"""Export jobs in flight at once."""
FILE_PATTERN = "part-*.parquet"


@dataclass(frozen=True)
class Export:
    """One folder of the shard set (``rel_dir``, relative to the version folder) and the query
    of its rows, in the format's columns."""

    rel_dir: str
    select: str
    purpose: str


def export_sql(version_uri: str, export: Export) -> str:
    """The ``EXPORT DATA`` statement that writes ``export`` under ``version_uri``."""
    uri = uris.join(version_uri, export.rel_dir, FILE_PATTERN)
    if "'" in uri or "\\" in uri:
        raise RuntimeFailure(f"{uri}: a shard uri with a quote or backslash cannot be exported")
    return (f"EXPORT DATA OPTIONS (uri = '{uri}', format = 'PARQUET', overwrite = true) AS "
            f"{export.select}")


def run_exports(jobs: BigQueryJobs, version_uri: str, exports: list[Export]) -> None:
    """Run every export (module docs); the first failure is raised once the others finished."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=PARALLEL_EXPORTS) as pool:
        futures = [pool.submit(jobs.run, e.purpose, export_sql(version_uri, e)) for e in exports]
        for future in futures:
            future.result()
    log.info("exported %d shard folders with BigQuery in %.1f s", len(exports),
             time.perf_counter() - t0)


def file_entries(version_uri: str) -> dict[str, FileEntry]:
    """The manifest's entry of every object under ``version_uri`` but the marker and the
    manifest (module docs)."""
    listed = {rel: info for rel, info in uris.list_objects(version_uri).items()
              if rel not in (MARKER, MANIFEST)}
    with ThreadPoolExecutor(max_workers=PARALLEL_EXPORTS) as pool:
        rows = dict(zip(listed, pool.map(
            lambda rel: uris.parquet_rows(uris.join(version_uri, rel), listed[rel].bytes)
            if rel.endswith(".parquet") else None, listed)))
    return {rel: FileEntry(bytes=info.bytes, rows=rows[rel], crc32c=info.crc32c)
            for rel, info in listed.items()}
