"""The default trainer in graph-store mode on a tiny planted graph (real processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.training.candidates import fingerprint, sample_candidates
from graphstore.training.checkpoint import read_checkpoint
from tests.integration.test_report_browser import check_report_renders
from tests.tensorboard_events import read_scalars

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]

TRAINER_ARGS = {"num_neighbors": [5, 3], "batch_size": 32, "num_random_negatives": 64,
                "max_steps": 200, "val_every_steps": 80, "log_every_steps": 10,
                "eval_candidates": 100, "hidden_dim": 32, "out_dim": 32, "lr": 0.01}


def _setup(tmp: Path, trainer_args: dict, splitter: str | None = None) -> tuple[Path, Path, Path]:
    data = tmp / "data"
    generate_dataset(DatasetSpec.from_preset("small", kind="hetero", seed=1), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"] = trainer_args
    if splitter:
        task["trainerConfig"]["graphStoreStorageConfig"]["storageArgs"]["splitter_cls_path"] = splitter
    # two supervision edge types, trained together (the second anchors on items)
    task["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["supervisionEdgeTypes"] = [
        {"srcNodeType": "user", "relation": "buys", "dstNodeType": "item"},
        {"srcNodeType": "item", "relation": "similar_to", "dstNodeType": "item"}]
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 15,
                                       "readinessTimeoutS": 120, "rpcTimeoutS": 120}
    tp, rp, run = tmp / "task.yaml", tmp / "res.yaml", tmp / "run"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    return tp, rp, run


def _train(tp: Path, rp: Path, run: Path, stage: str = "train") -> str:
    out = run.parent / f"{stage}.out"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", stage, "--run-dir", str(run), "--timeout-s", "600"],
        cwd=REPO, stdout=out.open("w"), stderr=subprocess.STDOUT, timeout=700)
    text = out.read_text()
    assert proc.returncode == 0, text[-5000:]
    return text


def _candidate_fingerprint(run: Path, node_type: str, count: int, seed: int = 0) -> str:
    """The fingerprint of the candidate set the evaluation must have drawn."""
    n = ShardSet.open(str(run / "shards")).manifest.node_types[node_type].count
    return fingerprint(sample_candidates(n, count, seed))


OPTIONS = {"id_embeddings": ["item"], "dropout": 0.1, "lr_schedule": "cosine", "warmup_steps": 10,
           "early_stopping_patience": 2, "weight_decay": 0.01}
"""The default trainer's options (issue 13 item 3), through the launcher in the same run: an id
embedding type, dropout, a cosine schedule with warm-up, weight decay and early stopping (which
validates the end too and keeps the best validation's weights; its stopping rule is unit-tested
in tests/unit/test_trainer_options.py)."""


@pytest.mark.timeout(900)
def test_graph_store_training_learns_validates_and_embeds(tmp_path):
    """One graph-store run carries the trainer's options too (it replaced a second 100-step run
    of the same graph: ~180 s of CI)."""
    tp, rp, run = _setup(tmp_path, {**TRAINER_ARGS, **OPTIONS, "tensorboard": True})
    out = _train(tp, rp, run)
    losses = [float(line.split("loss=")[1].split()[0]) for line in out.splitlines() if " loss=" in line]
    assert len(losses) >= 5 and sum(losses[-2:]) / 2 < 0.9 * sum(losses[:2]) / 2, losses
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    # validation at 80 and 160 through the same loaders (iterated again), and (early stopping
    # on) at the last step; patience 2 cannot stop before it
    vals = [(h["step"], h["model"]["mrr"]) for h in metrics["val_history"]]
    assert [s for s, _ in vals] == [80, 160, 200]
    assert metrics["steps"] == 200
    stop = metrics["early_stopping"]
    best_step, best_mrr = max(vals, key=lambda v: (v[1], -v[0]))  # the first of the highest
    assert (stop["best_step"], stop["best_val_mrr"], stop["stopped_early"]) == \
        (best_step, best_mrr, False), (vals, stop)
    ckpt = read_checkpoint(str(run / "checkpoint" / "model.pt"), fix="-")
    item_count = ShardSet.open(str(run / "shards")).manifest.node_types["item"].count
    assert ckpt.state_dict["id_emb.item.weight"].shape == (item_count, 32)
    assert not any(k.startswith("id_emb.user") for k in ckpt.state_dict)
    assert ckpt.model_config.dropout == 0.1
    assert ckpt.model_config.id_embedding_counts == {"item": item_count}
    # random ranking among ~100 candidates gives MRR ~0.05; validation is well above it
    assert metrics["val_history"][-1]["model"]["mrr"] > 0.12, metrics["val_history"]
    # per type: train + val + test pair loaders, negatives + candidates (one set for val and test)
    # + every item for the test's full ranking (100 candidates are not all of them)
    assert out.count("ablp loader ready") == 6 and out.count("nbr loader ready") == 6, out[-3000:]
    test = metrics["test"]
    # random ranking among ~100 candidates gives MRR ~0.05
    assert test["model"]["mrr"] > 0.15, test
    assert test["model"]["count"] > 100
    by_type = test["by_supervision_edge_type"]
    assert set(by_type) == {"user__buys__item", "item__similar_to__item"}
    for key, result in by_type.items():  # full ranking over every item, well above random
        full = result["full_ranking"]
        assert full["k"] == 20 and full["labels"] == item_count, (key, full)
        assert full["model"]["count"] > 50, (key, full)
        assert full["model"]["recall@20"] > 3 * 20 / item_count, (key, full)
        assert set(full) == {"k", "labels", "model", *metrics["baselines"]}, full
    assert by_type["user__buys__item"]["model"] == test["model"]
    similar = by_type["item__similar_to__item"]
    assert similar["model"]["count"] > 50 and similar["model"]["mrr"] > similar["popularity"]["mrr"]
    assert (run / "checkpoint" / "model.pt").exists()
    # every baseline on the same uniform candidates as the model, its settings stated
    for key, result in by_type.items():
        assert {"model", "popularity", "bpr", "lightgcn"} <= set(result), result
        assert result["candidates_per_pair"] == 100
        assert result["candidates"] == _candidate_fingerprint(run, "item", 100)
        assert all(result[w]["count"] == result["model"]["count"] for w in ("bpr", "lightgcn"))
    # the node split: every test anchor of a type has no training pair of that type (the GLT
    # sampler's batches gave item -similar_to-> item less than 1.0 here)
    assert by_type["user__buys__item"]["cold_anchor_share"] == 1.0
    assert by_type["item__similar_to__item"]["cold_anchor_share"] == 1.0
    for name in ("bpr", "lightgcn"):
        info = metrics["baselines"][name]
        assert info["dim"] == 64 and info["epochs_run"] == {k: info["epochs"] for k in by_type}
    assert metrics["val_history"][0]["bpr"]["count"] > 0
    # the loss curve, timings and wait share; the same loss values as TensorBoard scalars
    assert [r["step"] for r in metrics["loss_history"]] == list(range(10, 201, 10))
    assert {"join cluster", "baselines", "training steps", "validation", "test"} <= set(metrics["timings_s"])
    assert 0 < metrics["wait_share"] < 1
    scalars = read_scalars(run / "tensorboard")
    assert [s for s, _ in scalars["train/loss"]] == list(range(10, 201, 10))
    # TensorBoard stores float32: compare at float32's precision (rounding both to 3 decimals once
    # failed in CI on 6.3625, which rounds differently in float32 and float64)
    assert [v for _, v in scalars["train/loss"]] == \
        pytest.approx([r["loss"] for r in metrics["loss_history"]], rel=1e-6)
    assert [s for s, _ in scalars["val/user__buys__item/model/mrr"]] == [80, 160, 200]
    assert [s for s, _ in scalars["test/item__similar_to__item/lightgcn/mrr"]] == [200]
    # the run report, opened in a real browser
    assert "report written: " + str(run / "report" / "report.html") in out
    check_report_renders(run / "report" / "report.html", tmp_path / "report-graph-store.png",
                         ("loss", "validation", "comparison", "wait_share", "timings", "embeddings"))
    md = (run / "report" / "report.md").read_text()
    assert "| lightgcn |" in md and "cold anchors 100.0%" in md
    # inference: one session per node type, every node exactly once, into a new attempt folder;
    # files of earlier attempts (a killed one, and the flat files of schema 1) removed after
    stale = run / "embeddings" / "user" / "part-00007-of-00009.parquet"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"stale")
    stale_attempt = run / "embeddings" / "user" / "attempt-20200101T000000Z-0000abcd"
    stale_attempt.mkdir()
    (stale_attempt / "part-00000-of-00002.parquet").write_bytes(b"stale")
    out3 = _train(tp, rp, run, stage="infer")  # the model rebuilt with its id embeddings
    assert "infer session 2/2: node type item finished" in out3 and "Traceback" not in out3
    manifest = ShardSet.open(str(run / "shards")).manifest
    for node_type in ("user", "item"):
        folder = run / "embeddings" / node_type
        marker = json.loads((folder / "_SUCCESS").read_text())
        expected = manifest.node_types[node_type].count
        (attempt,) = [p.name for p in folder.iterdir() if p.is_dir()]
        assert sorted(str(p.relative_to(folder)) for p in folder.rglob("part-*")) == \
            marker["files"] == [f"{attempt}/part-00000-of-00002.parquet",
                                f"{attempt}/part-00001-of-00002.parquet"]
        table = pq.read_table([str(folder / f) for f in marker["files"]])
        ids = table.column("int_id").to_numpy()
        assert marker["count"] == len(ids) == expected and len(np.unique(ids)) == expected
        assert ids.min() == 0 and ids.max() == expected - 1
        emb = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
        assert emb.shape == (expected, 32) and np.isfinite(emb).all() and emb.std() > 0


@pytest.mark.timeout(900)
def test_colocated_training_resumes_and_infers_through_the_launcher(tmp_path):
    """Colocated, with the per-edge (warm-start) splitter: the graph-store test uses the node one."""
    args = {**TRAINER_ARGS, "max_steps": 20, "val_every_steps": 10, "log_every_steps": 5}
    tp, rp, run = _setup(tmp_path, args, splitter="graphstore.DistEdgeLinkSplitter")
    rp.write_text((REPO / "configs" / "resource_local_colocated.yaml").read_text())
    out = _train(tp, rp, run)
    assert "launch: stage train ok: 2 processes (0 storage, 2 compute)" in out, out[-2000:]
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    assert [h["step"] for h in metrics["val_history"]] == [10]
    buys = metrics["test"]["by_supervision_edge_type"]["user__buys__item"]
    # the same candidates as graph-store mode draws: 100 uniform ones from both partitions
    assert buys["candidates_per_pair"] == 100
    assert buys["candidates"] == _candidate_fingerprint(run, "item", 100)
    assert buys["model"]["mrr"] > buys["popularity"]["mrr"]
    # per-edge split: every evaluated user has training pairs, so the embedding baselines learn
    assert buys["cold_anchor_share"] == 0.0
    assert min(buys["bpr"]["mrr"], buys["lightgcn"]["mrr"]) > 0.1, buys  # random: ~0.05
    assert (run / "report" / "report.html").exists() and not (run / "tensorboard").exists()
    # a second run with more steps resumes from step 20 instead of starting over (the checkpoint
    # logic is the same in both modes; colocated sessions start faster)
    task = yaml.safe_load(tp.read_text())
    task["trainerConfig"]["trainerArgs"]["max_steps"] = 25
    tp.write_text(yaml.safe_dump(task))
    out2 = _train(tp, rp, run)
    assert "resuming from" in out2 and "at step=20" in out2, out2[-2000:]
    metrics2 = json.loads((run / "checkpoint" / "metrics.json").read_text())
    assert metrics2["steps"] == 25 and metrics2["test"] != metrics["test"]
    _train(tp, rp, run, stage="infer")
    manifest = ShardSet.open(str(run / "shards")).manifest
    for node_type in ("user", "item"):
        folder = run / "embeddings" / node_type
        files = json.loads((folder / "_SUCCESS").read_text())["files"]
        table = pq.read_table([str(folder / f) for f in files])
        ids = table.column("int_id").to_numpy()
        expected = manifest.node_types[node_type].count
        assert len(ids) == len(np.unique(ids)) == expected


class CreatesAFile:
    """Unpickling this runs ``open(path, "w")``: the file appears."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.timeout(300)
