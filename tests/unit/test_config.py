"""Tests of graphstore.config: every validation rule, overrides, derivations, round trips, the CLI.

Each test writes its YAML under tmp_path from a valid base config and one mutation, so a failing
test names exactly one rule.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable

import pytest
import yaml

from graphstore.config import (
    ConfigError, EdgeType, Problem, ResourceConfig, TaskConfig, load_config_pair,
    load_resource_config, load_task_config,
)
from graphstore.config import _fields as F
from graphstore.runtime.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

USER_BUYS_ITEM = {"srcNodeType": "user", "relation": "buys", "dstNodeType": "item"}
ITEM_SIM_ITEM = {"srcNodeType": "item", "relation": "similar_to", "dstNodeType": "item"}

BASE_TASK: dict[str, Any] = {
    "graphMetadata": {"nodeTypes": ["user", "item"], "edgeTypes": [USER_BUYS_ITEM, ITEM_SIM_ITEM]},
    "taskMetadata": {"nodeAnchorBasedLinkPredictionTaskMetadata": {
        "supervisionEdgeTypes": [USER_BUYS_ITEM]}},
    "datasetConfig": {
        "dataRootUri": "data",
        "dataSources": {
            "nodes": [{"nodeType": "user", "uri": "users.parquet", "idColumn": "user_id",
                       "featureColumns": ["f_0", "f_1"]}],
            "edges": [
                {"edgeType": USER_BUYS_ITEM, "uri": "user_item.parquet", "srcColumn": "user_id",
                 "dstColumn": "item_id", "weightColumn": "weight"},
                {"edgeType": ITEM_SIM_ITEM, "uri": "item_item.csv"},
            ],
        },
    },
    "trainerConfig": {
        "command": "python -m components.train",
        "trainerArgs": {"num_neighbors": [10, 5], "batch_size": 256, "lr": 0.01},
        "graphStoreStorageConfig": {"command": "python -m components.storage", "storageArgs": {
            "sample_edge_direction": "in",
            "splitter_cls_path": "graphstore.DistNodeAnchorLinkSplitter",
            "splitter_kwargs": {"sampling_direction": "in", "num_val": 0.1, "num_test": 0.1}}},
    },
    "inferencerConfig": {
        "command": "python -m components.infer",
        "graphStoreStorageConfig": {"command": "python -m components.storage",
                                    "storageArgs": {"sample_edge_direction": "in"}},
    },
}

LOCAL_STAGE = {"local_graph_store_config": {"num_storage_processes": 2, "num_compute_machines": 1,
                                            "compute_cluster_local_world_size": 2}}
BASE_RES: dict[str, Any] = {
    "shared_resource_config": {"resource_labels": {"team": "graph-ml"}},
    "trainer_resource_config": copy.deepcopy(LOCAL_STAGE),
    "inferencer_resource_config": copy.deepcopy(LOCAL_STAGE),
}

POOL_CPU = {"machine_type": "n2-highmem-32", "num_replicas": 4}
POOL_GPU = {"machine_type": "n1-standard-16", "gpu_type": "NVIDIA_TESLA_T4", "gpu_limit": 2,
            "num_replicas": 2}
VERTEX_RES: dict[str, Any] = {
    "shared_resource_config": {"common_compute_config": {"project": "my-project"}},
    "trainer_resource_config": {"vertex_ai_graph_store_trainer_config": {
        "graph_store_pool": POOL_CPU, "compute_pool": POOL_GPU}},
    "inferencer_resource_config": {"vertex_ai_graph_store_inferencer_config": {
        "graph_store_pool": POOL_CPU, "compute_pool": POOL_GPU, "compute_cluster_local_world_size": 1}},
}

Mutator = Callable[[dict[str, Any]], Any]


def fresh(data: dict[str, Any]) -> dict[str, Any]:
    """A deep copy that shares no sub-objects (copy.deepcopy keeps the base's shared edge types)."""
    return json.loads(json.dumps(data))


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def task_file(tmp_path: Path, mutate: Mutator | None = None, name: str = "task.yaml") -> Path:
    data = fresh(BASE_TASK)
    if mutate:
        mutate(data)
    return write(tmp_path / name, data)


def res_file(tmp_path: Path, mutate: Mutator | None = None, base: dict | None = None,
             name: str = "res.yaml") -> Path:
    data = fresh(base or BASE_RES)
    if mutate:
        mutate(data)
    return write(tmp_path / name, data)


def task_problems(tmp_path: Path, mutate: Mutator, overrides: tuple[str, ...] = ()) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        load_task_config(task_file(tmp_path, mutate), overrides)
    return list(exc.value.problems)


def res_problems(tmp_path: Path, mutate: Mutator, base: dict | None = None) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        load_resource_config(res_file(tmp_path, mutate, base))
    return list(exc.value.problems)


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, "\n".join(map(str, problems))
    return problems[0]


def storage_args(data: dict, stage: str = "trainerConfig") -> dict:
    return data[stage]["graphStoreStorageConfig"]["storageArgs"]


def splitter(data: dict) -> dict:
    return storage_args(data)["splitter_kwargs"]


# ---- the valid base ---------------------------------------------------------------------------

def test_base_task_loads_typed_and_frozen(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path))
    assert task.graph_metadata.node_types == ("user", "item")
    assert task.graph_metadata.edge_types[0] == EdgeType(src_node_type="user", relation="buys",
                                                         dst_node_type="item")
    assert task.supervision_edge_types == (EdgeType.parse("user__buys__item"),)
    assert isinstance(task.trainer.trainer_args, MappingProxyType)
    assert task.trainer.trainer_args["num_neighbors"] == (10, 5)
    with pytest.raises(TypeError):
        task.trainer.trainer_args["batch_size"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        task.trainer.command = "x"  # type: ignore[misc]
    assert task.dataset.edge_sources[1].format == "csv"
    assert task.dataset.edge_sources[1].src_column == "src"
    assert task.source_path == str(tmp_path / "task.yaml")
    assert task.export.warehouse == "local"


def test_edge_type_api() -> None:
    et = EdgeType(src_node_type="user", relation="buys", dst_node_type="item")
    assert et.as_tuple() == ("user", "buys", "item")
    assert str(et) == "user__buys__item"
    assert EdgeType.parse("user__buys__item") == et
    assert et.reverse() == EdgeType(src_node_type="item", relation="rev_buys", dst_node_type="user")
    assert et.reverse().reverse() == et
    same = EdgeType.parse("item__similar_to__item")
    assert same.reverse() == same  # graphlearn-for-pytorch's reverse_edge_type convention
    with pytest.raises(ValueError):
        EdgeType.parse("user__buys")
    with pytest.raises(ValueError):
        EdgeType(src_node_type="bad-name", relation="r", dst_node_type="x")


def test_config_error_is_a_usage_error_and_lists_one_problem_per_line() -> None:
    p1 = Problem(file="t.yaml", path="a.b", value="1", message="1 is bad")
    p2 = Problem(file="t.yaml", path="", value=None, message="YAML syntax error", line=3)
    err = ConfigError([p1, p2])
    assert isinstance(err, UsageError) and err.exit_code == 2
    assert str(err).splitlines()[1:] == ["t.yaml: a.b: 1 is bad", "t.yaml:3: YAML syntax error"]
    assert str(ConfigError([p1])) == "t.yaml: a.b: 1 is bad"


# ---- keys and types ---------------------------------------------------------------------------

def test_unknown_key_with_did_you_mean(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["graphMetadata"]["edgeType"] = d["graphMetadata"].pop("edgeTypes")
    problems = task_problems(tmp_path, mutate)
    unknown = [p for p in problems if p.path == "graphMetadata.edgeType"]
    assert unknown and "did you mean 'edgeTypes'?" in unknown[0].message
    assert any(p.path == "graphMetadata.edgeTypes" and "missing required key" in p.message
               for p in problems)


def test_unknown_key_without_close_match_lists_allowed(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["trainerConfig"].update(zzz=1)))
    assert p.path == "trainerConfig.zzz" and "allowed: command, trainerArgs" in p.message


def test_missing_required_key(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["trainerConfig"].pop("command")))
    assert p.path == "trainerConfig.command" and p.value is None
    assert "missing required key 'command'" in p.message


