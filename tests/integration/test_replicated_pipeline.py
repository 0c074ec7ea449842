"""``python -m pipeline run`` in replicated mode: partition (shards, then the graph files) ->
train -> infer -> export on this machine, the graph stages on an embedded Ray (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest
import yaml

from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.modes.replicated.graph_file import GraphFile

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]
TRAINER_ARGS = {"num_neighbors": [5, 3], "batch_size": 32, "num_random_negatives": 32,
                "max_steps": 10, "val_every_steps": 1000, "log_every_steps": 5,
                "eval_candidates": 50, "hidden_dim": 16, "out_dim": 16,
                "baselines": ["popularity"]}


@pytest.mark.timeout(1500)
def test_pipeline_run_in_replicated_mode_end_to_end(tmp_path):
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=5), str(tmp_path / "data"))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp_path / "data")
    task["trainerConfig"]["trainerArgs"] = TRAINER_ARGS
    tp = tmp_path / "task.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp = REPO / "configs" / "resource_local_replicated.yaml"
    root = tmp_path / "runs"
    before = {p.name for p in Path(tempfile.gettempdir()).glob("graphstore-ray-*")}
    out = subprocess.run([sys.executable, "-m", "pipeline", "run", "--task-config", str(tp),
                          "--resource-config", str(rp), "--run-root", str(root), "--run-id", "r1"],
                         cwd=REPO, capture_output=True, text=True, timeout=1400)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    run = root / "r1"
    partition = json.loads((run / "_stages" / "partition.json").read_text())
    graph = GraphFile.open(str(run / "graph" / "graph.bin"), verify=True)
    assert partition["graph_files"]["graph_file_bytes"] == (run / "graph" / "graph.bin").stat().st_size
    assert graph.views == ("full", "train")  # the trainer's splitter made the train view
    train = json.loads((run / "_stages" / "train.json").read_text())
    assert train["status"] == "ok" and train["metrics"]["model"]["mrr"] > 0
    con = duckdb.connect(str(root / "warehouse" / "warehouse.duckdb"), read_only=True)
    try:
        for nt, n in graph.metadata.node_counts.items():
            assert con.execute(f"SELECT count(*), count(DISTINCT node_id) FROM embeddings_{nt}"
                               ).fetchall() == [(n, n)]
    finally:
        con.close()
    assert "run r1: partition, train, infer, export in" in out.stdout
    assert "top-5 of embeddings_item for user" in out.stdout
    # the launcher reports (and ends) processes a stage left behind: replicated stages leave none
    logs = "".join(p.read_text() for p in (run / "logs").rglob("*.log"))
    assert "left behind" not in out.stdout + out.stderr + logs
    assert {p.name for p in Path(tempfile.gettempdir()).glob("graphstore-ray-*")} <= before
