"""The BigQuery partition engine (graphstore.partition.bigquery_engine) against the BigQuery and
GCS emulators: the same tables partitioned by it and by the local engine give the same shard set
(ids, id maps, edges per partition as multisets, weights, features, labels, hard negatives,
dangling edges dropped), in both sampling directions; bad input is named like the local engine
names it, and nothing is published."""

from __future__ import annotations

import copy
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.formats.shards.publish import read_pointer
from graphstore.formats.shards.reader import ShardSet
from graphstore.partition import partition_graph
from graphstore.partition.bigquery_engine import ScratchPlace, partition_graph_bigquery
from graphstore.runtime.errors import InputDataError, UsageError
from tests.emulator.conftest import RawTables
from tests.unit.test_hard_negatives import with_dislikes
from tests.unit.test_partition import RESOURCES, make_raw, task_dict

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(600)]
P = 3


def _config(tmp: Path, task: dict):
    tp, rp = tmp / f"task-{uuid.uuid4().hex[:6]}.yaml", tmp / "resources.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(RESOURCES))
    return load_config_pair(str(tp), str(rp))[0]


def _in_bigquery(task: dict, raw: Path, tables: RawTables) -> dict:
    """``task`` with every source a BigQuery table loaded from its Parquet file."""
    out = copy.deepcopy(task)
    sources = out["datasetConfig"]["dataSources"]
    for kind in ("nodes", "edges"):
        for i, src in enumerate(sources[kind]):
            src["uri"] = tables.parquet(f"{kind}_{i}", raw / src["uri"])
    return out


def _scratch(bigquery_emulator) -> ScratchPlace:
    return ScratchPlace(bigquery_emulator.project, f"scratch_{uuid.uuid4().hex[:8]}")


def _rows(table: pa.Table | None, columns: list[str]) -> Counter:
    if table is None:
        return Counter()
    return Counter(zip(*(table.column(c).to_pylist() for c in columns)))


def assert_same_shards(local: ShardSet, other: ShardSet) -> int:
    """Every count, id map, node, edge (with its weight and features), label and hard negative
    of ``local`` is ``other``'s; edges and labels compared per partition as multisets (their
    order, hence edge ids, may differ). Returns the number of edge and label rows compared."""
    a, b = local.manifest, other.manifest
    assert (a.num_partitions, a.sample_edge_direction) == (b.num_partitions,
                                                           b.sample_edge_direction)
    assert a.node_types == b.node_types and a.edge_types == b.edge_types
    assert a.config_hash != "" and b.files and all(e.crc32c for e in b.files.values())
    for nt in a.node_types:
        assert local.id_map(nt).to_pylist() == other.id_map(nt).to_pylist(), nt
    compared = 0
    for p in range(a.num_partitions):
        x, y = local.load_partition(p), other.load_partition(p)
        for nt in a.node_types:
            assert np.array_equal(x.nodes[nt].ids, y.nodes[nt].ids)
            if a.node_types[nt].feature_dim:
                assert np.array_equal(x.nodes[nt].feats, y.nodes[nt].feats), (nt, p)
        for et, info in a.edge_types.items():
            def rows(shard):
                cols = [shard.src, shard.dst]
                if info.has_weight:
                    cols.append(shard.weight)
                if info.feature_dim:
                    cols.extend(shard.feats.T)
                return Counter(zip(*(c.tolist() for c in cols)))
            assert rows(x.edges[et]) == rows(y.edges[et]), (et, p)
            assert np.array_equal(np.sort(x.edges[et].eids), np.sort(y.edges[et].eids))
            compared += len(x.edges[et].src)
        for et in x.labels:
            want = Counter(zip(x.labels[et].src.tolist(), x.labels[et].dst.tolist()))
            assert want == Counter(zip(y.labels[et].src.tolist(),
                                       y.labels[et].dst.tolist())), (et, p)
            compared += len(x.labels[et].src)
    return compared