def test_null_means_default_or_missing(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["datasetConfig"]["partitionConfig"] = {"danglingEdges": None, "memoryLimitMb": None}
    task = load_task_config(task_file(tmp_path, mutate))
    assert (task.dataset.partition.dangling_edges, task.dataset.partition.memory_limit_mb) == ("error", 2048)
    p = only(task_problems(tmp_path, lambda d: d["trainerConfig"].update(command=None)))
    assert p.path == "trainerConfig.command" and "null" in p.message


def test_wrong_type(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["inferencerConfig"].update(inferenceBatchSize="big")))
    assert p.path == "inferencerConfig.inferenceBatchSize" and p.value == "'big'"
    assert "is not an integer" in p.message


def test_bool_is_not_an_int(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["datasetConfig"]["partitionConfig"] = {"memoryLimitMb": True}
    p = only(task_problems(tmp_path, mutate))
    assert p.path == "datasetConfig.partitionConfig.memoryLimitMb" and "boolean" in p.message


def test_coercers_int_float_bool() -> None:
    assert F.as_float(1) == 1.0 and isinstance(F.as_float(1), float)
    assert F.as_float("0.1") == 0.1
    assert F.as_int()("7") == 7
    assert F.as_bool("false") is False
    for coerce, bad in ((F.as_float, True), (F.as_int(), 1.5), (F.as_int(), "1.0"), (F.as_bool, 1)):
        with pytest.raises(F.Bad):
            coerce(bad)


def test_seed_string_forms_accepted(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        storage_args(d)["num_server_sessions"] = "1"
        splitter(d).update(num_val="0.1", should_convert_labels_to_edges="true")
        d["datasetConfig"]["partitionConfig"] = {"memoryLimitMb": "5000", "numPartitions": "2"}
    task = load_task_config(task_file(tmp_path, mutate))
    args = task.trainer.storage.storage_args
    assert args.num_server_sessions == 1
    assert args.splitter_kwargs["num_val"] == 0.1
    assert args.splitter_kwargs["should_convert_labels_to_edges"] is True
    assert task.dataset.partition.memory_limit_mb == 5000 and task.dataset.partition.num_partitions == 2


def test_splitter_kwargs_as_python_dict_literal_block(tmp_path: Path) -> None:
    text = task_file(tmp_path).read_text()
    seed_block = """splitter_kwargs: >-
        {
          "sampling_direction": "in",
          "should_convert_labels_to_edges": True,
          "num_val": 0.1,
          "num_test": 0.1
        }
      num_server_sessions: "1"
"""
    data = yaml.safe_load(text)
    del splitter(data)["num_val"]
    text = yaml.safe_dump(data, sort_keys=False)
    start = text.index("splitter_kwargs:")
    end = text.index("inferencerConfig:")
    text = text[:start] + seed_block + text[end:]
    task = load_task_config(write(tmp_path / "seed.yaml", text))
    kwargs = task.trainer.storage.storage_args.splitter_kwargs
    assert dict(kwargs) == {"sampling_direction": "in", "should_convert_labels_to_edges": True,
                            "num_val": 0.1, "num_test": 0.1}


@pytest.mark.parametrize("literal", ["{'num_val': 0.1", "__import__('os').system('true')", "[1, 2]"])
def test_splitter_kwargs_bad_literal_is_a_problem_not_evaluated(tmp_path: Path, literal: str) -> None:
    p = only(task_problems(tmp_path, lambda d: storage_args(d).update(splitter_kwargs=literal)))
    assert p.path.endswith("storageArgs.splitter_kwargs")


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["graphMetadata"]["edgeTypes"][1]["dstNodeType"] = "itm"
        d["trainerConfig"]["comand"] = d["trainerConfig"].pop("command")
        d["inferencerConfig"]["inferenceBatchSize"] = 0
        d["exportConfig"] = {"tablePrefix": "emb; DROP TABLE x"}
    with pytest.raises(ConfigError) as exc:
        load_task_config(task_file(tmp_path, mutate))
    paths = {p.path for p in exc.value.problems}
    assert len(exc.value.problems) >= 4
    assert {"graphMetadata.edgeTypes[1].dstNodeType", "trainerConfig.comand",
            "inferencerConfig.inferenceBatchSize", "exportConfig.tablePrefix"} <= paths
    expected = (f"{tmp_path / 'task.yaml'}: graphMetadata.edgeTypes[1].dstNodeType: "
                "'itm' is not a declared node type (did you mean 'item'?)")
    assert expected in str(exc.value).splitlines()


def test_duplicate_yaml_key_is_a_problem(tmp_path: Path) -> None:
    text = task_file(tmp_path).read_text() + "graphMetadata: {nodeTypes: [a]}\n"
    with pytest.raises(ConfigError) as exc:
        load_task_config(write(tmp_path / "dup.yaml", text))
    assert any("duplicate key 'graphMetadata'" in p.message and p.line for p in exc.value.problems)


def test_missing_file_and_yaml_syntax_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_task_config(tmp_path / "nope.yaml")
    assert str(exc.value) == f"{tmp_path / 'nope.yaml'}: file not found"
    bad = write(tmp_path / "bad.yaml", "graphMetadata:\n  nodeTypes: [a, b\n  edgeTypes: x: y\n")
    with pytest.raises(ConfigError) as exc:
        load_task_config(bad)
    p = only(list(exc.value.problems))
    assert p.file == str(bad) and p.line is not None and "YAML syntax error" in p.message
    assert str(p).startswith(f"{bad}:{p.line}: ")


# ---- names and declarations -------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["bad-name", "1st", "a__b", ""])
def test_invalid_names(tmp_path: Path, bad: str) -> None:
    problems = task_problems(tmp_path, lambda d: d["graphMetadata"]["edgeTypes"][1].update(relation=bad))
    assert any(p.path == "graphMetadata.edgeTypes[1].relation" for p in problems)


def test_duplicate_node_and_edge_types(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["graphMetadata"]["nodeTypes"].append("user")
        d["graphMetadata"]["edgeTypes"].append(dict(USER_BUYS_ITEM))
    problems = task_problems(tmp_path, mutate)
    assert {p.path for p in problems} == {"graphMetadata.nodeTypes[2]", "graphMetadata.edgeTypes[2]"}
    assert all("listed twice" in p.message for p in problems)


def test_edge_type_endpoint_must_be_declared(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["graphMetadata"]["edgeTypes"][1].update(dstNodeType="itm")))
    assert (p.path, p.value) == ("graphMetadata.edgeTypes[1].dstNodeType", "'itm'")
    assert p.message == "'itm' is not a declared node type (did you mean 'item'?)"


def test_supervision_edge_type_must_be_declared(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["supervisionEdgeTypes"] = [
            {"srcNodeType": "item", "relation": "buys", "dstNodeType": "user"}]
    p = only(task_problems(tmp_path, mutate))
    assert p.path.endswith("supervisionEdgeTypes[0]") and "not a declared edge type" in p.message


def test_node_source_type_must_be_declared(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path,
                           lambda d: d["datasetConfig"]["dataSources"]["nodes"][0].update(nodeType="usr")))
    assert p.path == "datasetConfig.dataSources.nodes[0].nodeType" and "did you mean 'user'" in p.message


def test_edge_source_type_must_be_declared(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["datasetConfig"]["dataSources"]["edges"].append(
            {"edgeType": {"srcNodeType": "item", "relation": "buys", "dstNodeType": "user"},
             "uri": "x.parquet"})
    p = only(task_problems(tmp_path, mutate))
    assert p.path == "datasetConfig.dataSources.edges[2].edgeType"
    assert "'item__buys__user' is not a declared edge type" in p.message


def test_every_declared_edge_type_needs_exactly_one_source(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["datasetConfig"]["dataSources"]["edges"].pop(1)))
    assert p.path == "datasetConfig.dataSources.edges" and "'item__similar_to__item'" in p.message

    def twice(d: dict) -> None:
        edges = d["datasetConfig"]["dataSources"]["edges"]
        edges.append(copy.deepcopy(edges[1]))
    p = only(task_problems(tmp_path, twice))
    assert p.path == "datasetConfig.dataSources.edges[2].edgeType" and "already has a source" in p.message


def test_at_most_one_node_source_per_node_type(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        nodes = d["datasetConfig"]["dataSources"]["nodes"]
        nodes.append(copy.deepcopy(nodes[0]))
    p = only(task_problems(tmp_path, mutate))
    assert p.path == "datasetConfig.dataSources.nodes[1].nodeType"


def test_node_sources_are_optional(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path, lambda d: d["datasetConfig"]["dataSources"].pop("nodes")))
    assert task.dataset.node_sources == ()


def test_inferencer_node_types_must_be_declared(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["inferencerConfig"].update(nodeTypes=["user", "iten"])))
    assert p.path == "inferencerConfig.nodeTypes[1]" and "did you mean 'item'" in p.message


# ---- storage args -----------------------------------------------------------------------------

def test_sample_edge_direction_must_match_between_stages(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        storage_args(d, "inferencerConfig")["sample_edge_direction"] = "out"
    p = only(task_problems(tmp_path, mutate))
    assert p.path == "inferencerConfig.graphStoreStorageConfig.storageArgs.sample_edge_direction"
    assert "'in'" in p.message


def test_splitter_sampling_direction_must_match(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: splitter(d).update(sampling_direction="out")))
    assert p.path.endswith("splitter_kwargs.sampling_direction")


@pytest.mark.parametrize("num_val,num_test,ok", [
    (0.5, 0.5, False), (0.6, 0.5, False), (1.5, 0.1, False), (-0.1, 0.1, False), (-1, 0.1, False),
    (0.3, 0.2, True), (100, 50, True), (0, 0.1, True), (True, 0.1, False),
])
def test_num_val_num_test(tmp_path: Path, num_val: Any, num_test: Any, ok: bool) -> None:
    path = task_file(tmp_path, lambda d: splitter(d).update(num_val=num_val, num_test=num_test))
    if ok:
        assert load_task_config(path).trainer.storage.storage_args.splitter_kwargs["num_val"] == num_val
    else:
        with pytest.raises(ConfigError):
            load_task_config(path)


def test_splitter_kwargs_need_a_splitter_class(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: storage_args(d).pop("splitter_cls_path")))
    assert p.path.endswith("storageArgs.splitter_kwargs") and "splitter_cls_path" in p.message