def test_a_checkpoint_that_would_run_code_is_refused_in_one_line(tmp_path):
    """The resume path of the real trainer (1 colocated compute process, through the launcher):
    a ``model.pt`` in the run's checkpoint folder that runs code when unpickled is refused (the
    trainer exits 2) with one line naming it, and nothing of it runs."""
    import torch

    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=1), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"] = {**TRAINER_ARGS, "max_steps": 2, "val_every_steps": 10,
                                            "batch_size": 4, "num_random_negatives": 4}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(task))
    one = {"local_graph_store_config": {"num_storage_processes": 0, "num_compute_machines": 1,
                                        "compute_cluster_local_world_size": 1}}
    rp.write_text(yaml.safe_dump({"trainer_resource_config": one, "inferencer_resource_config": one}))
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=1, output_uri=str(run / "shards"))
    marker = tmp_path / "pwned"
    (run / "checkpoint").mkdir(parents=True)
    torch.save({"schema_version": 2, "state_dict": CreatesAFile(marker)},
               run / "checkpoint" / "model.pt")
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "200"],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]  # the launcher passes the trainer's usage error on
    assert "failed first with exit code 2" in out, out[-4000:]
    assert not marker.exists()
    errors = [line for line in out.splitlines()
              if "refused to load" in line and str(run / "checkpoint" / "model.pt") in line]
    assert errors and "train from scratch" in errors[0], out[-4000:]
    assert "Traceback" not in out, out[-4000:]
