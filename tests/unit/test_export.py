"""Export to the local warehouse: raw-id join, atomic replace, history, idempotency, faults, top-k.

Embeddings are written here in the inferencer's documented format (graphstore.inference.inferencer), with
values chosen by the test, so every expectation comes from the inputs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export import export_run
from graphstore.export.local_warehouse import LocalWarehouse
from graphstore.export.names import table_name
from graphstore.formats.run_ids import RunId
from tests.embedding_runs import DIM, REPO, build_graph, make_run


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("graph"))


def _table(path: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_export_joins_raw_ids_and_replaces_a_run_atomically(graph, tmp_path):
    task = graph["task"]
    run = make_run(graph, tmp_path, "r1")
    done = export_run(task, str(run))
    wh = tmp_path / "warehouse" / "warehouse.duckdb"
    assert [(d.node_type, d.table, d.rows) for d in done] == [
        ("user", "embeddings_user", len(graph["raw"]["user"])),
        ("item", "embeddings_item", len(graph["raw"]["item"]))]
    for nt in ("user", "item"):
        rows = _table(wh, f"SELECT node_id, node_type, embedding, model_version, run_id FROM embeddings_{nt}")
        by_id = {r[0]: r for r in rows}
        assert len(rows) == len(by_id) == len(graph["raw"][nt])
        for int_id, raw in enumerate(graph["raw"][nt]):  # dense id i <-> i-th raw id
            assert by_id[raw][1:] == (nt, [float(int_id + j) for j in range(DIM)], "v1", "r1")
    # raw id types survive: users are strings, items integers
    assert isinstance(_table(wh, "SELECT node_id FROM embeddings_user LIMIT 1")[0][0], str)
    assert isinstance(_table(wh, "SELECT node_id FROM embeddings_item LIMIT 1")[0][0], int)
    before = _table(wh, "SELECT * FROM embeddings_user ORDER BY node_id")
    export_run(task, str(run))  # same run again: the very same rows, no duplicates
    assert _table(wh, "SELECT * FROM embeddings_user ORDER BY node_id") == before


def test_history_is_kept_and_latest_shows_the_newest_run(graph, tmp_path):
    task = graph["task"]
    export_run(task, str(make_run(graph, tmp_path, "r1")))
    export_run(task, str(make_run(graph, tmp_path, "r2", scale=2.0,
                                  finished="2026-11-02T10:00:00+00:00")), node_types=["user"])
    wh = tmp_path / "warehouse" / "warehouse.duckdb"
    n = len(graph["raw"]["user"])
    assert _table(wh, "SELECT run_id, count(*) FROM embeddings_user GROUP BY run_id ORDER BY 1") == [
        ("r1", n), ("r2", n)]
    assert _table(wh, "SELECT DISTINCT run_id FROM embeddings_user_latest") == [("r2",)]
    assert LocalWarehouse(str(tmp_path / "warehouse")).runs("embeddings_user")[0][:2] == ("r2", n)
    assert _table(wh, "SELECT DISTINCT run_id FROM embeddings_item_latest") == [("r1",)]


def test_failure_between_staging_and_swap_leaves_the_table_as_it_was(graph, tmp_path):
    task = graph["task"]
    export_run(task, str(make_run(graph, tmp_path, "r1")))
    wh_dir = tmp_path / "warehouse"
    before = _table(wh_dir / "warehouse.duckdb", "SELECT * FROM embeddings_user ORDER BY run_id, node_id")
    run2 = make_run(graph, tmp_path, "r2", scale=3.0, finished="2026-11-03T00:00:00+00:00")
    from graphstore.export.rows import build_rows

    rows = build_rows(str(run2), "user", run_id="r2", model_version="v1",
                      out_path=str(tmp_path / "rows.parquet"))

    def crash() -> None:
        raise RuntimeError("injected")

    wh = LocalWarehouse(str(wh_dir))
    with pytest.raises(RuntimeError, match="injected"):
        wh.load_run("embeddings_user", rows, "r2", before_swap=crash)
    assert _table(wh_dir / "warehouse.duckdb",
                  "SELECT * FROM embeddings_user ORDER BY run_id, node_id") == before
    # and a failure inside the swap (ids of another type) rolls back too
    bad = build_rows(str(run2), "item", run_id="r2", model_version="v1",
                     out_path=str(tmp_path / "items.parquet"))
    with pytest.raises(UsageError, match="node_id"):
        wh.load_run("embeddings_user", bad, "r2")
    assert _table(wh_dir / "warehouse.duckdb",
                  "SELECT * FROM embeddings_user ORDER BY run_id, node_id") == before
    assert wh.load_run("embeddings_user", rows, "r2") == len(graph["raw"]["user"])  # a rerun works


def test_missing_or_incomplete_embeddings_load_nothing(graph, tmp_path):
    task = graph["task"]
    run = make_run(graph, tmp_path, "r1", drop=5)  # marker says n, files hold n - 5
    with pytest.raises(RuntimeFailure, match="rows join the id map, the marker says"):
        export_run(task, str(run), node_types=["user"])
    run2 = make_run(graph, tmp_path, "r2")
    (run2 / "embeddings" / "item" / "_SUCCESS").unlink()
    with pytest.raises(RuntimeFailure, match=r"no complete embeddings for node type 'item'"):
        export_run(task, str(run2), node_types=["item"])
    run3 = make_run(graph, tmp_path, "r3")
    (run3 / "embeddings" / "user" / "part-00001-of-00002.parquet").unlink()
    with pytest.raises(RuntimeFailure, match="listed in .* but missing"):
        export_run(task, str(run3), node_types=["user"])
    assert not (tmp_path / "warehouse" / "warehouse.duckdb").exists()


def test_top_k_neighbours_match_a_direct_computation(graph, tmp_path):
    export_run(graph["task"], str(make_run(graph, tmp_path, "r1")))
    wh = LocalWarehouse(str(tmp_path / "warehouse"))
    users, items = graph["raw"]["user"], graph["raw"]["item"]
    q = 7  # user with dense id 7: embedding [7, 8, 9, 10]
    emb = lambda i: np.arange(DIM) + i  # noqa: E731
    got = wh.neighbors("embeddings_user", users[q], 3, among="embeddings_item")
    scores = sorted(((float(emb(q) @ emb(i)), items[i]) for i in range(len(items))), reverse=True)[:3]
    assert [r[0] for r in got] == [s[1] for s in scores]
    assert [round(r[1], 3) for r in got] == [round(s[0], 3) for s in scores]
    own = wh.neighbors("embeddings_user", users[q], 2, metric="cosine")
    assert users[q] not in [r[0] for r in own] and len(own) == 2
    with pytest.raises(UsageError, match="is not in embeddings_user"):
        wh.neighbors("embeddings_user", "nobody", 3)
    with pytest.raises(UsageError, match="not a valid table name"):
        wh.neighbors("embeddings_user; DROP TABLE x", users[q], 3)


def test_names_are_checked():
    assert table_name("embeddings_", "user") == "embeddings_user"
    with pytest.raises(UsageError, match="not a valid table name"):
        table_name("e-", "user")
    assert RunId.parse("2026-11-29T03.00_r1") == "2026-11-29T03.00_r1"
    with pytest.raises(UsageError, match="run id"):
        RunId.parse("x'; DROP")


def test_the_join_never_holds_a_whole_id_map_in_this_process(graph, tmp_path, monkeypatch):
    """Rows join the id map inside DuckDB, read from its Parquet file (streamed, within a memory
    limit, spilling beyond it): reading an id map whole into Arrow here fails the test."""
    import pyarrow.parquet as pq

    from graphstore.export.rows import build_rows
    from graphstore.formats.shards.reader import ShardSet

    real = pq.read_table

    def guarded(source, *args, **kwargs):
        if "id_map" in str(source):
            raise AssertionError(f"an id map was read whole: {source}")
        return real(source, *args, **kwargs)

    run = make_run(graph, tmp_path, "r1")
    monkeypatch.setattr(pq, "read_table", guarded)
    monkeypatch.setattr(ShardSet, "id_map", lambda *a, **k: pytest.fail("ShardSet.id_map called"))
    rows = build_rows(str(run), "user", run_id="r1", model_version="v1",
                      out_path=str(tmp_path / "rows.parquet"))
    monkeypatch.undo()
    table = pq.read_table(rows.path)
    assert rows.count == len(graph["raw"]["user"]) == table.num_rows
    got = dict(zip(table.column("node_id").to_pylist(), table.column("embedding").to_pylist()))
    for i, raw in enumerate(graph["raw"]["user"]):  # node i's embedding is [i, i+1, i+2, i+3]
        assert got[raw] == [float(i + k) for k in range(DIM)]