def test_num_server_sessions_derived(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path))
    assert task.trainer.storage.storage_args.num_server_sessions == 1
    assert task.inferencer.node_types == ("user", "item")
    assert task.inferencer.storage.storage_args.num_server_sessions == 2


def test_inference_node_types_default_follows_supervision(tmp_path: Path) -> None:
    def item_only(d: dict) -> None:
        d["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["supervisionEdgeTypes"] = [
            ITEM_SIM_ITEM]
    task = load_task_config(task_file(tmp_path, item_only))
    assert task.inferencer.node_types == ("item",)
    assert task.inferencer.storage.storage_args.num_server_sessions == 1
    task = load_task_config(task_file(tmp_path, lambda d: d.pop("taskMetadata")))
    assert task.supervision_edge_types == ()
    assert task.inferencer.node_types == ("user", "item")


@pytest.mark.parametrize("stage,value", [("trainerConfig", 2), ("inferencerConfig", 1)])
def test_num_server_sessions_contradicting_derivation(tmp_path: Path, stage: str, value: int) -> None:
    p = only(task_problems(tmp_path, lambda d: storage_args(d, stage).update(num_server_sessions=value)))
    assert p.path == f"{stage}.graphStoreStorageConfig.storageArgs.num_server_sessions"
    assert "contradicts the derived value" in p.message


