"""Sizing before spending (issue 12 item 7): graphstore.planning.sizing's counts, pipeline.plan's check,
and the `pipeline plan` / `pipeline submit` commands, on real partitioned shard sets and real
Parquet tables (a "huge" table is real too: billions of null rows, which only its footer counts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.planning.sizing import (
    GIB, MEASURED, MIB, PartitionLoad, TableCounts, disk_needed_bytes, loads_from_manifest,
    loads_from_tables, memory_needed_bytes,
)
from graphstore.io.table_rows import count_rows
from pipeline.plan import check

REPO = Path(__file__).resolve().parents[2]
VERTEX_TASK, VERTEX_RES = REPO / "configs" / "task_vertex.yaml", REPO / "configs" / "resource_vertex.yaml"
POOL = "trainer_resource_config.vertex_ai_graph_store_trainer_config.graph_store_pool"
IPOOL = "inferencer_resource_config.vertex_ai_graph_store_inferencer_config.graph_store_pool"
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    """The tiny hetero graph, its task config, and its shard set in 2 partitions."""
    base = tmp_path_factory.mktemp("plan")
    data = base / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=2), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    tp = base / "task.yaml"
    tp.write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(tp), str(REPO / "configs" / "resource_local.yaml"))
    partition_graph(cfg, num_partitions=2, output_uri=str(base / "shards"))
    return {"base": base, "task": tp, "cfg": cfg, "shards": str(base / "shards")}


def test_manifest_counts_and_the_raw_table_estimate_agree(tiny):
    manifest = ShardSet.open(tiny["shards"]).manifest
    exact = loads_from_manifest(manifest)
    tables = {s.node_type: count_rows(s.uri, s.format) for s in tiny["cfg"].dataset.node_sources}
    edges = {str(s.edge_type): count_rows(s.uri, s.format) for s in tiny["cfg"].dataset.edge_sources}
    assert tables == {"user": 200, "item": 100} and sum(edges.values()) == 2000
    estimate = loads_from_tables(tiny["cfg"], 2, TableCounts(nodes=tables, edges=edges))
    assert [e.partition for e in exact] == [0, 1] and all(e.exact for e in exact)
    # the manifest: 1600 user->item + their 1600 reverses + 400 item->item, labels from the reverse
    assert sum(e.edges for e in exact) == 3600 == sum(e.edges for e in estimate)
    assert {e.nodes_total for e in exact} == {300} == {e.nodes_total for e in estimate}
    assert sum(e.feature_values for e in exact) == 300 * 16 == sum(e.feature_values for e in estimate)
    files = {rel: f.bytes for rel, f in manifest.files.items()}
    part0 = sum(b for rel, b in files.items() if rel.startswith("part_0/"))
    assert exact[0].shard_bytes == part0
    for e, x in zip(estimate, exact):  # raw values plus 5%: above the uncompressed files' data
        assert 0.5 * x.shard_bytes < e.shard_bytes < 2 * x.shard_bytes


def test_the_memory_model_is_linear_in_the_counts_and_grows_with_compute_processes():
    small = PartitionLoad(partition=0, edges=10**6, labels=10**5, nodes_total=10**5, nodes_owned=5 * 10**4,
                          feature_values=10**6, shard_bytes=10**8, exact=True)
    double = PartitionLoad(partition=0, edges=2 * 10**6, labels=2 * 10**5, nodes_total=2 * 10**5,
                           nodes_owned=10**5, feature_values=2 * 10**6, shard_bytes=2 * 10**8,
                           exact=True)
    base = MEASURED.base_mib * MIB
    assert MEASURED.peak_bytes(double, 1) - base == pytest.approx(
        2 * (MEASURED.peak_bytes(small, 1) - base), abs=2)
    assert MEASURED.peak_bytes(small, 3) > MEASURED.peak_bytes(small, 1)
    assert memory_needed_bytes(small, 1) > MEASURED.peak_bytes(small, 1)
    assert disk_needed_bytes(small) == 30 * 10**9 + 10**8


def _huge(load_edges: int) -> list[PartitionLoad]:
    return [PartitionLoad(partition=p, edges=load_edges, labels=load_edges // 4, nodes_total=10**9, nodes_owned=10**8,
                          feature_values=10**10, shard_bytes=400 * 10**9, exact=False)
            for p in range(4)]


def test_check_names_each_key_that_cannot_hold_its_partition(tmp_path):
    task, res = load_config_pair(str(VERTEX_TASK), str(VERTEX_RES), (
        f"{POOL}.machine_type=n2-highmem-2", f"{IPOOL}.machine_type=n2-highmem-2",
        "partition_resource_config.memory_gb=1"))
    plan = check(task, res, _huge(10**9), "test", task_file="t.yaml", res_file="r.yaml")
    assert not plan.fits
    by_path = {p.path: p.message for p in plan.problems}
    assert set(by_path) == {f"{POOL}.machine_type", f"{POOL}.boot_disk_size_gb",
                            f"{IPOOL}.machine_type", f"{IPOOL}.boot_disk_size_gb",
                            "partition_resource_config.memory_gb"}
    assert by_path[f"{POOL}.machine_type"].startswith("n2-highmem-2 has 16.0 GiB of memory but "
                                                      "partition 0 needs ")
    assert "or more num_replicas (re-partition)" in by_path[f"{POOL}.machine_type"]
    assert "set boot_disk_size_gb to at least 430" in by_path[f"{POOL}.boot_disk_size_gb"]
    assert "memoryLimitMb = 2048 MB" in by_path["partition_resource_config.memory_gb"]
    assert all(len(str(p)) < 400 for p in plan.problems)
    # the machine and disk it asks for hold the same loads
    need = memory_needed_bytes(_huge(10**9)[0], 4)
    assert need > 16 * GIB
    small = [PartitionLoad(partition=p, edges=10**5, labels=10**4, nodes_total=10**5, nodes_owned=2 * 10**4,
                           feature_values=10**5, shard_bytes=10**7, exact=True) for p in range(4)]
    ok = check(task, res, small, "test", task_file="t.yaml", res_file="r.yaml")
    assert [p.path for p in ok.problems] == ["partition_resource_config.memory_gb"]
    assert any(line.startswith("train: storage pool n2-highmem-2 (16 GiB, pd-ssd 200 GB) x4: fits")
               for line in ok.lines)


def test_a_shard_set_with_another_partition_count_is_a_problem(tiny):
    task, res = load_config_pair(str(VERTEX_TASK), str(VERTEX_RES))
    loads = loads_from_manifest(ShardSet.open(tiny["shards"]).manifest)
    plan = check(task, res, loads, "test", task_file="t.yaml", res_file="r.yaml")
    assert [p.path for p in plan.problems] == [f"{POOL}.num_replicas"]
    assert "has 2 partitions but the resource config serves 4" in plan.problems[0].message


def test_a_graph_given_by_counts_alone_is_split_evenly_and_priced():
    from graphstore.config import machine_types
    from graphstore.planning.sizing import GraphCounts, loads_from_counts
    from pipeline.plan import check_counts

    counts = GraphCounts(nodes=5 * 10**9, edges=10**11, feature_dim=128, labels=10**10)
    loads = loads_from_counts(counts, 64)
    assert len(loads) == 64
    assert sum(x.nodes_owned for x in loads) >= counts.nodes
    assert max(x.nodes_owned for x in loads) - counts.nodes // 64 <= 1
    assert all(x.feature_values == x.nodes_owned * 128 for x in loads)
    _, res = load_config_pair(str(VERTEX_TASK), str(VERTEX_RES))
    plan = check_counts(counts, res, loads, res_file="r.yaml")
    # the pool serves 4 machines, the plan 64: said, with the key to change
    by_path = {p.path: p.message for p in plan.problems}
    assert "the plan splits the graph over 64 partitions but the resource config serves 4" \
        in by_path[f"{POOL}.num_replicas"]
    need = max(memory_needed_bytes(x, 4) for x in loads)
    cheapest = [line for line in plan.lines if line.startswith("cheapest storage machine")]
    kind = machine_types.cheapest_holding(-(-need // MIB))
    assert kind is not None and kind.memory_mib * MIB >= need
    assert cheapest == [line for line in plan.lines if f": {kind.name} (" in line]
    assert f"for 64 (" in cheapest[0]
    # the same graph over the pool's own 4 machines: no count problem
    four = check_counts(counts, res, loads_from_counts(counts, 4), res_file="r.yaml")
    assert f"{POOL}.num_replicas" not in {p.path for p in four.problems}


def test_a_sampling_channel_holds_one_batch_message_of_the_loader(tiny):
    """A batch message larger than its worker's channel is never sent (GLT 0.2.4 waits
    silently): the channel is sized from the batch, at least 64 MiB."""
    from graphstore.dataset.graph_dataset import SamplingOptions
    from graphstore.dataset.metadata import DatasetMetadata
    from graphstore.modes.graph_store.remote_dataset import MIN_CHANNEL_MIB, batch_message_bytes, channel_mib

    meta = DatasetMetadata.from_manifest(ShardSet.open(tiny["shards"]).manifest, has_splits=False)
    small = batch_message_bytes(meta, [10, 5], 512, link=False)
    big = batch_message_bytes(meta, [10, 5], 8192, link=False)
    assert big == pytest.approx(16 * small, rel=0.01)
    assert batch_message_bytes(meta, [10, -1], 512, link=False) is None

    def config(batch, fanout):
        return SamplingOptions("node", fanout, batch, False, False, meta.edge_dir, 0)
    assert channel_mib(meta, config(512, [10, 5])) == max(MIN_CHANNEL_MIB, -(-small // 2**20))
    assert channel_mib(meta, config(8192, [10, 5])) * 2**20 >= big
    assert channel_mib(meta, config(512, [-1])) == MIN_CHANNEL_MIB
