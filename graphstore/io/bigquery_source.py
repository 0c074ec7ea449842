"""Raw tables read from BigQuery: ``bq://project.dataset.table`` source URIs.

The partition stage copies each such table into a local Parquet file before it reads it like any
other source (graphstore.partition.engine). Rows are paged through the official client
(``list_rows``, only the columns the config uses) and written page by page, so memory stays at
one page however large the table; the client uses the BigQuery Storage API when it is installed
and plain REST pages otherwise. The copy is a snapshot of the table when it was read.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Sequence

from graphstore.runtime.errors import InputDataError

log = logging.getLogger(__name__)
SCHEME = "bq://"
TABLE_PATTERN = re.compile(r"^bq://([a-z][a-z0-9-]{4,28}[a-z0-9])\.([A-Za-z_][A-Za-z0-9_]{0,1023})\."
                    r"([A-Za-z_][A-Za-z0-9_$-]{0,1023})$")


def is_bigquery(uri: str) -> bool:
    return uri.startswith(SCHEME)


def parse(uri: str) -> tuple[str, str, str]:
    """``bq://project.dataset.table`` -> ``(project, dataset, table)``; InputDataError otherwise."""
    m = TABLE_PATTERN.match(uri)
    if not m:
        raise InputDataError(f"{uri!r} is not a BigQuery table URI: use bq://project.dataset.table")
    return m.group(1), m.group(2), m.group(3)


def to_parquet(uri: str, columns: Sequence[str], dest: str) -> str:
    """Copy ``columns`` of the table at ``uri`` into the Parquet file ``dest``; returns ``dest``.
    A missing table or column is an InputDataError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from google.api_core import exceptions as gexc

    from graphstore.io.gcp import bigquery_client

    project, dataset, table = parse(uri)
    client = bigquery_client(project)
    t0 = time.perf_counter()
    try:
        meta = client.get_table(f"{project}.{dataset}.{table}")
    except gexc.NotFound:
        raise InputDataError(f"BigQuery table {uri} not found") from None
    have = [f.name for f in meta.schema]
    missing = [c for c in columns if c not in have]
    if missing:
        raise InputDataError(f"BigQuery table {uri} has no column(s) {missing}; it has {have}")
    fields = [f for f in meta.schema if f.name in columns]
    rows = client.list_rows(meta, selected_fields=fields, page_size=100_000)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp, writer, count = dest + ".tmp", None, 0
    try:
        for batch in rows.to_arrow_iterable(bqstorage_client=None):
            part = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
            if writer is None:
                writer = pq.ParquetWriter(tmp, part.schema)
            writer.write_table(part.cast(writer.schema))
            count += part.num_rows
        if writer is None:  # an empty table: still a file with the typed columns
            pq.write_table(client.list_rows(meta, selected_fields=fields, max_results=0).to_arrow(),
                           tmp)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, dest)
    log.info("read %d rows of %s (%s) in %.1f s", count, uri, ", ".join(columns),
             time.perf_counter() - t0)
    return dest
