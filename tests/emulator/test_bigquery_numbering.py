"""The BigQuery engine's node numbering (graphstore.partition.bigquery_numbering) with the real
client against bqemulator: the dense ids the shard format's rule gives for the sorted raw ids,
however the ids are spread over the buckets; bad ids named like the local engine names them."""

from __future__ import annotations

import random
import uuid

import numpy as np
import pytest

from graphstore.formats.shards.format import NodeRanges
from graphstore.formats.shards.reader import ShardSet
from graphstore.partition import partition_graph
from graphstore.partition.bigquery_jobs import BigQueryJobs, ScratchDataset
from graphstore.partition.bigquery_edges import map_edges, reverse_edges
from graphstore.partition.bigquery_numbering import number_from_edges, number_from_table
from graphstore.runtime.errors import InputDataError, RuntimeFailure
from tests.shard_sets import tiny_hetero_task

pytestmark = [pytest.mark.emulator]


@pytest.fixture
def raw(bq_tables):
    return bq_tables


@pytest.fixture
def jobs(bigquery_emulator) -> BigQueryJobs:
    scratch = ScratchDataset(project=bigquery_emulator.project,
                             dataset=f"scratch_{uuid.uuid4().hex[:8]}", location=None,
                             tag=uuid.uuid4().hex[:10])
    jobs = BigQueryJobs(scratch)
    jobs.ensure_dataset()
    return jobs


def _expected(raw_ids: list, num_partitions: int) -> dict:
    """raw id -> (dense id, partition) by the format's rule over Python's ascending order
    (code points for strings: UTF-8 byte order)."""
    order = sorted(raw_ids)
    ranges = NodeRanges(len(order), num_partitions)
    ranks = np.arange(len(order), dtype=np.int64)
    dense = ranges.dense_of_rank(ranks)
    return {r: (int(d), int(k % num_partitions)) for r, d, k in zip(order, dense, ranks)}


def _numbered(jobs: BigQueryJobs, table: str) -> dict:
    rows = jobs.run("reading the test's result", f"SELECT raw_id, int_id, part FROM `{table}`")
    return {r[0]: (int(r[1]), int(r[2])) for r in rows}


def test_skewed_int_ids_get_the_format_s_dense_ids_across_many_buckets(raw, jobs):
    rng = random.Random(7)
    ids = set()
    while len(ids) < 3000:  # most ids crowd near 0, a few are huge or negative: uneven cuts
        ids.add(rng.choice([rng.randrange(0, 500), rng.randrange(-(1 << 62), 1 << 62),
                            rng.randrange(1000, 1100) * 7919]))
    ids = sorted(ids)
    rng.shuffle(ids)
    uri = raw("users", {"uid": "INT64", "age": "INT64"}, [{"uid": i, "age": 1} for i in ids])
    source = jobs.source_column(uri, "uid", "nodes[0].idColumn")
    numbered = number_from_table(jobs, "user", source, num_partitions=3, ids_per_bucket=97)
    assert numbered.ranges == NodeRanges(3000, 3) and numbered.sql_type == "INT64"
    got = _numbered(jobs, numbered.table)
    assert got == _expected(ids, 3)
    assert sorted(d for d, _ in got.values()) == list(range(3000))


def test_string_ids_are_ordered_by_code_point_like_the_local_engine(raw, jobs):
    words = ["a", "B", "b", "Z", "é", "e", "ä", "z", "zz", "日本", "😀", "10", "9", "", "a b",
             "A", "ß", "ss", "Ω"]
    ids = words + [f"user-{i:05d}" for i in range(300)]
    uri = raw("items", {"item": "STRING"}, [{"item": w} for w in ids])
    source = jobs.source_column(uri, "item", "nodes[1].idColumn")
    numbered = number_from_table(jobs, "item", source, num_partitions=4, ids_per_bucket=40)
    assert numbered.sql_type == "STRING"
    assert _numbered(jobs, numbered.table) == _expected(ids, 4)


