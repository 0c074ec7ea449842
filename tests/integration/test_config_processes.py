"""Tests of graphstore.config: every validation rule, overrides, derivations, round trips, the CLI:
the tests that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_config.py: unit tests start no process."""

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
from tests.unit.test_config import (  # noqa: F401 (fixtures among them)
    REPO,
    res_file,
    task_file,
    write,
)

pytestmark = [pytest.mark.integration]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_cli_validate_ok(tmp_path: Path) -> None:
    out = run_cli("validate", "--task-config", str(task_file(tmp_path)),
                  "--resource-config", str(res_file(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok: 2 node types, 2 edge types, 1 supervision edge type, "
                                 "2 partitions, trainer local 2 storage x 1x2 compute")


def test_cli_validate_print_dumps_loadable_yaml(tmp_path: Path) -> None:
    out = run_cli("validate", "--task-config", str(task_file(tmp_path)),
                  "--resource-config", str(res_file(tmp_path)), "--print",
                  "--set", "trainerConfig.trainerArgs.lr=0.5")
    assert out.returncode == 0, out.stderr
    task_doc, res_doc = yaml.safe_load_all(out.stdout)
    assert task_doc["trainerConfig"]["trainerArgs"]["lr"] == 0.5
    assert load_task_config(write(tmp_path / "p" / "t.yaml", task_doc)).trainer.trainer_args["lr"] == 0.5
    assert load_resource_config(write(tmp_path / "p" / "r.yaml", res_doc)).num_partitions == 2
    assert "ok: " in out.stderr


def test_cli_validate_problems_exit_2(tmp_path: Path) -> None:
    task = task_file(tmp_path, lambda d: d["graphMetadata"]["edgeTypes"][1].update(dstNodeType="itm"))
    out = run_cli("validate", "--task-config", str(task), "--resource-config", str(res_file(tmp_path)),
                  "--set", "inferencerConfig.inferenceBatchSize=0", "--set", "bogus.key=1")
    assert out.returncode == 2
    assert out.stdout == ""
    assert "3 config problems" in out.stderr
    assert f"{task}: graphMetadata.edgeTypes[1].dstNodeType: 'itm' is not a declared node type" in out.stderr
    assert "inferencerConfig.inferenceBatchSize: 0 must be >= 1" in out.stderr
    assert "<overrides>: bogus: bad override 'bogus.key=1'" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run_cli("validate", "--task-config", "x.yaml").returncode == 2
    missing = run_cli("validate", "--task-config", str(tmp_path / "nope.yaml"),
                      "--resource-config", str(res_file(tmp_path)))
    assert missing.returncode == 2 and "nope.yaml: file not found" in missing.stderr


def test_config_and_pipeline_never_import_torch() -> None:
    code = ("import sys, pipeline.__main__ as m, graphstore.config; m.build_parser(); "
            "bad = sorted(k for k in sys.modules if k.split('.')[0] in "
            "('torch', 'torch_geometric', 'graphlearn_torch')); "
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
