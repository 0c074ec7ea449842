"""The default trainer's options (issue 13 item 3) through the launcher, with real processes: id
embeddings, dropout, a cosine schedule with warm-up and early stopping train, checkpoint the best
validation's weights and infer; an id-embedding type over the size limit is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.shards.reader import ShardSet
from graphstore.training.checkpoint import read_checkpoint
from tests.integration.test_training import REPO, TRAINER_ARGS, _setup, _train

pytestmark = [pytest.mark.integration]

OPTIONS = {"id_embeddings": ["user", "item"], "dropout": 0.1, "lr_schedule": "cosine",
           "warmup_steps": 10, "early_stopping_patience": 2, "weight_decay": 0.01,
           "baselines": ["popularity"]}


@pytest.mark.timeout(900)
def test_options_train_keep_the_best_checkpoint_and_infer(tmp_path):
    args = {**TRAINER_ARGS, **OPTIONS, "max_steps": 100, "val_every_steps": 20}
    tp, rp, run = _setup(tmp_path, args)
    out = _train(tp, rp, run)
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    vals = [(h["step"], h["model"]["mrr"]) for h in metrics["val_history"]]
    stop = metrics["early_stopping"]
    best_step, best_mrr = max(vals, key=lambda v: (v[1], -v[0]))  # the first of the highest
    assert (stop["best_step"], stop["best_val_mrr"]) == (best_step, best_mrr), (vals, stop)
    if stop["stopped_early"]:  # two validations after the best, none better
        assert metrics["steps"] == vals[-1][0] < 100 and [s for s, _ in vals][-3] == best_step
        assert "early stop at step=" in out
    else:
        assert vals[-1][0] == metrics["steps"] == 100  # the end was validated too
    assert metrics["test"]["model"]["mrr"] > metrics["test"]["popularity"]["mrr"], metrics["test"]
    ckpt = read_checkpoint(str(run / "checkpoint" / "model.pt"), fix="-")
    manifest = ShardSet.open(str(run / "shards")).manifest
    for nt in ("user", "item"):
        assert ckpt.state_dict[f"id_emb.{nt}.weight"].shape == (manifest.node_types[nt].count, 32)
    assert ckpt.model_config.dropout == 0.1
    assert ckpt.model_config.id_embedding_counts == {
        "user": manifest.node_types["user"].count, "item": manifest.node_types["item"].count}
    # the inferencer rebuilds the model with its id embeddings from the checkpoint
    infer_out = _train(tp, rp, run, stage="infer")
    assert "Traceback" not in infer_out
    for nt in ("user", "item"):
        marker = json.loads((run / "embeddings" / nt / "_SUCCESS").read_text())
        assert marker["count"] == manifest.node_types[nt].count, (nt, marker)


@pytest.mark.timeout(300)
def test_an_id_embedding_type_over_the_limit_is_one_line_exit_2(tmp_path):
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=1), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"] = {**TRAINER_ARGS, "max_steps": 2, "batch_size": 4,
                                            "num_random_negatives": 4, "baselines": [],
                                            "id_embeddings": ["item", "user"],
                                            "id_embedding_max_nodes": 10}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(task))
    one = {"local_graph_store_config": {"num_storage_processes": 0, "num_compute_machines": 1,
                                        "compute_cluster_local_world_size": 1}}
    rp.write_text(yaml.safe_dump({"trainer_resource_config": one, "inferencer_resource_config": one}))
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=1, output_uri=str(run / "shards"))
    count = ShardSet.open(str(run / "shards")).manifest.node_types["item"].count
    assert count > 10
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "200"],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    lines = [line for line in out.splitlines()
             if f"node type 'item' has {count} nodes" in line and "id_embedding_max_nodes=10" in line]
    assert lines, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    assert not (run / "checkpoint" / "model.pt").exists()