def test_one_bucket_and_more_partitions_than_ids(raw, jobs):
    uri = raw("few", {"id": "INT64"}, [{"id": i} for i in (40, 10, 30, 20, 50)])
    numbered = number_from_table(jobs, "few", jobs.source_column(uri, "id", "k"),
                                 num_partitions=8)
    assert _numbered(jobs, numbered.table) == _expected([10, 20, 30, 40, 50], 8)


def test_ids_from_edge_endpoints_are_the_distinct_non_null_ones(raw, jobs):
    follows = raw("follows", {"src": "INT64", "dst": "INT64"},
                  [{"src": 1, "dst": 5}, {"src": 5, "dst": 9}, {"src": 9, "dst": None}])
    likes = raw("likes", {"who": "INT64", "what": "STRING"},
                [{"who": 7, "what": "x"}, {"who": 1, "what": "y"}])
    ends = [jobs.source_column(follows, "src", "k"), jobs.source_column(follows, "dst", "k"),
            jobs.source_column(likes, "who", "k")]
    numbered = number_from_edges(jobs, "user", ends, num_partitions=2)
    assert _numbered(jobs, numbered.table) == _expected([1, 5, 7, 9], 2)
    with pytest.raises(InputDataError, match="disagree on the id type"):
        number_from_edges(jobs, "user", [*ends, jobs.source_column(likes, "what", "k")], 2)


def test_null_and_duplicate_ids_are_named_with_their_table_and_column(raw, jobs):
    nulls = raw("with_null", {"uid": "INT64"}, [{"uid": 1}, {"uid": None}, {"uid": None}])
    with pytest.raises(InputDataError) as e:
        number_from_table(jobs, "user", jobs.source_column(nulls, "uid", "k"), 2)
    assert str(e.value) == f"{nulls}: column 'uid': null id (2 null(s) in total)"
    dups = raw("with_dup", {"uid": "STRING"},
               [{"uid": u} for u in ["a", "b", "c", "b", "c", "c"]])
    with pytest.raises(InputDataError) as e:
        number_from_table(jobs, "user", jobs.source_column(dups, "uid", "k"), 2)
    assert str(e.value) == (f"{dups}: column 'uid': duplicate node id 'b' (2 rows; 3 duplicate "
                            "row(s) in total)")
    empty = raw("empty", {"uid": "INT64"}, [])
    with pytest.raises(InputDataError, match="node table for 'user' is empty"):
        number_from_table(jobs, "user", jobs.source_column(empty, "uid", "k"), 2)


def test_missing_table_column_or_wrong_type_names_the_config_key(raw, jobs, bigquery_emulator):
    uri = raw("t", {"uid": "INT64", "score": "FLOAT64"}, [{"uid": 1, "score": 0.5}])
    missing = f"bq://{bigquery_emulator.project}.nowhere.t"
    with pytest.raises(InputDataError, match=rf"{missing} not found \(nodes\[0\]\.uri\)"):
        jobs.source_column(missing, "uid", "nodes[0].uri")
    with pytest.raises(InputDataError, match=r"has no column 'id' \(nodes\[0\]\.idColumn\)"):
        jobs.source_column(uri, "id", "nodes[0].idColumn")
    with pytest.raises(InputDataError, match="column 'score' is FLOAT.*INT64 or STRING"):
        jobs.source_column(uri, "score", "nodes[0].idColumn")


def test_a_failing_job_names_its_purpose_and_job_id(jobs):
    with pytest.raises(RuntimeFailure, match=r"BigQuery job \S+ \(reading a table that is not "
                                             r"there\) failed"):
        jobs.run("reading a table that is not there",
                 f"SELECT * FROM `{jobs.scratch.table('absent')}`")


