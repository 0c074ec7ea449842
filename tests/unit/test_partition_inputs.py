"""Partition stage: how input paths are read and how unreadable input is reported.

Paths are literal (a folder named ``data*`` reads only itself), and a file that cannot be read
(corrupt pages, ragged CSV rows, a truncated gzip, an empty file, a value float32 cannot hold)
is one line naming the file and what is wrong with it; running out of memory is named as such.
Every case runs on both partition paths (in memory and DuckDB) where both can read the input.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from graphstore.shards.reader import ShardSet
from tests.unit.test_partition import (
    N_USERS,
    make_raw,
    raw_edges,
    run_partition,
    task_dict,
)
from tests.unit.test_partition import path  # noqa: F401  (fixture: both partition paths)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("folder,neighbour", [("data*", "data_old"), ("d[a]ta", "data"),
                                              ("dat?", "data")])
def test_glob_characters_in_a_data_path_are_literal(tmp_path, path, fmt, folder, neighbour):
    """A data folder whose name is a glob pattern reads its own files, never its neighbour's."""
    raw = make_raw(tmp_path / folder, fmt=fmt)
    make_raw(tmp_path / neighbour, fmt=fmt)  # other edges, the same node ids
    ext = "csv" if fmt == "csv" else "parquet"
    m = run_partition(tmp_path, task_dict(tmp_path / folder, ext=ext), tmp_path / "shards")
    shards = ShardSet.open(str(tmp_path / "shards"))
    assert m.node_types["user"].count == N_USERS
    assert m.edge_types["user__buys__item"].count == sum(raw["user__buys__item"].values())
    assert raw_edges(shards, "user__buys__item") == raw["user__buys__item"]
    assert raw_edges(shards, "item__similar_to__item") == raw["item__similar_to__item"]