def test_num_server_sessions_matching_derivation_is_fine(tmp_path: Path) -> None:
    load_task_config(task_file(tmp_path, lambda d: storage_args(d, "inferencerConfig").update(
        num_server_sessions=2)))


# ---- partition and export ---------------------------------------------------------------------

def test_partition_count_at_least_one(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: d["datasetConfig"].update(partitionConfig={"numPartitions": 0})))
    assert p.path == "datasetConfig.partitionConfig.numPartitions" and ">= 1" in p.message


def test_the_bigquery_engine_refuses_sources_that_are_not_bigquery_tables(tmp_path: Path) -> None:
    problems = task_problems(tmp_path, lambda d: d["datasetConfig"].update(
        partitionConfig={"engine": "bigquery"}))
    assert problems and all(p.path.startswith("datasetConfig.dataSources.") and
                            p.path.endswith(".uri") and "is not a bq:// table" in p.message
                            for p in problems)
    assert "datasetConfig.dataSources.edges[0].uri" in {p.path for p in problems}
    p = only(task_problems(tmp_path, lambda d: d["datasetConfig"].update(
        partitionConfig={"engine": "local", "bigquery": {"dataset": "my-scratch"}})))
    assert p.path == "datasetConfig.partitionConfig.bigquery.dataset"