def _hetero_task(raw: Path, direction: str) -> dict:
    """The unit tests' small hetero graph (string user ids, int item ids, node features, edge
    weights, an item -> item type) with hard negatives and two dangling edges, dropped."""
    make_raw(raw)
    task = task_dict(raw, direction=direction)
    with_dislikes(task, raw)
    edges = pq.read_table(raw / "item_item.parquet")
    extra = pa.table({"src_item_id": pa.array([999_999, 1000], pa.int64()),
                      "dst_item_id": pa.array([1000, 888_888], pa.int64())})
    pq.write_table(pa.concat_tables([edges, extra]), raw / "item_item.parquet")
    task["datasetConfig"]["partitionConfig"] = {"danglingEdges": "drop"}
    return task


@pytest.mark.parametrize("direction", ["in", "out"])
def test_the_local_engine_s_shard_set_from_bigquery(direction, tmp_path, bq_tables, bucket,
                                                    bigquery_emulator):
    raw = tmp_path / "raw"
    task = _hetero_task(raw, direction)
    local = partition_graph(_config(tmp_path, task), num_partitions=P,
                            output_uri=str(tmp_path / "local"))
    assert local.edge_types["item__similar_to__item"].dropped_dangling == 2
    assert local.edge_types["user__dislikes__item"].negative_of == "user__buys__item"
    out = f"gs://{bucket}/shards"
    made = partition_graph_bigquery(_config(tmp_path, _in_bigquery(task, raw, bq_tables)),
                                    num_partitions=P, output_uri=out,
                                    scratch=_scratch(bigquery_emulator))
    with ShardSet.open(str(tmp_path / "local")) as a, ShardSet.open(out) as b:
        assert b.manifest == made
        assert assert_same_shards(a, b) > 600
        # folders of several files (the emulator's export file size is small for the purpose,
        # tests/emulator/conftest.py), as a big graph's are in BigQuery
        folders = Counter(rel.rsplit("/", 1)[0] for rel in b.manifest.files)
        assert max(folders.values()) >= 2 and len(b.manifest.id_map_files("user")) >= 1
        assert set(folders) == {rel.rsplit("/", 1)[0] for rel in a.manifest.files} - {"id_map"} \
            | {"id_map/user", "id_map/item"}


