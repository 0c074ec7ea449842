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
    emu = start_bigquery(gcs.root, tmp_path_factory.mktemp("bq-emulator"))
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