def test_engine_auto_is_bigquery_for_bigquery_tables_into_gcs(tmp_path: Path) -> None:
    from graphstore.config import partition_engine

    def bq(d: dict) -> None:
        for kind in ("nodes", "edges"):
            for i, src in enumerate(d["datasetConfig"]["dataSources"][kind]):
                src["uri"] = f"bq://my-project.raw.{kind}_{i}"
    task = load_task_config(task_file(tmp_path, bq))
    assert partition_engine(task.dataset, "gs://b/run/shards") == "bigquery"
    assert partition_engine(task.dataset, str(tmp_path / "shards")) == "local"
    local = load_task_config(task_file(tmp_path, lambda d: None))
    assert partition_engine(local.dataset, "gs://b/run/shards") == "local"
    forced = load_task_config(task_file(tmp_path, lambda d: (bq(d), d["datasetConfig"].update(
        partitionConfig={"engine": "local"}))))
    assert partition_engine(forced.dataset, "gs://b/run/shards") == "local"


@pytest.mark.parametrize("limit", [0, 1, 127, 16 * 1024 * 1024 + 1, 10**30])
def test_memory_limit_out_of_range(tmp_path: Path, limit: int) -> None:
    """1 MB made DuckDB run out of memory and 10**30 failed DuckDB's parser, both after validate
    said ok; the range is checked at load (128 MB: measured on the tiny CSV dataset)."""
    p = only(task_problems(tmp_path, lambda d: d["datasetConfig"].update(
        partitionConfig={"memoryLimitMb": limit})))
    assert p.path == "datasetConfig.partitionConfig.memoryLimitMb"
    assert p.message == f"{limit} must be between 128 and 16777216 (MB)"
    for ok in (128, 16 * 1024 * 1024):  # both ends are in the range
        task = load_task_config(task_file(tmp_path, lambda d: d["datasetConfig"].update(
            partitionConfig={"memoryLimitMb": ok})))
        assert task.dataset.partition.memory_limit_mb == ok


def test_bigquery_dataset_from_export_or_resource(tmp_path: Path) -> None:
    """The dataset may come from the resource config's embedding_bq_dataset_name (the default);
    a pair giving neither is refused naming both keys; the task's own value wins."""
    def bq(d: dict) -> None:
        d["exportConfig"] = {"warehouse": "bigquery"}
    load_task_config(task_file(tmp_path, bq))  # alone: the resource config may give it
    with pytest.raises(ConfigError) as exc:
        load_config_pair(task_file(tmp_path, bq), res_file(tmp_path, base=VERTEX_RES))
    p = only(list(exc.value.problems))
    assert p.path == "exportConfig.bigqueryDataset" and "embedding_bq_dataset_name" in p.message

    def named(d: dict) -> None:
        d["shared_resource_config"]["common_compute_config"]["embedding_bq_dataset_name"] = "emb_r"
    res = res_file(tmp_path, named, base=VERTEX_RES)
    task, _ = load_config_pair(task_file(tmp_path, bq), res)
    assert task.export.bigquery_dataset == "emb_r" and "emb_r" in str(task.to_dict())  # frozen too
    task, _ = load_config_pair(task_file(tmp_path, lambda d: (bq(d), d["exportConfig"].update(
        bigqueryDataset="emb_t"))), res)
    assert task.export.bigquery_dataset == "emb_t"
    local, _ = load_config_pair(task_file(tmp_path), res)  # a local warehouse takes no dataset
    assert local.export.bigquery_dataset is None


@pytest.mark.parametrize("key,value", [("bigqueryDataset", "emb`; DROP TABLE x; --"),
                                       ("tablePrefix", "emb-1"), ("tablePrefix", "1emb")])
def test_sql_names_checked(tmp_path: Path, key: str, value: str) -> None:
    def mutate(d: dict) -> None:
        d["exportConfig"] = {"warehouse": "bigquery", "bigqueryDataset": "ok_ds", key: value}
    p = only(task_problems(tmp_path, mutate))
    assert p.path == f"exportConfig.{key}" and "BigQuery name" in p.message


def test_bigquery_project_from_export_or_resource(tmp_path: Path) -> None:
    def bq(d: dict) -> None:
        d["exportConfig"] = {"warehouse": "bigquery", "bigqueryDataset": "emb"}
    with pytest.raises(ConfigError) as exc:
        load_config_pair(task_file(tmp_path, bq), res_file(tmp_path))
    p = only(list(exc.value.problems))
    assert p.path == "exportConfig.bigqueryProject" and "shared_resource_config" in p.message
    task, res = load_config_pair(task_file(tmp_path, bq), res_file(tmp_path, base=VERTEX_RES))
    assert res.shared.project == "my-project"
    load_config_pair(task_file(tmp_path, lambda d: (bq(d), d["exportConfig"].update(
        bigqueryProject="other-project"))), res_file(tmp_path))


