"""The user-style example (examples/graph_store_training.py) runs as a graph-store trainer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(600)
def test_user_style_example_trains_through_the_launcher(tmp_path):
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=2), str(tmp_path / "data"))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp_path / "data")
    task["trainerConfig"]["command"] = "python -m examples.graph_store_training"
    task["trainerConfig"]["trainerArgs"] = {"max_steps": 8}
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 15,
                                       "rpcTimeoutS": 120}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "400"],
        cwd=REPO, capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((run / "example_result.json").read_text())
    assert result["world_size"] == 2 and result["steps"] == 8
    assert all(loss == loss and loss > 0 for loss in result["losses"])  # finite, positive
    assert "example: 8 steps" in proc.stdout