def test_the_local_engine_s_id_maps_and_edges_for_the_same_tables(raw, jobs, tmp_path):
    """The generated hetero graph partitioned by the local engine (3 partitions, ``in``
    sampling, reverse types), and its tables numbered and mapped in BigQuery: the same (dense
    id, raw id) pairs for every node type, the same edges in each partition for every edge type
    and its reverse."""
    cfg = tiny_hetero_task(tmp_path, seed=5)
    partition_graph(cfg, num_partitions=3, output_uri=str(tmp_path / "shards"))
    local = ShardSet.open(str(tmp_path / "shards"))
    assert local.manifest.sample_edge_direction == "in"
    numbered = {}
    for ns in cfg.dataset.node_sources:
        uri = raw.parquet(f"nodes_{ns.node_type}", tmp_path / "data" / ns.uri, [ns.id_column])
        numbered[ns.node_type] = number_from_table(
            jobs, ns.node_type, jobs.source_column(uri, ns.id_column, "k"), num_partitions=3,
            ids_per_bucket=50)
        id_map = local.id_map(ns.node_type)
        want = dict(zip(id_map.column("raw_id").to_pylist(), id_map.column("int_id").to_pylist()))
        got = {r: d for r, (d, _) in _numbered(jobs, numbered[ns.node_type].table).items()}
        assert len(want) >= 100 and got == want, ns.node_type
    parts = [local.load_partition(p) for p in range(3)]
    compared = 0
    for es in cfg.dataset.edge_sources:
        et = es.edge_type
        key = f"{et.src_node_type}__{et.relation}__{et.dst_node_type}"
        uri = raw.parquet(f"edges_{et.relation}", tmp_path / "data" / es.uri,
                          [es.src_column, es.dst_column])
        mapped = map_edges(jobs, key, jobs.source_column(uri, es.src_column, "k"),
                           jobs.source_column(uri, es.dst_column, "k"),
                           numbered[et.src_node_type], numbered[et.dst_node_type], anchor="dst",
                           dangling="error")
        results = [(key, mapped)]
        if et.src_node_type != et.dst_node_type:
            rev = f"{et.dst_node_type}__rev_{et.relation}__{et.src_node_type}"
            results.append((rev, reverse_edges(jobs, mapped, rev, numbered[et.src_node_type],
                                               anchor="dst")))
        for name, edges in results:
            assert edges.counts == tuple(local.manifest.edge_types[name].counts_per_partition)
            rows = jobs.run("reading", f"SELECT src, dst, part FROM `{edges.table}`")
            for p in range(3):
                shard = parts[p].edges[name]
                want = set(zip(shard.src.tolist(), shard.dst.tolist()))
                assert {(s, d) for s, d, q in rows if q == p} == want, (name, p)
                compared += len(want)
    assert compared > 1000


def test_edges_with_missing_or_null_endpoints(raw, jobs):
    users = raw("users", {"uid": "INT64"}, [{"uid": u} for u in (1, 2, 3)])
    nodes = number_from_table(jobs, "user", jobs.source_column(users, "uid", "k"), 2)
    follows = raw("follows", {"a": "INT64", "b": "INT64"},
                  [{"a": a, "b": b} for a, b in ((1, 2), (2, 9), (3, 1), (8, 3), (9, 9), (2, 1))])
    ends = jobs.source_column(follows, "a", "k"), jobs.source_column(follows, "b", "k")
    with pytest.raises(InputDataError) as e:
        map_edges(jobs, "user__follows__user", *ends, nodes, nodes, "src", "error")
    assert str(e.value) == (f"{follows}: column 'a': id '8' is not in the 'user' node table "
                            "(3 such edge(s) in total; set datasetConfig.partitionConfig."
                            "danglingEdges: drop to drop them)")
    kept = map_edges(jobs, "user__follows__user", *ends, nodes, nodes, "src", "drop")
    # users 1, 2, 3: ranks 0, 1, 2 -> partitions 0, 1, 0 -> dense ids 0, 2, 1 (bounds 0, 2, 3)
    assert NodeRanges(3, 2).bounds == (0, 2, 3)
    assert kept.dropped == 3 and kept.counts == (2, 1)
    rows = jobs.run("reading", f"SELECT src, dst, part FROM `{kept.table}` ORDER BY src")
    assert [tuple(r) for r in rows] == [(0, 2, 0), (1, 0, 0), (2, 0, 1)]
    nulls = raw("with_null", {"a": "INT64", "b": "INT64"}, [{"a": 1, "b": None}])
    with pytest.raises(InputDataError, match="column 'b': null id"):
        map_edges(jobs, "user__follows__user", jobs.source_column(nulls, "a", "k"),
                  jobs.source_column(nulls, "b", "k"), nodes, nodes, "src", "drop")