def test_num_partitions_must_match_storage_count(tmp_path: Path) -> None:
    task = task_file(tmp_path, lambda d: d["datasetConfig"].update(partitionConfig={"numPartitions": 3}))
    with pytest.raises(ConfigError) as exc:
        load_config_pair(task, res_file(tmp_path))
    assert only(list(exc.value.problems)).path == "datasetConfig.partitionConfig.numPartitions"


# ---- uris -------------------------------------------------------------------------------------

def test_relative_uris_resolve_against_data_root_and_file_folder(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path / "cfg"))
    root = tmp_path / "cfg" / "data"
    assert task.dataset.data_root_uri == str(root)
    assert task.dataset.node_sources[0].uri == str(root / "users.parquet")

    def no_root(d: dict) -> None:
        d["datasetConfig"].pop("dataRootUri")
        d["datasetConfig"]["dataSources"]["nodes"][0]["uri"] = "../t/users.parquet"
        d["datasetConfig"]["dataSources"]["edges"][0]["uri"] = "/abs/ui.parquet"
    task = load_task_config(task_file(tmp_path / "cfg", no_root))
    assert task.dataset.data_root_uri is None
    assert task.dataset.node_sources[0].uri == str(tmp_path / "t" / "users.parquet")
    assert task.dataset.edge_sources[0].uri == "/abs/ui.parquet"


def test_gs_uris_untouched(tmp_path: Path) -> None:
    def gs(d: dict) -> None:
        d["datasetConfig"]["dataRootUri"] = "gs://bucket/data/"
        d["datasetConfig"]["dataSources"]["edges"][1]["uri"] = "gs://other/ii.csv"
    task = load_task_config(task_file(tmp_path, gs))
    assert task.dataset.data_root_uri == "gs://bucket/data/"
    assert task.dataset.node_sources[0].uri == "gs://bucket/data/users.parquet"
    assert task.dataset.edge_sources[1].uri == "gs://other/ii.csv"


def test_format_inferred_or_explicit(tmp_path: Path) -> None:
    def folder(d: dict) -> None:
        d["datasetConfig"]["dataSources"]["nodes"][0]["uri"] = "users/"
    p = only(task_problems(tmp_path, folder))
    assert p.path == "datasetConfig.dataSources.nodes[0].uri" and "format" in p.message
    task = load_task_config(task_file(tmp_path, lambda d: (
        folder(d), d["datasetConfig"]["dataSources"]["nodes"][0].update(format="parquet"))))
    assert task.dataset.node_sources[0].format == "parquet"
    gz = load_task_config(task_file(tmp_path, lambda d: d["datasetConfig"]["dataSources"]["nodes"][0]
                                    .update(uri="users.csv.gz")))
    assert gz.dataset.node_sources[0].format == "csv"


# ---- overrides --------------------------------------------------------------------------------

def test_overrides_values_are_yaml_and_indexable(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path), overrides=(
        "trainerConfig.trainerArgs.lr=0.1",
        "trainerConfig.trainerArgs.num_neighbors=[4, 2]",
        "graphMetadata.edgeTypes[1].relation=alike",
        "datasetConfig.dataSources.edges[1].edgeType.relation=alike",
        "exportConfig.modelVersion=v2",
        "trainerConfig.trainerArgs.lr=0.2",  # later wins
    ))
    assert task.trainer.trainer_args["lr"] == 0.2
    assert task.trainer.trainer_args["num_neighbors"] == (4, 2)
    assert task.graph_metadata.edge_types[1].relation == "alike"
    assert task.export.model_version == "v2"


@pytest.mark.parametrize("override,needle", [
    ("graphMetadata.edgeTypes[5].relation=x", "out of range"),
    ("trainerConfig.command.sub=x", "not a mapping"),
    ("graphMetadata.nodeTypes.x=1", "not a mapping"),
    ("trainerConfig.trainerArgs.batch_size[0]=1", "not a list"),
    ("no_equals_sign", "key.path=value"),
    ("a..b=1", "malformed"),
])
def test_bad_override_is_a_problem_naming_it(tmp_path: Path, override: str, needle: str) -> None:
    p = only(task_problems(tmp_path, lambda d: None, overrides=(override,)))
    assert repr(override) in p.message and needle in p.message


def test_problem_caused_by_override_mentions_it(tmp_path: Path) -> None:
    p = only(task_problems(tmp_path, lambda d: None, overrides=("inferencerConfig.inferenceBatchSize=true",)))
    assert "set by override 'inferencerConfig.inferenceBatchSize=true'" in p.message


def test_pair_routes_overrides_by_top_level_key(tmp_path: Path) -> None:
    task, res = load_config_pair(task_file(tmp_path), res_file(tmp_path), overrides=(
        "trainerConfig.trainerArgs.lr=0.1",
        "trainer_resource_config.local_graph_store_config.compute_cluster_local_world_size=4",
    ))
    assert task.trainer.trainer_args["lr"] == 0.1
    assert res.trainer.procs_per_compute == 4
    with pytest.raises(ConfigError) as exc:
        load_config_pair(task_file(tmp_path), res_file(tmp_path),
                         overrides=("trainerConfg.trainerArgs.lr=0.1",))
    p = only(list(exc.value.problems))
    assert p.file == "<overrides>" and "did you mean 'trainerConfig'" in p.message


