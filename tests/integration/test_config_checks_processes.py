"""Checks that ``python -m pipeline validate`` and every stage's config loading share: the default
trainer's / inferencer's args (graphstore.config.default_args), node types nothing can number, and
the partition CLI's ``--num-partitions`` (the same check as ``numPartitions`` in the config): the
tests that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_config_checks.py: unit tests start no process."""

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

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=ENV)


def _validate(tmp_path: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    task, res = task_file(tmp_path), write(tmp_path / "res.yaml", fresh(BASE_RES))
    return _run("pipeline", "validate", "--task-config", str(task), "--resource-config", str(res),
                *(a for s in sets for a in ("--set", s)))


def test_validate_exits_2_listing_both_stages_args(tmp_path: Path) -> None:
    out = _validate(tmp_path, "trainerConfig.trainerArgs.num_neighbors=[-5, 2]",
                    "inferencerConfig.inferencerArgs.num_neighbors=[]")
    assert out.returncode == 2, out.stdout
    task = tmp_path / "task.yaml"
    assert out.stderr.splitlines() == [
        "pipeline: error: 2 config problems:",
        f"{task}: trainerConfig.trainerArgs.num_neighbors: [-5, 2] is not a non-empty list of ints "
        ">= -1 (set by override 'trainerConfig.trainerArgs.num_neighbors=[-5, 2]')",
        f"{task}: inferencerConfig.inferencerArgs.num_neighbors: [] is not a non-empty list of ints "
        ">= -1 (set by override 'inferencerConfig.inferencerArgs.num_neighbors=[]')",
    ]


@pytest.mark.parametrize("flag,why", [
    ("0", "0 must be >= 1"),
    ("3", "3 differs from the resource config's storage count 2 (one partition per storage "
          "process); remove it or make them equal"),
])
def test_partition_cli_num_partitions_goes_through_the_config_check(tmp_path: Path, flag: str,
                                                                      why: str) -> None:
    make_raw(tmp_path / "raw")
    tp, rp = write_configs(tmp_path, task_dict(tmp_path / "raw"))
    out = _run("components.partition", "--task-config", str(tp), "--resource-config", str(rp),
               "--output", str(tmp_path / "shards"), "--num-partitions", flag)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (f"components.partition: error: {tp}: datasetConfig.partitionConfig."
                                  f"numPartitions: {why} (set by --num-partitions {flag})")
    assert not (tmp_path / "shards").exists()
    ok = _run("components.partition", "--task-config", str(tp), "--resource-config", str(rp),
              "--output", str(tmp_path / "shards"), "--num-partitions", "2")
    assert ok.returncode == 0, ok.stderr