def test_a_homogeneous_graph_and_an_array_feature_column(tmp_path, bq_tables, bucket,
                                                         bigquery_emulator):
    """The generated homogeneous graph, its node features as one ARRAY<FLOAT64> column in
    BigQuery (several FLOAT columns locally): the same shard set."""
    from tests.shard_sets import TASK
    from graphstore.tools.datagen import DatasetSpec, generate_dataset

    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="homo", seed=4), str(data))
    task = yaml.safe_load(TASK.read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    local = partition_graph(_config(tmp_path, task), num_partitions=2,
                            output_uri=str(tmp_path / "local"))
    nodes = pq.read_table(data / task["datasetConfig"]["dataSources"]["nodes"][0]["uri"])
    (ns,) = task["datasetConfig"]["dataSources"]["nodes"]
    width = len(ns["featureColumns"])
    rows = [{ns["idColumn"]: r[ns["idColumn"]], "feats": [r[c] for c in ns["featureColumns"]]}
            for r in nodes.to_pylist()]
    bq = copy.deepcopy(task)
    bq["datasetConfig"]["dataSources"]["nodes"][0].update(
        uri=bq_tables("nodes", {ns["idColumn"]: "INT64", "feats": "ARRAY<FLOAT64>"}, rows),
        featureColumns=["feats"])
    (es,) = bq["datasetConfig"]["dataSources"]["edges"]
    es["uri"] = bq_tables.parquet("edges", data / es["uri"])
    out = f"gs://{bucket}/shards"
    partition_graph_bigquery(_config(tmp_path, bq), num_partitions=2, output_uri=out,
                             scratch=_scratch(bigquery_emulator))
    with ShardSet.open(str(tmp_path / "local")) as a, ShardSet.open(out) as b:
        assert a.manifest.node_types[ns["nodeType"]].feature_dim == width > 1
        assert local.num_partitions == 2 and assert_same_shards(a, b) > 1000


def test_bad_input_is_named_and_nothing_is_published(tmp_path, bq_tables, bucket,
                                                     bigquery_emulator):
    raw = tmp_path / "raw"
    make_raw(raw)
    task = _in_bigquery(task_dict(raw), raw, bq_tables)
    out = f"gs://{bucket}/shards"
    scratch = _scratch(bigquery_emulator)

    def fails(change, error=InputDataError) -> str:
        bad = copy.deepcopy(task)
        change(bad)
        with pytest.raises(error) as e:
            partition_graph_bigquery(_config(tmp_path, bad), num_partitions=2, output_uri=out,
                                     scratch=scratch)
        assert read_pointer(out) is None
        return str(e.value)

    users = task["datasetConfig"]["dataSources"]["nodes"][0]
    nan_users = bq_tables("users_nan", {"user_id": "STRING", "f_0": "FLOAT64", "f_1": "FLOAT64",
                                        "f_2": "FLOAT64"},
                          [{"user_id": "u1", "f_0": 1.0, "f_1": 2.0, "f_2": 3.0},
                           {"user_id": "u2", "f_0": 1.0, "f_1": float("nan"), "f_2": 3.0},
                           {"user_id": "u3", "f_0": 1.0, "f_1": 1e39, "f_2": 3.0}])
    message = fails(lambda t: t["datasetConfig"]["dataSources"]["nodes"][0].update(uri=nan_users))
    assert message.startswith(f"{nan_users}: column 'f_1': feature value ")
    assert "is not a finite float32 number (2 bad row(s) in total)" in message
    message = fails(lambda t: t["datasetConfig"]["dataSources"]["nodes"][0].update(
        featureColumns=["f_0", "nope"]))
    assert message == (f"BigQuery table {users['uri']} has no feature column 'nope' "
                       "(datasetConfig.dataSources.nodes[user].featureColumns); it has "
                       "['user_id', 'f_0', 'f_1', 'f_2']")
    message = fails(lambda t: t["datasetConfig"]["dataSources"]["nodes"][1].update(
        idColumn="f_0"))
    assert "column 'f_0' is FLOAT64; node ids must be INT64 or STRING" in message
    message = fails(lambda t: t["datasetConfig"]["dataSources"]["nodes"][0].update(
        uri=task["datasetConfig"]["dataSources"]["edges"][1]["uri"], idColumn="src_item_id",
        featureColumns=[]))
    assert "ids of node type 'user' are INT64 in" in message and "but STRING in" in message
    message = fails(lambda t: t["datasetConfig"]["dataSources"]["nodes"][0].update(
        uri=str(raw / "users.parquet")), error=UsageError)
    assert "the BigQuery engine reads bq:// tables only" in message



def test_the_partition_task_picks_bigquery_and_a_kill_before_the_switch_keeps_the_old_set(
        tmp_path, bq_tables, bucket, bigquery_emulator):
    """``python -m components.partition`` with ``bq://`` tables and a gs:// output (engine
    ``auto``): BigQuery does the work; killed once the new version is complete but before
    ``CURRENT`` switches, the old set stays current and whole; the next run publishes, and the
    runs that ended dropped their scratch tables."""
    import json
    import subprocess
    import sys

    from graphstore.io.gcp import bigquery_client
    from tests.kill_points import REPO, kill_at

    raw = tmp_path / "raw"
    make_raw(raw)
    tp, rp = tmp_path / "task.yaml", tmp_path / "resources.yaml"
    tp.write_text(yaml.safe_dump(_in_bigquery(task_dict(raw), raw, bq_tables)))
    rp.write_text(yaml.safe_dump(RESOURCES))
    out = f"gs://{bucket}/shards"
    argv = ["-m", "components.partition", "--task-config", str(tp), "--resource-config", str(rp),
            "--output", out]

    def run() -> dict:
        proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "partition engine: bigquery" in proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert run()["partitions"] == 2
    first = read_pointer(out)
    with ShardSet.open(out) as s:
        first_manifest = s.manifest
    output = kill_at("shards:version-complete", argv, tmp_path, timeout_s=300)
    assert "partition engine: bigquery" in output
    assert read_pointer(out) == first
    with ShardSet.open(out) as s:
        assert s.manifest == first_manifest
        s.load_partition(0), s.load_partition(1)
    from graphstore.io import uris
    killed = [v for v in uris.list_dirs(out) if v.startswith("v-") and v != first]
    assert len(killed) == 1 and uris.exists(f"{out}/{killed[0]}/manifest.json")
    run()
    assert read_pointer(out) not in (first, killed[0])
    assert [v for v in uris.list_dirs(out) if v.startswith("v-")] == [read_pointer(out)]
    client = bigquery_client(bigquery_emulator.project)
    left = {t.table_id for t in client.list_tables(
        f"{bigquery_emulator.project}.graphstore_scratch")}
    killed_tag = killed[0].lower().replace("-", "_")
    assert left and all(t.startswith(f"gsp_{killed_tag}_") for t in left), left


def test_the_partition_task_exits_2_naming_bad_bigquery_input(tmp_path, bq_tables, bucket):
    import subprocess
    import sys

    from tests.kill_points import REPO

    raw = tmp_path / "raw"
    make_raw(raw)
    task = _in_bigquery(task_dict(raw), raw, bq_tables)
    bad = bq_tables("items_inf", {"item_id": "INT64", "f_0": "FLOAT64", "f_1": "FLOAT64"},
                    [{"item_id": 1, "f_0": 0.5, "f_1": float("inf")}])
    task["datasetConfig"]["dataSources"]["nodes"][1]["uri"] = bad
    tp, rp = tmp_path / "task.yaml", tmp_path / "resources.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(RESOURCES))
    out = f"gs://{bucket}/shards"
    proc = subprocess.run([sys.executable, "-m", "components.partition", "--task-config",
                           str(tp), "--resource-config", str(rp), "--output", out], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{bad}: column 'f_1': feature value " in proc.stderr
    assert read_pointer(out) is None


def test_plan_prints_the_bytes_the_bigquery_engine_will_read(tmp_path, bq_tables):
    """``pipeline plan`` on ``bq://`` tables: the engine's statements priced from the tables'
    metadata (graphstore.planning.bigquery_cost), after the storage sizing."""
    import subprocess
    import sys

    from tests.kill_points import REPO

    raw = tmp_path / "raw"
    make_raw(raw)
    tp, rp = tmp_path / "task.yaml", tmp_path / "resources.yaml"
    tp.write_text(yaml.safe_dump(_in_bigquery(task_dict(raw), raw, bq_tables)))
    rp.write_text(yaml.safe_dump(RESOURCES))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "plan", "--task-config", str(tp),
                           "--resource-config", str(rp)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "BigQuery engine: logical bytes its statements read" in out
    groups = [line for line in out.splitlines() if "B  node type " in line
              or "B  edge type " in line]
    assert len(groups) == 2 + 2 and all(float(line.split()[0]) > 0 for line in groups)
    lines = out.splitlines()
    start = lines.index("BigQuery engine: dry run of its statements that read only the source "
                        "tables (QueryJobConfig(dry_run=True); pipeline/bigquery_dry_run.py):")
    assert "per TiB on-demand" in lines[start - 1]
    sources = task_dict(raw)["datasetConfig"]["dataSources"]
    n_sources = len(sources["nodes"]) + len(sources["edges"])
    dry = lines[start + 1:start + 1 + n_sources]
    assert [line.split()[:2] for line in dry] == [["0", "B"]] * n_sources, dry
    assert sum("checking the ids of node type" in line for line in dry) == len(sources["nodes"])
    assert lines[start + 1 + n_sources].strip().startswith("the service reported 0 bytes")


def test_the_dry_run_statements_are_the_engine_s_and_run_on_the_tables(tmp_path, bq_tables,
                                                                        bigquery_emulator):
    """The statements ``pipeline plan`` dry-runs (pipeline.bigquery_dry_run) are valid on the
    source tables: run for real on the emulator, each answers its table's row count and no
    null id; a table named wrong is a dry run that failed, on its own line."""
    from graphstore.io.gcp import bigquery_client
    from graphstore.partition.bigquery_numbering import id_check_sql
    from pipeline.bigquery_dry_run import (SourceStatement, dry_run, dry_run_lines,
                                           source_statements)

    raw = tmp_path / "raw"
    make_raw(raw)
    task = _config(tmp_path, _in_bigquery(task_dict(raw), raw, bq_tables))
    client = bigquery_client(bigquery_emulator.project)
    statements = source_statements(task)
    uris = [s.uri for s in (*task.dataset.node_sources, *task.dataset.edge_sources)]
    assert len(statements) == len(uris) and all(u in st.purpose
                                                for u, st in zip(uris, statements))
    n_nodes = len(task.dataset.node_sources)
    for i, (uri, st) in enumerate(zip(uris, statements)):
        want = client.get_table(uri.removeprefix("bq://")).num_rows
        ((rows, nulls, third),) = list(client.query(st.sql).result())
        # node tables: (rows, null ids, distinct ids); edge tables: (rows, null src, null dst)
        assert (rows, nulls, third) == ((want, 0, want) if i < n_nodes else (want, 0, 0)), uri
    missing = SourceStatement("checking a table that is not there",
                              id_check_sql(f"{bigquery_emulator.project}.nope.nope", "id"))
    lines = dry_run_lines(dry_run(statements[1:] + [missing], client, None))
    assert lines[-1].strip().startswith("the service reported 0 bytes")
    assert lines[-2].split()[0] == "failed" and missing.purpose in lines[-2]


def test_submit_refuses_missing_tables_and_another_location(tmp_path, bq_tables,
                                                           bigquery_emulator):
    """``pipeline submit --dry-run`` of a run that partitions in BigQuery: a missing source table
    and a configured location other than the tables' are refused (exit 2, one line each, the key
    named); a scratch dataset in another location too; the good config goes through."""
    import subprocess
    import sys

    from google.cloud import bigquery

    from graphstore.io.gcp import bigquery_client
    from tests.integration.test_plan_processes import IMAGE
    from tests.kill_points import REPO
    from tests.unit.test_plan import VERTEX_RES

    raw = tmp_path / "raw"
    make_raw(raw)
    task = _in_bigquery(task_dict(raw), raw, bq_tables)
    task["exportConfig"] = {"warehouse": "bigquery", "bigqueryDataset": "emb"}

    def submit(task: dict, *sets: str) -> subprocess.CompletedProcess:
        tp = tmp_path / f"task-{uuid.uuid4().hex[:6]}.yaml"
        tp.write_text(yaml.safe_dump(task))
        return subprocess.run(
            [sys.executable, "-m", "pipeline", "submit", "--task-config", str(tp),
             "--resource-config", str(VERTEX_RES), "--image", IMAGE, "--dry-run",
             *(a for s in sets for a in ("--set", s))],
            cwd=REPO, capture_output=True, text=True, timeout=240)

    ok = submit(task)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "BigQuery engine not checked" not in ok.stderr
    missing = copy.deepcopy(task)
    gone = f"bq://{bigquery_emulator.project}.nowhere.edges"
    missing["datasetConfig"]["dataSources"]["edges"][1]["uri"] = gone
    refused = submit(missing, "datasetConfig.partitionConfig.bigquery.location=EU",
                     f"datasetConfig.partitionConfig.bigquery.dataset=s_{uuid.uuid4().hex[:8]}")
    assert refused.returncode == 2, refused.stderr[-3000:]
    lines = refused.stderr.strip().splitlines()
    assert "submit: storage sizing not checked: BigQuery table " in lines[0]  # said, not fatal
    assert lines[1] == "submit: service account permissions not checked (--dry-run)"
    assert lines[2] == "pipeline: error: 2 config problems:", lines
    assert any(".dataSources.edges[1].uri: " in x and f"{gone}: BigQuery table not found" in x
               for x in lines)
    assert any("partitionConfig.bigquery.location: 'EU', but the source tables are in US" in x
               for x in lines)
    client = bigquery_client(bigquery_emulator.project)
    scratch = bigquery.Dataset(f"{bigquery_emulator.project}.scratch_eu")
    scratch.location = "EU"
    client.create_dataset(scratch)
    refused = submit(task, "datasetConfig.partitionConfig.bigquery.dataset=scratch_eu")
    assert client.get_dataset(f"{bigquery_emulator.project}.scratch_eu").location == "EU"
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "partitionConfig.bigquery.dataset: " in refused.stderr
    assert ".scratch_eu is in EU, the jobs run in US" in refused.stderr
