"""Fixtures that start the GCS and BigQuery emulators (tests/emulators.py) once per session and
point the Google clients at them through the environment variables graphstore.runtime.env reads."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphstore.runtime.env import BIGQUERY_EMULATOR_HOST, STORAGE_EMULATOR_HOST
from tests.emulators import BQ_PROJECT, start_bigquery, start_gcs

EXPORT_FILE_BYTES = 2 << 10
"""bqemulator's per-file size of an ``EXPORT DATA`` (BigQuery's is about 1 GB): small, so that
the tests' small tables are exported as several files, as big ones are in BigQuery."""


@dataclass(frozen=True)
class Gcs:
    url: str
    root: Path  # objects are files under root/<bucket>/<key>


@dataclass(frozen=True)
class BigQuery:
    url: str
    project: str


def _set_env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    return lambda: os.environ.pop(name, None) if old is None else os.environ.__setitem__(name, old)


@pytest.fixture(scope="session")
def gcs(tmp_path_factory) -> Gcs:
    base = tmp_path_factory.mktemp("gcs-emulator")
    emu = start_gcs(base / "objects", base)
    restore = _set_env(STORAGE_EMULATOR_HOST, emu.url)
    try:
        yield Gcs(url=emu.url, root=base / "objects")
    finally:
        restore()
        emu.stop()


@pytest.fixture(scope="session")
def bigquery_emulator(gcs: Gcs, tmp_path_factory) -> BigQuery:
    emu = start_bigquery(gcs.root, tmp_path_factory.mktemp("bq-emulator"), gcs_url=gcs.url,
                         export_file_bytes=EXPORT_FILE_BYTES)
    restore = _set_env(BIGQUERY_EMULATOR_HOST, emu.url)
    try:
        yield BigQuery(url=emu.url, project=BQ_PROJECT)
    finally:
        restore()
        emu.stop()


@pytest.fixture
def bucket(gcs: Gcs) -> str:
    """A new empty bucket; its name."""
    from graphstore.io.gcp import storage_client

    name = f"b-{uuid.uuid4().hex[:12]}"
    storage_client().create_bucket(name)
    return name


@pytest.fixture
def bq_tables(bigquery_emulator):
    """A new BigQuery dataset for a test's raw tables: ``make(name, {column: type}, rows)``
    creates one table (a type ``ARRAY<T>`` makes a repeated column) and returns its ``bq://``
    uri; ``make.parquet(name, path)`` loads a Parquet file's columns and rows."""
    return RawTables(bigquery_emulator.project, f"raw_{uuid.uuid4().hex[:8]}")


class RawTables:
    """Raw tables of one dataset of the BigQuery emulator (fixture ``bq_tables``)."""

    _OF_ARROW = {"string": "STRING", "int64": "INT64", "float": "FLOAT64", "double": "FLOAT64"}

    def __init__(self, project: str, dataset: str) -> None:
        from graphstore.io.gcp import bigquery_client

        self.project, self.dataset = project, dataset
        self.client = bigquery_client(project)
        self.client.create_dataset(f"{project}.{dataset}")

    def __call__(self, name: str, columns: dict[str, str], rows: list[dict]) -> str:
        from google.cloud import bigquery

        ref = f"{self.project}.{self.dataset}.{name}"
        schema = [bigquery.SchemaField(c, t[6:-1], mode="REPEATED") if t.startswith("ARRAY<")
                  else bigquery.SchemaField(c, t) for c, t in columns.items()]
        self.client.create_table(bigquery.Table(ref, schema=schema))
        for start in range(0, len(rows), 5000):
            errors = self.client.insert_rows_json(ref, rows[start:start + 5000])
            assert not errors, errors[:3]
        return f"bq://{ref}"

    def parquet(self, name: str, path: Path, columns: list[str] | None = None) -> str:
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=columns)
        kinds = {}
        for field in table.schema:
            t = str(field.type)
            if t.startswith("list<"):
                kinds[field.name] = f"ARRAY<{self._OF_ARROW[str(field.type.value_type)]}>"
            else:
                kinds[field.name] = self._OF_ARROW[t]
        return self(name, kinds, table.to_pylist())
