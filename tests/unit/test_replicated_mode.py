"""Replicated mode's configuration and its dataset contract, without Ray: the resource config's
``mode`` key (local and Vertex AI), the CustomJob and the plan of a replicated stage, and
``ReplicatedDataset`` answering every fetch exactly as graph-store storage answers it from the
same shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from graphstore.config import ConfigError, EdgeType, load_config_pair, load_resource_config
from graphstore.runtime.ports import PortHold
from graphstore.modes.replicated.dataset import GraphFileService, ReplicatedDataset
from graphstore.planning.sizing import PartitionLoad
from graphstore.dataset import protocol as P
from pipeline import vertex
from pipeline.plan import check, replicated_graph_bytes
from pipeline.vertex_checks import vertex_problems
from tests.replicated_graphs import build

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"
BUYS = EdgeType(src_node_type="user", relation="buys", dst_node_type="item")
IMAGE = "europe-docker.pkg.dev/p/r/graphstore:1"


def _resource(tmp_path: Path, trainer: dict, inferencer: dict | None = None) -> Path:
    path = tmp_path / "res.yaml"
    path.write_text(yaml.safe_dump({"trainer_resource_config": trainer,
                                    "inferencer_resource_config": inferencer or trainer}))
    return path


def _problems(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as exc:
        load_resource_config(path)
    return [(p.path, p.message) for p in exc.value.problems]


def test_local_replicated_mode_has_no_storage_and_one_partition(tmp_path):
    res = load_resource_config(CONFIGS / "resource_local_replicated.yaml")
    assert (res.trainer.mode, res.trainer.num_storage, res.num_partitions) == ("replicated", 0, 1)
    assert res.trainer.replicated and not res.trainer.colocated
    assert res.trainer.describe() == "local replicated 1x2 compute"
    # graph store keeps its defaults: 2 storage processes, colocated with 0
    plain = load_resource_config(_resource(tmp_path, {"local_graph_store_config": {}}))
    assert (plain.trainer.mode, plain.trainer.num_storage) == ("graph_store", 2)
    frozen = tmp_path / "frozen.yaml"  # the frozen copy loads back equal (null stays derived)
    frozen.write_text(yaml.safe_dump(res.to_dict(), sort_keys=False))
    assert load_resource_config(frozen) == res


def test_replicated_mode_refuses_storage_and_a_mode_that_differs_per_stage(tmp_path):
    local = "trainer_resource_config.local_graph_store_config"
    bad = _problems(_resource(tmp_path, {"local_graph_store_config": {
        "mode": "replicated", "num_storage_processes": 2}}))
    assert bad[0][0] == f"{local}.num_storage_processes" and "must be 0" in bad[0][1]
    bad = _problems(_resource(tmp_path, {"local_graph_store_config": {"mode": "replicatd"}}))
    assert bad[0][0] == f"{local}.mode" and "did you mean 'replicated'" in bad[0][1]
    bad = _problems(_resource(tmp_path, {"local_graph_store_config": {"mode": "replicated"}},
                              {"local_graph_store_config": {}}))
    assert bad[0][0] == "inferencer_resource_config.local_graph_store_config.mode"
    assert "trainer's mode 'replicated'" in bad[0][1]
    pool = {"machine_type": "n1-standard-16"}
    key = "trainer_resource_config.vertex_ai_graph_store_trainer_config.graph_store_pool"
    bad = _problems(_resource(tmp_path, {"vertex_ai_graph_store_trainer_config": {
        "mode": "replicated", "graph_store_pool": pool, "compute_pool": pool}}))
    assert bad[0][0] == key and "must not be set in mode 'replicated'" in bad[0][1]
    bad = _problems(_resource(tmp_path, {"vertex_ai_graph_store_trainer_config": {
        "compute_pool": pool}}))
    assert bad[0][0] == key and "mode 'graph_store' needs" in bad[0][1]


def test_sampling_workers_zero_is_refused_only_where_storage_samples():
    """``sampling_workers: 0`` (inline) loads with a replicated or colocated stage and is a
    problem naming the key with a graph-store one; a negative one is refused in every mode."""
    key = "trainerConfig.trainerArgs.sampling_workers"
    inline = ("trainerConfig.trainerArgs.sampling_workers=0",
              "inferencerConfig.inferencerArgs.sampling_workers=0")
    task, _ = load_config_pair(CONFIGS / "task_hetero.yaml",
                               CONFIGS / "resource_local_replicated.yaml", inline)
    assert task.trainer.trainer_args["sampling_workers"] == 0
    load_config_pair(CONFIGS / "task_hetero.yaml", CONFIGS / "resource_local_colocated.yaml", inline)
    with pytest.raises(ConfigError) as exc:
        load_config_pair(CONFIGS / "task_hetero.yaml", CONFIGS / "resource_local.yaml", inline)
    found = {p.path: p.message for p in exc.value.problems}
    assert set(found) == {key, "inferencerConfig.inferencerArgs.sampling_workers"}
    assert "graph-store mode" in found[key] and "resource_local.yaml" in found[key]
    with pytest.raises(ConfigError, match="sampling_workers"):
        load_config_pair(CONFIGS / "task_hetero.yaml", CONFIGS / "resource_local_replicated.yaml",
                         ("trainerConfig.trainerArgs.sampling_workers=-1",))


def test_vertex_replicated_job_has_compute_pools_only_and_passes_the_vertex_checks():
    task_path, res_path = CONFIGS / "task_vertex.yaml", CONFIGS / "resource_vertex_replicated.yaml"
    task, res = load_config_pair(task_path, res_path)
    args = dict(task_config_uri="gs://b/r/config/task.yaml",
                resource_config_uri="gs://b/r/config/resource.yaml", run_dir="gs://b/r")
    train = vertex.worker_pool_specs(task, res.trainer, "train", IMAGE, **args)
    assert [s["replica_count"] for s in train] == [1, 1]  # leader + 1 other compute machine
    assert all(s["container_spec"]["args"][:2] == ["-m", "components.train"] for s in train)
    assert train[0]["machine_spec"]["accelerator_count"] == 2
    infer = vertex.worker_pool_specs(task, res.inferencer, "infer", IMAGE, **args)
    assert infer[1] == {} and len(infer) == 2  # one machine: the middle pool stays empty
    assert vertex_problems(task, res, image=IMAGE, run_root="gs://my-project-graphstore-perm/runs",
                           task_file=str(task_path), resource_file=str(res_path)) == []


def test_plan_checks_the_compute_boot_disk_against_the_graph_files():
    task, res = load_config_pair(CONFIGS / "task_vertex.yaml",
                                 CONFIGS / "resource_vertex_replicated.yaml")
    # 4 shard partitions are fine (the graph file is written from any count): no count problem
    loads = [PartitionLoad(partition=p, edges=2_500_000_000, labels=500_000_000,
                           nodes_total=100_000_000, nodes_owned=25_000_000,
                           feature_values=400_000_000, shard_bytes=10**9, exact=True)
             for p in range(4)]
    plan = check(task, res, loads, "test", task_file="t.yaml", res_file="r.yaml")
    need = replicated_graph_bytes(task, loads)
    assert need > 170 * 10**9  # 10 G edges x 16 B alone
    disk = "vertex_ai_graph_store_trainer_config.compute_pool.boot_disk_size_gb"
    assert [p.path for p in plan.problems] == [f"trainer_resource_config.{disk}",
                                               "inferencer_resource_config." + disk.replace(
                                                   "trainer", "inferencer")]
    assert "use mode graph_store" in plan.problems[0].message
    small = [PartitionLoad(partition=0, edges=1000, labels=10, nodes_total=100, nodes_owned=100,
                           feature_values=1600, shard_bytes=10**5, exact=True)]
    assert check(task, res, small, "test", task_file="t.yaml", res_file="r.yaml").fits


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build(tmp_path_factory.mktemp("replicated"), kind="hetero")


def _storage_services(built):
    from graphstore.formats.shards.reader import ShardSet
    from graphstore.dataset.partition_graph import build_storage_dataset
    from graphstore.dataset.service import StorageService

    out = []
    with ShardSet.open(built.shards) as shards:
        for p in range(shards.manifest.num_partitions):
            glt, state = build_storage_dataset(shards, p, built.storage_args, built.direction)
            out.append(StorageService(state, "127.0.0.1", PortHold()))
    return out


def _pairs(t: torch.Tensor) -> list[tuple[int, int]]:
    return sorted(zip(*t.tolist()))


def test_graph_file_answers_every_fetch_as_graph_store_storage_does(built):
    storage = _storage_services(built)
    mine = GraphFileService(ReplicatedDataset(built.graph, built.features, view="train").graph)
    meta = mine.answer(P.MetadataRequest()).metadata
    theirs = storage[0].answer(P.MetadataRequest()).metadata
    assert (meta.node_counts, meta.edge_types, meta.supervision_edge_types, meta.edge_dir) == (
        theirs.node_counts, theirs.edge_types, theirs.supervision_edge_types, theirs.edge_dir)
    for split in (None, "train", "val", "test"):
        request = P.AblpInputRequest(BUYS, split, 0, 1)
        got = mine.answer(request).input
        want = [s.answer(request).input for s in storage]
        assert sorted(got.anchor_nodes.tolist()) == sorted(
            sum((w.anchor_nodes.tolist() for w in want), []))
        assert _pairs(got.positive_labels[BUYS.as_tuple()]) == _pairs(
            torch.cat([w.positive_labels[BUYS.as_tuple()] for w in want], dim=1))
        ids = P.NodeIdsRequest("user", split, 0, 1)
        assert sorted(mine.answer(ids).ids.tolist()) == sorted(
            sum((s.answer(ids).ids.tolist() for s in storage), []))
    labels = torch.arange(0, meta.node_counts["item"], 3)
    request = P.PositivePairsRequest(BUYS, labels)
    assert _pairs(mine.answer(request).pairs) == _pairs(
        torch.cat([s.answer(request).pairs for s in storage], dim=1))
    # shares: rank r of w gets a contiguous slice, every id exactly once over the ranks
    shares = [mine.answer(P.NodeIdsRequest("item", None, r, 3)).ids for r in range(3)]
    assert torch.equal(torch.cat(shares), torch.arange(meta.node_counts["item"]))
    anchors = mine.answer(P.AblpInputRequest(BUYS, None, 0, 1)).input.anchor_nodes[:5]
    assert _pairs(mine.answer(P.LabelsRequest(BUYS, anchors)).pairs) == _pairs(
        torch.cat([s.answer(P.LabelsRequest(BUYS, anchors[np.isin(
            anchors.numpy(), s.state.supervision[BUYS].anchors_by_split["all"])])).pairs
            for s in storage], dim=1))
    book = ReplicatedDataset(built.graph, built.features, view="train").fetch_node_partition_book("user")
    assert book[torch.arange(meta.node_counts["user"])].max() == 0  # one partition: the file


def test_replicated_dataset_pickles_as_paths_and_refuses_a_missing_view(built, tmp_path):
    import pickle

    ds = ReplicatedDataset(built.graph, built.features, view="train")
    ds.graph  # noqa: B018 (maps the file)
    again = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 20_000 and again.graph.path == built.graph
    assert again.input_partitions == (0,) and again.metadata == ds.metadata
    no_split = build(tmp_path, kind="hetero", splitter=None)
    from graphstore.runtime.errors import UsageError

    with pytest.raises(UsageError, match="no 'train' view"):
        ReplicatedDataset(no_split.graph, view="train")


def test_colocated_is_a_mode_and_its_old_form_still_loads_with_a_note(tmp_path, caplog):
    res = load_resource_config(CONFIGS / "resource_local_colocated.yaml")
    assert (res.trainer.mode, res.trainer.num_storage, res.num_partitions) == ("colocated", 0, 2)
    assert res.trainer.colocated and not res.trainer.replicated
    with caplog.at_level("WARNING", logger="graphstore.config.resource_schema"):
        old = load_resource_config(_resource(tmp_path, {"local_graph_store_config": {
            "num_storage_processes": 0, "num_compute_machines": 2}}))
    assert (old.trainer.mode, old.trainer.colocated, old.num_partitions) == ("colocated", True, 2)
    notes = [r.getMessage() for r in caplog.records]
    assert notes and all("write mode: colocated instead" in n for n in notes), notes
    local = "trainer_resource_config.local_graph_store_config"
    bad = _problems(_resource(tmp_path, {"local_graph_store_config": {
        "mode": "colocated", "num_storage_processes": 2}}))
    assert bad[0][0] == f"{local}.num_storage_processes" and "mode 'colocated'" in bad[0][1]
    bad = _problems(_resource(tmp_path, {"local_graph_store_config": {"mode": "colocated"}},
                              {"local_graph_store_config": {}}))
    assert bad[0][0] == "inferencer_resource_config.local_graph_store_config.mode"
    assert "trainer's mode 'colocated'" in bad[0][1]
    vertex = {"vertex_ai_graph_store_trainer_config": {
        "mode": "colocated", "compute_pool": {"machine_type": "n1-standard-16"}}}
    bad = _problems(_resource(tmp_path, vertex))
    assert bad[0][0] == "trainer_resource_config.vertex_ai_graph_store_trainer_config.mode", bad
