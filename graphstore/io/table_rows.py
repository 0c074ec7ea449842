"""Row counts of raw input tables, read as cheaply as each kind allows (torch-free).

- Parquet, local: the footer (no data pages read).
- Parquet, ``gs://``: the footer only, through ranged reads of the object (two small requests).
- CSV: every row is parsed (streamed); a ``gs://`` CSV is downloaded into a temporary folder first.
- ``bq://`` tables: the table's metadata (``numRows``), no query.

A missing or unreadable table is an InputDataError naming it.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Iterator

from graphstore.io import uris
from graphstore.io.bigquery_source import is_bigquery
from graphstore.runtime.errors import InputDataError, RuntimeFailure


class _GcsObject(io.RawIOBase):
    """A read-only, seekable view of one GCS object; each read is one ranged download."""

    def __init__(self, uri: str) -> None:
        from graphstore.io.gcp import storage_client

        bucket, key = uris.split_gcs(uri)
        self.uri = uri
        self.blob = storage_client().bucket(bucket).get_blob(key)
        if self.blob is None:
            raise InputDataError(f"{uri}: object not found")
        self.size = int(self.blob.size or 0)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = self.blob.download_as_bytes(start=self.pos, end=end - 1)
        self.pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


@contextlib.contextmanager
def _cloud_errors(uri: str) -> Iterator[None]:
    """Google client errors as ours: no credentials or access, or another API failure, is a
    RuntimeFailure naming ``uri``; a missing object an InputDataError."""
    if not (uris.is_gcs(uri) or is_bigquery(uri)):
        yield
        return
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    try:
        yield
    except gexc.NotFound:
        raise InputDataError(f"{uri}: not found") from None
    except auth_exc.GoogleAuthError as exc:
        raise RuntimeFailure(f"reading the size of {uri}: no usable Google Cloud credentials "
                             f"({str(exc).split('.')[0]})") from None
    except gexc.GoogleAPIError as exc:
        raise RuntimeFailure(f"reading the size of {uri} failed: {exc}") from None


def count_rows(uri: str, fmt: str) -> int:
    """Rows of the table at ``uri`` (a local path, ``gs://`` object or ``bq://`` table) stored as
    ``fmt`` (``parquet``, ``csv`` or ``bigquery``)."""
    with _cloud_errors(uri):
        return _count_rows(uri, fmt)


def _count_rows(uri: str, fmt: str) -> int:
    if fmt == "bigquery":
        return _bigquery_rows(uri)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            if uris.is_gcs(uri):
                with _GcsObject(uri) as obj:
                    return pq.ParquetFile(obj).metadata.num_rows
            if not os.path.isfile(uri):
                raise InputDataError(f"input file not found: {uri}")
            return pq.ParquetFile(uri).metadata.num_rows
        except (OSError, ValueError) as exc:
            raise InputDataError(f"{uri}: cannot read its Parquet footer ({exc})") from None
    import pyarrow.csv as pacsv

    with tempfile.TemporaryDirectory(prefix="rows-") as tmp:
        path = uris.localize(uri, tmp)
        try:
            return sum(batch.num_rows for batch in pacsv.open_csv(path))
        except (OSError, ValueError) as exc:
            raise InputDataError(f"{uri}: cannot read it as CSV ({exc})") from None


def _bigquery_rows(uri: str) -> int:
    from google.api_core import exceptions as gexc

    from graphstore.io.bigquery_source import parse
    from graphstore.io.gcp import bigquery_client

    project, dataset, table = parse(uri)
    try:
        return int(bigquery_client(project).get_table(f"{project}.{dataset}.{table}").num_rows or 0)
    except gexc.NotFound:
        raise InputDataError(f"BigQuery table {uri} not found") from None
