"""Export to BigQuery with the real google-cloud-bigquery client against bqemulator, the run folder
on the GCS emulator: load job from gs:// into staging, MERGE swap, history, idempotency, faults,
top-k neighbours. Embeddings are written with values chosen by the test (tests/unit/test_export)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest

from graphstore.io import uris
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export import export_run
from graphstore.export.bigquery_warehouse import BigQueryWarehouse, staging_name
from graphstore.export.rows import build_rows
from tests.embedding_runs import DIM, REPO, build_graph, make_run

pytestmark = [pytest.mark.emulator]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return build_graph(tmp_path_factory.mktemp("graph"))


def _task(graph, project: str, dataset: str):
    task = graph["task"]
    export = task.export.model_copy(update={"warehouse": "bigquery", "bigquery_project": project,
                                            "bigquery_dataset": dataset})
    return task.model_copy(update={"export": export})


def _gcs_run(graph, tmp_path, bucket: str, name: str, **kwargs) -> str:
    """``make_run``'s folder copied to ``gs://bucket/runs/<name>`` (shards included)."""
    local = make_run(graph, tmp_path, name, **kwargs)
    real = tmp_path / f"{name}-real"
    shutil.copytree(local, real, symlinks=False)
    uri = f"gs://{bucket}/runs/{name}"
    uris.upload_tree(str(real), uri)
    return uri


def _rows(wh: BigQueryWarehouse, table: str) -> list[tuple]:
    return [tuple(r.values()) for r in wh._query(
        f"SELECT node_id, node_type, embedding, model_version, run_id, created_at "
        f"FROM `{wh.ref(table)}` ORDER BY run_id, node_id")]


@pytest.fixture
def dataset() -> str:
    return f"emb_{uuid.uuid4().hex[:8]}"