def test_pair_raises_one_error_for_both_files(tmp_path: Path) -> None:
    task = task_file(tmp_path, lambda d: d["trainerConfig"].pop("command"))
    res = res_file(tmp_path, lambda d: d["trainer_resource_config"]["local_graph_store_config"].update(
        num_compute_machines=0))
    with pytest.raises(ConfigError) as exc:
        load_config_pair(task, res)
    assert {p.file for p in exc.value.problems} == {str(task), str(res)}


# ---- resource config --------------------------------------------------------------------------

def test_local_resource(tmp_path: Path) -> None:
    res = load_resource_config(res_file(tmp_path))
    assert (res.trainer.kind, res.trainer.num_storage, res.trainer.num_compute_machines,
            res.trainer.procs_per_compute) == ("local", 2, 1, 2)
    assert res.num_partitions == 2 and res.trainer.vertex is None and res.trainer.local is not None
    assert res.shared.resource_labels == {"team": "graph-ml"}


def test_vertex_procs_per_compute_derivation(tmp_path: Path) -> None:
    res = load_resource_config(res_file(tmp_path, base=VERTEX_RES))
    assert (res.trainer.kind, res.trainer.num_storage, res.trainer.num_compute_machines) == ("vertex", 4, 2)
    assert res.trainer.procs_per_compute == 2      # gpu_limit
    assert res.inferencer.procs_per_compute == 1   # compute_cluster_local_world_size
    cpu = load_resource_config(res_file(tmp_path, lambda d: d["trainer_resource_config"][
        "vertex_ai_graph_store_trainer_config"].update(compute_pool={"machine_type": "n1-standard-8"}),
        base=VERTEX_RES))
    assert cpu.trainer.procs_per_compute == 1      # no GPU


@pytest.mark.parametrize("stage_value,needle", [({}, "neither"),
                                                (dict(LOCAL_STAGE, vertex_ai_graph_store_trainer_config={
                                                    "graph_store_pool": POOL_CPU, "compute_pool": POOL_GPU}),
                                                 "both")])
def test_exactly_one_of_vertex_or_local(tmp_path: Path, stage_value: dict, needle: str) -> None:
    p = only(res_problems(tmp_path, lambda d: d.update(trainer_resource_config=stage_value)))
    assert p.path == "trainer_resource_config" and needle in p.message


@pytest.mark.parametrize("key", ["num_compute_machines", "compute_cluster_local_world_size"])
def test_local_counts_at_least_one(tmp_path: Path, key: str) -> None:
    def mutate(d: dict) -> None:
        for stage in ("trainer_resource_config", "inferencer_resource_config"):
            d[stage]["local_graph_store_config"][key] = 0
    problems = res_problems(tmp_path, mutate)
    assert len(problems) == 2 and all(">= 1" in p.message for p in problems)


