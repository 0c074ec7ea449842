"""Checks that ``python -m pipeline validate`` and every stage's config loading share: the default
trainer's / inferencer's args (graphstore.config.default_args), node types nothing can number, and the
partition CLI's ``--num-partitions`` (the same check as ``numPartitions`` in the config)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphstore.config import ConfigError, load_task_config
from graphstore.runtime.errors import UsageError
from graphstore.config import default_args as training_args

from tests.unit.test_config import BASE_RES, fresh, only, task_file, write
from tests.unit.test_partition import make_raw, task_dict, write_configs

# ---- default trainer / inferencer args --------------------------------------------------------

BAD_NUM_NEIGHBORS = ["[-5, 2]", "[]", "abc", "[1.5]", "[true]"]


@pytest.mark.parametrize("value", BAD_NUM_NEIGHBORS)
@pytest.mark.parametrize("section,args_key", [("trainerConfig", "trainerArgs"),
                                               ("inferencerConfig", "inferencerArgs")])
def test_bad_num_neighbors_rejected_at_load(tmp_path: Path, section: str, args_key: str,
                                            value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_task_config(task_file(tmp_path), overrides=(f"{section}.{args_key}.num_neighbors={value}",))
    p = only(list(exc.value.problems))
    assert p.path == f"{section}.{args_key}.num_neighbors"
    assert "is not a non-empty list of ints >= -1 (set by override" in p.message
    # another command's args stay free-form: only the default commands' args have rules here
    task = load_task_config(task_file(tmp_path), overrides=(
        f"{section}.command=python -m my_team.compute", f"{section}.{args_key}.num_neighbors={value}",
        f"{section}.{args_key}.opt={{lr: 0.1}}"))
    assert getattr(task, "trainer" if section == "trainerConfig" else "inferencer").command.endswith("my_team.compute")


def test_every_bad_arg_reported_at_once_with_did_you_mean(tmp_path: Path) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["trainerConfig"]["trainerArgs"] = {"num_neighbors": [-2], "batch_sise": 8, "decoder": "l2",
                                             "lr": "fast", "max_steps": 0}
        d["inferencerConfig"]["inferencerArgs"] = {"checkpoint": 5, "log_every": 3}
    with pytest.raises(ConfigError) as exc:
        load_task_config(task_file(tmp_path, mutate))
    got = {p.path: p.message for p in exc.value.problems}
    assert got == {
        "trainerConfig.trainerArgs.num_neighbors": "[-2] is not a non-empty list of ints >= -1",
        "trainerConfig.trainerArgs.batch_sise":
            "unknown key 'batch_sise' of the default components.train arguments (did you mean 'batch_size'?)",
        "trainerConfig.trainerArgs.decoder": "'l2' is not one of 'dot', 'cosine'",
        "trainerConfig.trainerArgs.lr": "'fast' is not a finite number >= 0",
        "trainerConfig.trainerArgs.max_steps": "0 is not an int >= 1",
        "inferencerConfig.inferencerArgs.checkpoint": "5 is not a str",
        "inferencerConfig.inferencerArgs.log_every":
            "unknown key 'log_every' of the default components.infer arguments "
            "(did you mean 'log_every_batches'?)",
    }


def test_default_command_recognised_in_any_spelling() -> None:
    runs_module = training_args.runs_module
    assert runs_module("python -m components.train", "components.train")
    assert runs_module("/usr/bin/python3 -u -m components.train --x 1", "components.train")
    assert not runs_module("python -m components.training", "components.train")
    assert not runs_module("python -m 'unclosed", "components.train")


def test_stage_parsing_uses_the_same_rules() -> None:
    TrainerArgs, InferencerArgs = training_args.TrainerArgs, training_args.InferencerArgs
    with pytest.raises(UsageError, match=r"^trainerConfig\.trainerArgs\.num_neighbors: \[\] is not a "
                                         r"non-empty list of ints >= -1$"):
        TrainerArgs.from_mapping({"num_neighbors": []})
    with pytest.raises(UsageError, match=r"inferencerConfig\.inferencerArgs\.num_neighbors: 'abc'"):
        InferencerArgs.from_mapping({"num_neighbors": "abc"})
    assert TrainerArgs.from_mapping({"num_neighbors": (4, -1), "lr": 1}).lr == 1.0
    assert InferencerArgs.from_mapping({"num_neighbors": None}).num_neighbors is None


# ---- node types ---------------------------------------------------------------------------------

def _problems(tmp_path: Path, mutate) -> list:
    with pytest.raises(ConfigError) as exc:
        load_task_config(task_file(tmp_path, mutate))
    return list(exc.value.problems)


def test_node_type_with_no_table_and_no_edge_type(tmp_path: Path) -> None:
    p = only(_problems(tmp_path, lambda d: d["graphMetadata"]["nodeTypes"].append("ghost")))
    assert p.path == "graphMetadata.nodeTypes[2]"
    assert p.message == ("'ghost' has no node table (datasetConfig.dataSources.nodes) and is an end of "
                         "no edge type (graphMetadata.edgeTypes); give it a node table or remove it")

    def with_table(d: dict[str, Any]) -> None:  # a node table is enough, even with no edge type
        d["graphMetadata"]["nodeTypes"].append("tag")
        d["datasetConfig"]["dataSources"]["nodes"].append(
            {"nodeType": "tag", "uri": "tags.parquet", "idColumn": "tag_id"})
    assert load_task_config(task_file(tmp_path, with_table)).graph_metadata.node_types[-1] == "tag"


# ---- the partition CLI's --num-partitions -------------------------------------------------------