def test_export_loads_from_gcs_swaps_keeps_history_and_is_idempotent(
        graph, tmp_path, bucket, bigquery_emulator, dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    run1 = _gcs_run(graph, tmp_path, bucket, "r1")
    done = export_run(task, run1)
    users, items = graph["raw"]["user"], graph["raw"]["item"]
    assert [(d.node_type, d.table, d.rows) for d in done] == [
        ("user", "embeddings_user", len(users)), ("item", "embeddings_item", len(items))]
    assert done[0].where == f"bigquery:{bigquery_emulator.project}.{dataset}"
    # joined in BigQuery from the files on gs://: no rows file was built, no staging is left
    assert not uris.exists(f"{run1}/export/user/rows.parquet")
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    rows = _rows(wh, "embeddings_user")
    assert sorted(r[0] for r in rows) == sorted(users)
    by_id = {r[0]: r for r in rows}
    for dense, raw in enumerate(users):  # node i's embedding is [i, i+1, i+2, i+3]
        assert by_id[raw][2] == pytest.approx(list(np.arange(DIM) + dense))
        assert by_id[raw][1:2] == ("user",) and by_id[raw][3:5] == ("v1", "r1")
    # the same run again: the very same rows, no duplicates, staging table gone
    export_run(task, run1)
    assert _rows(wh, "embeddings_user") == rows
    tables = {t.table_id for t in wh.client.list_tables(f"{wh.project}.{dataset}")}
    assert not {t for t in tables if t.startswith(staging_name("embeddings_user", "r1"))}
    assert {"embeddings_user", "embeddings_user_latest", "embeddings_item"} <= tables
    # a newer run: history kept, the view shows the newest run only
    run2 = _gcs_run(graph, tmp_path, bucket, "r2", scale=2.0, finished="2026-11-02T00:00:00+00:00")
    export_run(task, run2, node_types=["user"])
    assert [r[:2] for r in wh.runs("embeddings_user")] == [("r2", len(users)), ("r1", len(users))]
    latest = wh._query(f"SELECT DISTINCT run_id FROM `{wh.ref('embeddings_user_latest')}`")
    assert [r[0] for r in latest] == ["r2"]
    table = wh.client.get_table(wh.ref("embeddings_user"))
    assert table.time_partitioning.field == "created_at" and table.clustering_fields == ["run_id"]
    embedding = table.schema[2]  # the REST API says FLOAT for FLOAT64, the emulator FLOAT64
    assert (embedding.name, embedding.mode, embedding.field_type in ("FLOAT", "FLOAT64")) == (
        "embedding", "REPEATED", True)


def test_failure_between_staging_and_swap_leaves_the_table_as_it_was(
        graph, tmp_path, bucket, bigquery_emulator, dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    export_run(task, _gcs_run(graph, tmp_path, bucket, "r1"), node_types=["user"])
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    before = _rows(wh, "embeddings_user")
    run2 = _gcs_run(graph, tmp_path, bucket, "r2", scale=3.0, finished="2026-11-03T00:00:00+00:00")

    def crash(node_type: str) -> None:
        # staging is complete at this point: the failure is really between staging and swap
        staged = wh.client.get_table(wh.ref(staging_name("embeddings_user", "r2"))).num_rows
        raise RuntimeError(f"injected after staging {staged} rows of {node_type}")

    with pytest.raises(RuntimeError, match=f"injected after staging {len(graph['raw']['user'])}"):
        export_run(task, run2, node_types=["user"], before_swap=crash)
    assert _rows(wh, "embeddings_user") == before
    # a failed load can be rerun: the staging table left behind is replaced
    (done,) = export_run(task, run2, node_types=["user"])
    assert done.rows == len(graph["raw"]["user"])
    assert [r[0] for r in wh.runs("embeddings_user")] == ["r2", "r1"]
    # ids of another type in an existing table: refused before anything is loaded
    items = build_rows(f"gs://{bucket}/runs/r2", "item", run_id="r3", model_version="v1",
                       out_path=str(tmp_path / "items.parquet"))
    bad = dataclasses.replace(items, node_id_type="INT64")
    with pytest.raises(UsageError, match="node_id"):
        wh.load_run("embeddings_user", bad, "r3")
    assert [r[0] for r in wh.runs("embeddings_user")] == ["r2", "r1"]


def test_missing_or_incomplete_embeddings_load_nothing(graph, tmp_path, bucket, bigquery_emulator,
                                                       dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    run = _gcs_run(graph, tmp_path, bucket, "r1", drop=5)  # marker says n, files hold n - 5
    n = len(graph["raw"]["user"])
    with pytest.raises(RuntimeFailure, match=f"their files hold {n - 5} rows, .*_SUCCESS says "
                                             f"{n}; rerun the infer stage"):
        export_run(task, run, node_types=["user"])
    run2 = _gcs_run(graph, tmp_path, bucket, "r2")
    uris.remove_file(f"{run2}/embeddings/item/_SUCCESS")
    with pytest.raises(RuntimeFailure, match=r"no complete embeddings for node type 'item'"):
        export_run(task, run2, node_types=["item"])
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    assert list(wh.client.list_datasets()) == [] or dataset not in {
        d.dataset_id for d in wh.client.list_datasets()}


def test_neighbors_and_the_cli_read_bigquery(graph, tmp_path, bucket, bigquery_emulator, dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    export_run(task, _gcs_run(graph, tmp_path, bucket, "r1"))
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    users, items = graph["raw"]["user"], graph["raw"]["item"]
    emb = lambda i: np.arange(DIM) + i  # noqa: E731
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    q = 7
    got = wh.neighbors("embeddings_user", users[q], 3, among="embeddings_item", metric="cosine")
    want = sorted(((cos(emb(q), emb(i)), items[i]) for i in range(len(items))), reverse=True)[:3]
    assert [round(s, 6) for _, s in got] == [round(s, 6) for s, _ in want]
    assert wh.neighbors("embeddings_user", users[q], 3, among="embeddings_item", metric="cosine",
                        run_id="r1") == got
    assert wh.first_node_id("embeddings_user") == min(users) == wh.first_node_id("embeddings_user", "r1")
    with pytest.raises(UsageError, match="is not in"):
        wh.neighbors("embeddings_user", "no-such-node", 3)
    # the command, through the task config
    cfg = tmp_path / "task.yaml"
    import yaml

    raw = yaml.safe_load(open(task.source_path))
    raw["exportConfig"] = {"warehouse": "bigquery", "bigqueryProject": wh.project,
                           "bigqueryDataset": dataset}
    raw["datasetConfig"]["dataRootUri"] = str(graph["root"] / "data")
    cfg.write_text(yaml.safe_dump(raw))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "neighbors", "--task-config", str(cfg), "--node-type",
         "user", "--node-id", str(users[q]), "--among", "item", "--k", "3", "--metric", "cosine"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == [str(n) for n, _ in got]


def test_dot_product_neighbours(graph, tmp_path, bucket, bigquery_emulator, dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    export_run(task, _gcs_run(graph, tmp_path, bucket, "r1"), node_types=["user"])
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    users = graph["raw"]["user"]
    emb = lambda i: np.arange(DIM) + i  # noqa: E731
    got = wh.neighbors("embeddings_user", users[3], 2)
    want = sorted(((float(emb(3) @ emb(i)), users[i]) for i in range(len(users)) if i != 3),
                  reverse=True)[:2]
    assert [round(s, 3) for _, s in got] == [round(s, 3) for s, _ in want]


def test_a_local_run_folder_loads_through_a_file_upload(graph, tmp_path, bigquery_emulator, dataset):
    """No gs:// run folder: the load job's source is the local rows file (load_table_from_file)."""
    task = _task(graph, bigquery_emulator.project, dataset)
    (done,) = export_run(task, str(make_run(graph, tmp_path, "r1")), node_types=["user"])
    assert done.rows == len(graph["raw"]["user"])
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    assert sorted(r[0] for r in _rows(wh, "embeddings_user")) == sorted(graph["raw"]["user"])


def test_reloading_a_run_with_fewer_rows_leaves_exactly_those(graph, tmp_path, bigquery_emulator,
                                                               dataset):
    import pyarrow.parquet as pq

    run = make_run(graph, tmp_path, "r1")
    rows = build_rows(str(run), "user", run_id="r1", model_version="v1",
                      out_path=str(tmp_path / "rows.parquet"))
    other = build_rows(str(run), "user", run_id="r0", model_version="v1",
                       out_path=str(tmp_path / "rows0.parquet"))
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    wh.load_run("embeddings_user", other, "r0")
    wh.load_run("embeddings_user", rows, "r1")
    half = pq.read_table(rows.path).slice(0, rows.count // 2)
    pq.write_table(half, tmp_path / "half.parquet")
    smaller = dataclasses.replace(rows, path=str(tmp_path / "half.parquet"), count=half.num_rows)
    assert wh.load_run("embeddings_user", smaller, "r1") == half.num_rows
    got = _rows(wh, "embeddings_user")
    assert sorted(r[0] for r in got if r[4] == "r1") == sorted(half.column("node_id").to_pylist())
    assert len([r for r in got if r[4] == "r0"]) == other.count  # another run is untouched


def test_run_ids_that_differ_only_in_punctuation_get_their_own_staging_tables(
        graph, tmp_path, bigquery_emulator, dataset):
    """``a-b`` and ``a_b`` make the same table-name characters; an export of one running while
    the other's rows sit in staging must not load, or delete, the other's staging table."""
    assert staging_name("embeddings_user", "a-b") != staging_name("embeddings_user", "a_b")
    task = _task(graph, bigquery_emulator.project, dataset)
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    other = make_run(graph, tmp_path, "a_b", scale=2.0, finished="2026-11-02T00:00:00+00:00")

    def export_other_between_staging_and_swap(node_type: str) -> None:
        export_run(task, str(other), node_types=[node_type])

    export_run(task, str(make_run(graph, tmp_path, "a-b")), node_types=["user"],
               before_swap=export_other_between_staging_and_swap)
    users = graph["raw"]["user"]
    assert sorted(r[:2] for r in wh.runs("embeddings_user")) == [("a-b", len(users)),
                                                                  ("a_b", len(users))]
    for run_id, scale in (("a-b", 1.0), ("a_b", 2.0)):
        got = {r[0]: r[1] for r in wh._query(
            f"SELECT node_id, embedding FROM `{wh.ref('embeddings_user')}` WHERE run_id = @run_id",
            {"run_id": run_id})}
        for dense in (0, 5):  # node i's embedding is scale * [i, i+1, i+2, i+3]
            assert got[users[dense]] == pytest.approx(list(scale * (np.arange(DIM) + dense)))
    tables = {t.table_id for t in wh.client.list_tables(f"{wh.project}.{dataset}")}
    assert not any("__staging_" in t for t in tables)


def test_a_node_id_that_is_not_an_integer_is_a_usage_error_for_int64_ids(
        graph, tmp_path, bigquery_emulator, dataset):
    task = _task(graph, bigquery_emulator.project, dataset)
    export_run(task, str(make_run(graph, tmp_path, "r1")), node_types=["item"])
    wh = BigQueryWarehouse(bigquery_emulator.project, dataset)
    for bad in ("abc", ""):
        with pytest.raises(UsageError, match=r"--node-id .*: node ids of .*embeddings_item are "
                                             r"integers"):
            wh.neighbors("embeddings_item", bad, 3)
