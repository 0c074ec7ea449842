"""Every file in configs/ validates: each task_*.yaml with each resource_*.yaml, and round-trips."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair, load_resource_config, load_task_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TASKS = sorted(CONFIGS.glob("task_*.yaml"))
RESOURCES = sorted(CONFIGS.glob("resource_*.yaml"))
# task_vertex.yaml exports to BigQuery with the dataset and project of resource_vertex.yaml;
# a task with hardNegativeEdgeTypes is refused with a replicated trainer (not supported there yet)
PAIRS = [(t, r) for t, r in itertools.product(TASKS, RESOURCES)
         if (t.stem != "task_vertex" or r.stem == "resource_vertex")
         and not ("hardNegativeEdgeTypes" in t.read_text() and "replicated" in r.stem)]


def test_configs_dir_has_examples() -> None:
    names = {p.name for p in TASKS + RESOURCES}
    assert {"task_hetero.yaml", "task_homo.yaml", "task_vertex.yaml", "resource_local.yaml",
            "resource_vertex.yaml"} <= names
    assert set(CONFIGS.glob("*.yaml")) == set(TASKS + RESOURCES), "unpaired file in configs/"


@pytest.mark.parametrize("task_path,res_path", PAIRS, ids=lambda p: p.stem)
def test_pair_validates(task_path: Path, res_path: Path) -> None:
    task, res = load_config_pair(task_path, res_path)
    assert task.graph_metadata.edge_types and res.num_partitions >= 1


@pytest.mark.parametrize("task_path", TASKS, ids=lambda p: p.stem)
def test_task_round_trips(task_path: Path, tmp_path: Path) -> None:
    task = load_task_config(task_path)
    frozen = tmp_path / "frozen.yaml"
    frozen.write_text(yaml.safe_dump(task.to_dict(), sort_keys=False))
    assert load_task_config(frozen) == task


@pytest.mark.parametrize("res_path", RESOURCES, ids=lambda p: p.stem)
def test_resource_round_trips(res_path: Path, tmp_path: Path) -> None:
    res = load_resource_config(res_path)
    frozen = tmp_path / "frozen.yaml"
    frozen.write_text(yaml.safe_dump(res.to_dict(), sort_keys=False))
    assert load_resource_config(frozen) == res


def test_example_shapes() -> None:
    hetero = load_task_config(CONFIGS / "task_hetero.yaml")
    assert hetero.graph_metadata.node_types == ("user", "item")
    assert [str(e) for e in hetero.graph_metadata.edge_types] == ["user__buys__item",
                                                                  "item__similar_to__item"]
    assert hetero.dataset.data_root_uri == str(CONFIGS.parent / ".data" / "default")
    assert hetero.dataset.edge_sources[0].weight_column == "weight"
    assert hetero.dataset.node_sources[0].feature_columns == tuple(f"f_{i}" for i in range(16))
    homo = load_task_config(CONFIGS / "task_homo.yaml")
    assert homo.graph_metadata.is_homogeneous
    assert homo.dataset.data_root_uri == str(CONFIGS.parent / ".data" / "homo")
    local = load_resource_config(CONFIGS / "resource_local.yaml")
    assert (local.trainer.num_storage, local.trainer.num_compute_machines,
            local.trainer.procs_per_compute) == (2, 1, 2)
