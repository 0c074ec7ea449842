"""The local warehouse with other processes and bad paths: exports and readers at the same time
(a bounded wait, never a damaged file), a folder or file that cannot be a warehouse, node ids typed
by a user, and the exit codes of ``components.export`` and ``pipeline neighbors``.

Other processes are real (a DuckDB connection held by a child process, concurrent commands), and
so are the files; every child's exit code is checked and every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import duckdb
import pytest

from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export import export_run, local_warehouse
from graphstore.export.local_warehouse import LocalWarehouse
from tests.embedding_runs import REPO, build_graph, make_run

@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("graph"))


def test_a_path_that_cannot_hold_a_warehouse_is_named_and_left_alone(graph, tmp_path):
    task = graph["task"]
    run = make_run(graph, tmp_path, "r1")
    folder = tmp_path / "warehouse"
    folder.write_text("my notes")  # `warehouse` is a regular file
    with pytest.raises(UsageError, match=rf"{folder} is a file, not a folder"):
        export_run(task, str(run), node_types=["user"])
    with pytest.raises(UsageError, match=rf"{folder} is a file, not a folder"):
        LocalWarehouse(str(folder)).neighbors("embeddings_user", "x", 3)
    assert folder.read_text() == "my notes"
    folder.unlink()
    folder.mkdir()
    garbage = b"not a database\n" * 1000
    (folder / "warehouse.duckdb").write_bytes(garbage)
    for call in (lambda: export_run(task, str(run), node_types=["user"]),
                 lambda: LocalWarehouse(str(folder)).neighbors("embeddings_user", "x", 3)):
        with pytest.raises(UsageError, match=rf"{folder / 'warehouse.duckdb'} cannot be opened as "
                                             r"the local warehouse \(it is not a DuckDB database"):
            call()
    assert (folder / "warehouse.duckdb").read_bytes() == garbage


def test_node_ids_typed_by_a_user_must_fit_the_tables_id_type(graph, tmp_path):
    export_run(graph["task"], str(make_run(graph, tmp_path, "r1")))
    wh = LocalWarehouse(str(tmp_path / "warehouse"))
    items = graph["raw"]["item"]  # INT64 ids
    assert len(wh.neighbors("embeddings_item", str(items[2]), 2)) == 2
    for bad in ("abc", "", "1.5", str(1 << 63)):
        with pytest.raises(UsageError, match=r"--node-id .*: node ids of embeddings_item are "
                                             r"(64-bit )?integers"):
            wh.neighbors("embeddings_item", bad, 2)
