"""Hard negatives when supervision gives them (issue 13 item 3), through the launcher in
graph-store mode with real processes: a generated graph with ``user -dislikes-> item`` as the
known negatives of ``user -buys-> item`` partitions them as labels only, storage serves them with
each split's anchors, the ABLP batches draw them and the loss uses them (their count is in the
log and in metrics.json), and the trained model infers; the dislikes never pass messages. A probe
compute command (hard_negative_probe.py) checks what the loader draws against the raw tables."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.training.checkpoint import read_checkpoint
from tests.integration.test_training import REPO, TRAINER_ARGS, _train

pytestmark = [pytest.mark.integration]

BUYS = {"srcNodeType": "user", "relation": "buys", "dstNodeType": "item"}
DISLIKES = {"srcNodeType": "user", "relation": "dislikes", "dstNodeType": "item"}
KEY = "user__buys__item"
PROBE = REPO / "tests" / "integration" / "hard_negative_probe.py"


def hard_negative_task(data: Path, trainer_args: dict) -> dict:
    """configs/task_hetero.yaml over ``data`` (generated with dislikes), with user -dislikes->
    item as the hard negatives of user -buys-> item."""
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["graphMetadata"]["edgeTypes"].append(DISLIKES)
    task["datasetConfig"]["dataSources"]["edges"].append(
        {"edgeType": DISLIKES, "uri": "user_dislikes_item.parquet", "srcColumn": "user_id",
         "dstColumn": "item_id"})
    task["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["hardNegativeEdgeTypes"] = [
        {"supervisionEdgeType": BUYS, "negativeEdgeType": DISLIKES}]
    task["trainerConfig"]["trainerArgs"] = trainer_args
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 15,
                                       "readinessTimeoutS": 120, "rpcTimeoutS": 120}
    return task


@pytest.mark.timeout(900)
def test_hard_negatives_reach_the_loss_and_the_model_infers(tmp_path):
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("small", kind="hetero", seed=1, num_dislikes_per_user=4),
                     str(data))
    args = {**TRAINER_ARGS, "max_steps": 60, "val_every_steps": 30, "hard_negatives_per_anchor": 3,
            "baselines": ["popularity"]}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(hard_negative_task(data, args)))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    manifest = ShardSet.open(str(run / "shards")).manifest
    dislikes = manifest.edge_types["user__dislikes__item"]
    rows = pq.read_metadata(data / "user_dislikes_item.parquet").num_rows
    assert dislikes.negative_of == KEY and dislikes.count == 0  # labels only: no graph edge
    assert sum(dislikes.labels_per_partition) == rows > 0
    assert "item__rev_dislikes__user" not in manifest.edge_types  # and no reverse type

    out = _train(tp, rp, run)
    counts = [int(line.split(f"hard_negatives.{KEY}=")[1].split()[0]) for line in out.splitlines()
              if f"hard_negatives.{KEY}=" in line]
    assert counts and all(c > 0 for c in counts), out[-3000:]
    metrics = json.loads((run / "checkpoint" / "metrics.json").read_text())
    hard = metrics["hard_negatives"][KEY]
    # every batch of 32 pairs has ~30 distinct users, each with 4 dislikes of which it draws 3
    assert hard["per_anchor"] == 3 and hard["drawn_rank0"] == counts[-1]  # the log's running total
    assert 32 <= hard["per_step_rank0"] <= 3 * 32, hard
    assert [h["step"] for h in metrics["val_history"]] == [30]
    assert metrics["test"]["model"]["mrr"] > metrics["test"]["popularity"]["mrr"], metrics["test"]
    ckpt = read_checkpoint(str(run / "checkpoint" / "model.pt"), fix="-")
    relations = {et[1] for et in ckpt.model_config.edge_types}
    assert relations == {"buys", "rev_buys", "similar_to"}, relations  # dislikes pass no message

    infer_out = _train(tp, rp, run, stage="infer")
    assert "Traceback" not in infer_out
    for nt in ("user", "item"):
        marker = json.loads((run / "embeddings" / nt / "_SUCCESS").read_text())
        assert marker["count"] == manifest.node_types[nt].count, (nt, marker)


def _dense_dislikes(data: Path, shards: ShardSet) -> set[tuple[int, int]]:
    """The raw dislikes table as dense (user, item) id pairs, through the shards' id maps."""
    table = pq.read_table(data / "user_dislikes_item.parquet")
    pairs = []
    for col, nt in (("user_id", "user"), ("item_id", "item")):
        ids = shards.id_map(nt)
        order = np.argsort(ids.column("raw_id").to_numpy(zero_copy_only=False))
        raw = ids.column("raw_id").to_numpy(zero_copy_only=False)[order]
        dense = ids.column("int_id").to_numpy()[order]
        pairs.append(dense[np.searchsorted(raw, table.column(col).to_numpy(zero_copy_only=False))])
    return set(zip(pairs[0].tolist(), pairs[1].tolist()))


@pytest.mark.timeout(600)
def test_each_batch_draws_only_its_anchors_own_hard_negatives(tmp_path):
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=3, num_dislikes_per_user=5),
                     str(data))
    task = hard_negative_task(data, {})
    task["trainerConfig"]["command"] = f"python {PROBE}"
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    dislikes = _dense_dislikes(data, ShardSet.open(str(run / "shards")))
    per_user = Counter(u for u, _ in dislikes)
    _train(tp, rp, run)
    records = [torch.load(p) for p in sorted((run / "probe").glob("rank*.pt"))]
    assert len(records) == 2  # 1 compute machine x 2 processes
    anchors = {"train": set(), "val": set()}
    drawn = 0
    for rec in records:
        k = rec["per_anchor"]
        for split, parts in rec["inputs"].items():  # each split's anchors with all their dislikes
            for anchor_nodes, _, neg in parts.values():
                mine = set(anchor_nodes.tolist())
                anchors[split] |= mine
                assert sorted(map(tuple, neg.T.tolist())) == sorted(p for p in dislikes if p[0] in mine)
        for pos, neg in rec["batches"]:
            pairs = list(map(tuple, neg.T.tolist()))
            assert set(pairs) <= dislikes and len(pairs) == len(set(pairs)), pairs
            assert set(neg[0].tolist()) <= set(pos[0].tolist())  # only the batch's anchors draw
            got = Counter(neg[0].tolist())
            assert {a: got[a] for a in set(pos[0].tolist())} == \
                {a: min(k, per_user[a]) for a in set(pos[0].tolist())}
            drawn += len(pairs)
    assert drawn > 0 and anchors["train"] and anchors["val"]
    assert not anchors["train"] & anchors["val"]  # node split: negatives follow their anchor


@pytest.mark.timeout(600)
def test_colocated_training_uses_them_too(tmp_path):
    """Colocated mode (2 compute machines, no storage): the same inputs through GLT's in-process
    producer, which batches the ABLP input by ``len`` / ``[index]`` as the storage's workers do."""
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=1, num_dislikes_per_user=4),
                     str(data))
    args = {**TRAINER_ARGS, "batch_size": 16, "num_random_negatives": 16, "max_steps": 20,
            "val_every_steps": 1000, "hard_negatives_per_anchor": 2, "baselines": []}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(hard_negative_task(data, args)))
    rp.write_text((REPO / "configs" / "resource_local_colocated.yaml").read_text())
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    _train(tp, rp, run)
    hard = json.loads((run / "checkpoint" / "metrics.json").read_text())["hard_negatives"][KEY]
    assert hard["per_anchor"] == 2 and 16 <= hard["per_step_rank0"] <= 2 * 16, hard