def test_zero_storage_processes_means_colocated(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        for stage in ("trainer_resource_config", "inferencer_resource_config"):
            d[stage]["local_graph_store_config"].update(num_storage_processes=0, num_compute_machines=3)
    res = load_resource_config(res_file(tmp_path, mutate))
    assert res.trainer.colocated and res.num_partitions == 3

    def negative(d: dict) -> None:
        for stage in ("trainer_resource_config", "inferencer_resource_config"):
            d[stage]["local_graph_store_config"]["num_storage_processes"] = -1
    problems = res_problems(tmp_path, negative)
    assert len(problems) == 2 and all(">= 0" in p.message for p in problems)


def test_vertex_replicas_at_least_one_and_gpu_consistency(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        cfg = d["trainer_resource_config"]["vertex_ai_graph_store_trainer_config"]
        cfg["graph_store_pool"] = {"machine_type": "n2-highmem-8", "num_replicas": 0}
        cfg["compute_pool"] = {"machine_type": "n1-standard-8", "gpu_limit": 2}
    paths = {p.path for p in res_problems(tmp_path, mutate, base=VERTEX_RES)}
    assert paths == {
        "trainer_resource_config.vertex_ai_graph_store_trainer_config.graph_store_pool.num_replicas",
        "trainer_resource_config.vertex_ai_graph_store_trainer_config.compute_pool.gpu_type"}


def test_pool_machine_type_disk_and_task_resources_are_checked(tmp_path: Path) -> None:
    """Issue 12 item 6: per-pool machine type and boot disk, partition/export task resources."""
    def mutate(d: dict) -> None:
        pool = d["trainer_resource_config"]["vertex_ai_graph_store_trainer_config"]["graph_store_pool"]
        pool.update(machine_type="n2-highmem-23", boot_disk_type="ssd", boot_disk_size_gb=50)
        d["partition_resource_config"] = {"cpu": 0, "memory_gb": 16}
        d["export_resource_config"] = {"cpu": 2, "memory_gb": 1000}
    problems = {p.path: p.message for p in res_problems(tmp_path, mutate, base=VERTEX_RES)}
    pool = "trainer_resource_config.vertex_ai_graph_store_trainer_config.graph_store_pool"
    assert problems == {
        f"{pool}.machine_type": "'n2-highmem-23' is not a machine type Vertex AI training offers that "
                                "we know (did you mean 'n2-highmem-2'? the list: "
                                "docs/configs.md#machine-types)",
        f"{pool}.boot_disk_type": "'ssd' is not one of 'pd-ssd', 'pd-standard', 'hyperdisk-balanced' "
                                  "(did you mean 'pd-ssd'?)",
        f"{pool}.boot_disk_size_gb": "50 must be between 100 and 64000 (GB)",
        "partition_resource_config.cpu": "0.0 must be > 0 and <= 96 vCPUs (Vertex AI Pipelines' "
                                         "largest task)",
        "export_resource_config.memory_gb": "1000 must be between 1 and 624 (GB)"}
    res = load_resource_config(str(REPO / "configs" / "resource_vertex.yaml"))
    pool_cfg = res.trainer.vertex.graph_store_pool
    assert (pool_cfg.boot_disk_type, pool_cfg.boot_disk_size_gb) == ("pd-ssd", 200)
    assert (res.partition_task.cpu, res.partition_task.memory_gb) == (6.0, 48)
    assert (res.export_task.cpu, res.export_task.memory_gb) == (3.0, 12)
    local = load_resource_config(res_file(tmp_path))  # defaults when the keys are absent
    assert (local.partition_task.cpu, local.partition_task.memory_gb) == (4.0, 16)
    assert (local.export_task.cpu, local.export_task.memory_gb) == (2.0, 8)


def test_storage_counts_must_be_equal(tmp_path: Path) -> None:
    p = only(res_problems(tmp_path, lambda d: d["inferencer_resource_config"][
        "local_graph_store_config"].update(num_storage_processes=3)))
    assert p.path == "inferencer_resource_config.local_graph_store_config.num_storage_processes"
    assert "trainer_resource_config.local_graph_store_config.num_storage_processes" in p.message


def test_stage_kinds_must_match(tmp_path: Path) -> None:
    p = only(res_problems(tmp_path, lambda d: d.update(
        inferencer_resource_config=BASE_RES["inferencer_resource_config"]), base=VERTEX_RES))
    assert p.path == "inferencer_resource_config"


def test_resource_unknown_key_and_bad_label(tmp_path: Path) -> None:
    def mutate(d: dict) -> None:
        d["shared_resource_config"]["resource_label"] = {}
        d["shared_resource_config"]["resource_labels"] = {"Team": "x"}
    problems = res_problems(tmp_path, mutate)
    assert any("did you mean 'resource_labels'" in p.message for p in problems)
    assert any(p.path == "shared_resource_config.resource_labels.Team" for p in problems)


# ---- round trips ------------------------------------------------------------------------------

def test_task_to_dict_round_trip_from_another_folder(tmp_path: Path) -> None:
    task = load_task_config(task_file(tmp_path / "a"), overrides=("exportConfig.localWarehouseUri=wh",))
    assert task.export.local_warehouse_uri == str(tmp_path / "a" / "wh")
    frozen = write(tmp_path / "b" / "c" / "frozen.yaml", task.to_dict())
    again = load_task_config(frozen)
    assert again == task
    assert again.to_dict() == task.to_dict()
    assert again.source_path != task.source_path


@pytest.mark.parametrize("base", [BASE_RES, VERTEX_RES])
def test_resource_to_dict_round_trip(tmp_path: Path, base: dict) -> None:
    res = load_resource_config(res_file(tmp_path, base=base))
    again = load_resource_config(write(tmp_path / "frozen.yaml", res.to_dict()))
    assert isinstance(again, ResourceConfig) and again == res


# ---- CLI and imports --------------------------------------------------------------------------

def test_task_config_type_is_exported() -> None:
    assert TaskConfig.model_config["frozen"]


def test_runtime_config_defaults_overrides_and_rules(tmp_path):
    from graphstore.config import RuntimeConfig

    tp = tmp_path / "t.yaml"
    base = yaml.safe_load(open(REPO / "configs" / "task_homo.yaml"))
    tp.write_text(yaml.safe_dump(base))
    assert load_task_config(str(tp)).runtime == RuntimeConfig()
    task = load_task_config(str(tp), overrides=("graphStoreRuntimeConfig.readinessTimeoutS=7",
                                                 "graphStoreRuntimeConfig.randomSeed=3"))
    assert task.runtime.readiness_timeout_s == 7.0 and task.runtime.random_seed == 3
    base["graphStoreRuntimeConfig"] = {"rpcTimeoutS": 0, "heartbeatIntervalS": 10,
                                       "heartbeatTimeoutS": 5, "readinessTimeoutZ": 1}
    tp.write_text(yaml.safe_dump(base))
    with pytest.raises(ConfigError) as err:
        load_task_config(str(tp))
    paths = {p.path for p in err.value.problems}
    assert {"graphStoreRuntimeConfig.rpcTimeoutS", "graphStoreRuntimeConfig.heartbeatTimeoutS",
            "graphStoreRuntimeConfig.readinessTimeoutZ"} <= paths
    assert "readinessTimeoutS" in str(err.value)  # did-you-mean
