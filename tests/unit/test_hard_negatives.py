"""Hard negatives when supervision gives them (issue 13 item 3), piece by piece: the config key
and its refusals, the partitioner (labels only, placed by source, on both paths), storage (split
with their anchors' positives, served with each split's anchors), the draw rules of a batch, the
ABLP loader's input (what GLT's producers call), the loss mask, and the generator's dislikes.
The whole path through the launcher: tests/integration/test_hard_negatives.py."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from graphstore.config import ConfigError, EdgeType, load_config_pair, load_task_config
from graphstore.config.default_args import TrainerArgs
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import UsageError
from graphstore.dataset.hard_negatives import NEGATIVE, POSITIVE, AnchorNegatives, batch_rows
from graphstore.formats.shards.reader import ShardSet
from graphstore.training.losses import (
    accidental_hit_mask, candidate_scores, hard_negative_mask, retrieval_loss,
)
from tests.shard_sets import ranks
from tests.unit.test_partition import SQL_ONLY, make_raw, run_partition, task_dict, write_configs

BUYS = {"srcNodeType": "user", "relation": "buys", "dstNodeType": "item"}
DISLIKES = {"srcNodeType": "user", "relation": "dislikes", "dstNodeType": "item"}
SUP, NEG = EdgeType.parse("user__buys__item"), EdgeType.parse("user__dislikes__item")
KEY = "taskMetadata.nodeAnchorBasedLinkPredictionTaskMetadata.hardNegativeEdgeTypes"


def with_dislikes(task: dict, raw: Path, rows: int = 150, seed: int = 3) -> set[tuple[str, int]]:
    """Add user -dislikes-> item (a raw table under ``raw``) as the hard negatives of buys;
    returns the raw (user, item) pairs written."""
    users = sorted({u for u in pq.read_table(raw / "users.parquet").column("user_id").to_pylist()})
    items = pq.read_table(raw / "items.parquet").column("item_id").to_pylist()
    rng = np.random.default_rng(seed)
    pairs = {(users[i], items[j]) for i, j in zip(rng.integers(0, len(users), rows),
                                                  rng.integers(0, len(items), rows))}
    pq.write_table(pa.table({"user_id": [u for u, _ in sorted(pairs)],
                             "item_id": pa.array([i for _, i in sorted(pairs)], pa.int64())}),
                   raw / "dislikes.parquet")
    task["graphMetadata"]["edgeTypes"].append(DISLIKES)
    task["datasetConfig"]["dataSources"]["edges"].append(
        {"edgeType": DISLIKES, "uri": "dislikes.parquet", "srcColumn": "user_id", "dstColumn": "item_id"})
    task["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["hardNegativeEdgeTypes"] = [
        {"supervisionEdgeType": BUYS, "negativeEdgeType": DISLIKES}]
    return pairs


# -- the config key ---------------------------------------------------------------------------------
def _problems(tmp_path: Path, change) -> list:
    make_raw(tmp_path / "raw")
    task = task_dict(tmp_path / "raw")
    with_dislikes(task, tmp_path / "raw")
    change(task)
    tp, _ = write_configs(tmp_path, task)
    with pytest.raises(ConfigError) as exc:
        load_task_config(str(tp))
    return [(p.path, p.message) for p in exc.value.problems]


def _entry(task: dict) -> dict:
    return task["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"]["hardNegativeEdgeTypes"][0]


@pytest.mark.parametrize("change,where,why", [
    (lambda t: _entry(t).update(supervisionEdgeType={**BUYS, "relation": "similar_to",
                                                     "srcNodeType": "item"}),
     f"{KEY}[0].supervisionEdgeType", "is not listed in supervisionEdgeTypes"),
    (lambda t: _entry(t).update(negativeEdgeType={"srcNodeType": "item", "relation": "similar_to",
                                                  "dstNodeType": "item"}),
     f"{KEY}[0].negativeEdgeType", "must join the same node types as user__buys__item"),
    (lambda t: _entry(t).update(negativeEdgeType=BUYS),
     f"{KEY}[0].negativeEdgeType", "is a supervision edge type"),
    (lambda t: _entry(t).update(negativeEdgeType={**DISLIKES, "relation": "hates"}),
     f"{KEY}[0].negativeEdgeType", "is not a declared edge type (graphMetadata.edgeTypes)"),
    (lambda t: t["taskMetadata"]["nodeAnchorBasedLinkPredictionTaskMetadata"][
        "hardNegativeEdgeTypes"].append(dict(_entry(t))),
     f"{KEY}[1].supervisionEdgeType", "is listed twice"),
    (lambda t: t["datasetConfig"]["dataSources"]["edges"][-1].update(weightColumn="w"),
     "datasetConfig.dataSources.edges[2].weightColumn", "holds hard negatives"),
])
def test_each_bad_entry_is_refused_naming_its_key(tmp_path, change, where, why):
    problems = _problems(tmp_path, change)
    assert any(path == where and why in msg for path, msg in problems), problems


# -- the partitioner and storage ------------------------------------------------------------------
@pytest.fixture(params=["memory", "sql"])
def shards(request, tmp_path) -> tuple[ShardSet, set, dict]:
    """Shards (3 partitions, ``in`` sampling) of a graph with dislikes, on either path."""
    make_raw(tmp_path / "raw")
    task = task_dict(tmp_path / "raw")
    pairs = with_dislikes(task, tmp_path / "raw")
    run_partition(tmp_path, task, tmp_path / "shards", num_partitions=3,
                  tuning=SQL_ONLY if request.param == "sql" else None)
    return ShardSet.open(str(tmp_path / "shards")), pairs, task


def _raw(shards: ShardSet, src: np.ndarray, dst: np.ndarray) -> list[tuple[str, int]]:
    users = shards.id_map("user").column("raw_id").to_pylist()
    items = shards.id_map("item").column("raw_id").to_pylist()
    return [(users[a], items[b]) for a, b in zip(src.tolist(), dst.tolist())]


def test_negatives_are_labels_only_placed_by_source_and_no_edge_type_of_the_graph(shards):
    shards, pairs, _ = shards
    m = shards.manifest
    info = m.edge_types[str(NEG)]
    assert info.negative_of == str(SUP) and not info.is_supervision
    assert info.count == 0 and info.counts_per_partition == (0, 0, 0)  # never a graph edge
    assert "item__rev_dislikes__user" not in m.edge_types and "item__rev_buys__user" in m.edge_types
    got = []
    for p in range(3):
        data = shards.load_partition(p)
        lab = data.labels[str(NEG)]
        lo, hi = m.node_bounds("user")[p:p + 2]  # placed by source, the anchor (edges: by dst)
        assert ((lab.src >= lo) & (lab.src < hi)).all()
        assert len(data.edges[str(NEG)].src) == 0
        got += _raw(shards, lab.src, lab.dst)
    assert Counter(got) == Counter(pairs) and sum(info.labels_per_partition) == len(pairs)
    meta = DatasetMetadata.from_manifest(m, has_splits=False)
    assert NEG not in meta.edge_types and meta.hard_negative_edge_types == {SUP: NEG}
    assert pickle.loads(pickle.dumps(meta)) == meta


@pytest.mark.parametrize("splitter", ["graphstore.DistNodeAnchorLinkSplitter",
                                      "graphstore.DistEdgeLinkSplitter"])
def test_storage_splits_negatives_with_their_anchors_and_serves_them(shards, splitter):
    from graphstore.config import StorageArgs
    from graphstore.dataset.splitter import SPLIT_CODE, DistEdgeLinkSplitter
    from graphstore.dataset import queries
    from graphstore.dataset.partition_graph import build_storage_dataset

    shards, pairs, _ = shards
    args = StorageArgs.model_validate({"sample_edge_direction": "in", "splitter_cls_path": splitter,
                                       "splitter_kwargs": {"num_val": 0.3, "num_test": 0.3}})
    served = []
    for p in range(3):
        ds, state = build_storage_dataset(shards, p, args, "in")
        assert ("user", "dislikes", "item") not in ds.get_edge_types()  # no message passing
        neg = state.negatives[SUP]
        for split in ("train", "val", "test"):
            got = queries.ablp_input(state, split, 0, 1, SUP)
            anchors = set(got.anchor_nodes.tolist())
            negs = got.negative_labels[SUP.as_tuple()]
            assert set(negs[0].tolist()) <= anchors and (negs[0].diff() >= 0).all()
            src, dst = neg.anchor_src.numpy(), neg.label_dst.numpy()
            rows = np.isin(src, list(anchors))
            if splitter.endswith("EdgeLinkSplitter"):  # per edge: the negative's own hash
                want = DistEdgeLinkSplitter(num_val=0.3, num_test=0.3).assign_edges(  # of ranks
                    str(NEG), ranks(shards, "user")[src], ranks(shards, "item")[dst], len(pairs))
                rows &= want == SPLIT_CODE[split]
            assert sorted(map(tuple, negs.T.tolist())) == sorted(
                zip(src[rows].tolist(), dst[rows].tolist()))
            served += _raw(shards, negs[0].numpy(), negs[1].numpy())
    if splitter.endswith("NodeAnchorLinkSplitter"):  # anchors without a positive have none
        buyers = {u for p in range(3) for u in shards.load_partition(p).labels[str(SUP)].src}
        users = shards.id_map("user").column("raw_id").to_pylist()
        pairs = {(u, i) for u, i in pairs if users.index(u) in buyers}
    assert len(served) == len(set(served)) and set(served) <= pairs
    assert len(served) > 0.5 * len(pairs)


def test_the_raw_table_estimate_counts_them_as_labels_like_the_manifest(shards, tmp_path):
    from graphstore.planning.sizing import TableCounts, loads_from_manifest, loads_from_tables
    from graphstore.io.table_rows import count_rows

    shards, pairs, _ = shards
    cfg = load_task_config(str(tmp_path / "task.yaml"))  # what the fixture partitioned with
    counts = TableCounts(nodes={s.node_type: count_rows(s.uri, s.format)
                                for s in cfg.dataset.node_sources},
                         edges={str(s.edge_type): count_rows(s.uri, s.format)
                                for s in cfg.dataset.edge_sources})
    exact = loads_from_manifest(shards.manifest)
    estimate = loads_from_tables(cfg, 3, counts)
    for field in ("edges", "labels"):  # the dislikes: labels only, no edges (rounded up per part)
        assert 0 <= sum(getattr(e, field) for e in estimate) - sum(getattr(x, field) for x in exact) <= 3
    assert sum(x.labels for x in exact) == counts.edges[str(SUP)] + len(pairs)


# -- what a batch draws ------------------------------------------------------------------------------
NEGS = AnchorNegatives.from_pairs(torch.tensor([[5, 1, 1, 1, 9, 5, 1], [50, 10, 11, 12, 90, 51, 13]]))


def test_anchor_negatives_group_by_anchor():
    assert NEGS.anchors.tolist() == [1, 5, 9] and NEGS.indptr.tolist() == [0, 4, 6, 7]
    assert NEGS.nodes.tolist() == [10, 11, 12, 13, 50, 51, 90] and len(NEGS) == 7
    with pytest.raises(ValueError, match=r"\[2, N\]"):
        AnchorNegatives.from_pairs(torch.zeros(3, 2, dtype=torch.long))


def test_each_distinct_anchor_draws_up_to_k_distinct_own_negatives_uniformly():
    rng = np.random.default_rng(0)
    a, n = NEGS.draw(torch.tensor([5, 1, 7, 1, 5]), 2, rng)  # 7 has none, 1 and 5 twice: once each
    assert a.tolist() == [1, 1, 5, 5] and set(n[:2].tolist()) < {10, 11, 12, 13}
    assert sorted(n[2:].tolist()) == [50, 51]  # k or fewer: all of them
    seen = Counter(x for _ in range(4000) for x in NEGS.draw(torch.tensor([1]), 1, rng)[1].tolist())
    assert set(seen) == {10, 11, 12, 13} and min(seen.values()) > 850  # ~1000 each
    assert [t.numel() for t in NEGS.draw(torch.tensor([7]), 3, rng)] == [0, 0]
    assert [t.numel() for t in NEGS.draw(torch.tensor([1]), 0, rng)] == [0, 0]


def test_batch_rows_are_the_pairs_then_the_drawn_negatives():
    row, col, label = batch_rows(torch.tensor([1, 9]), torch.tensor([3, 4]), NEGS, 3,
                                 np.random.default_rng(1))
    assert row.tolist()[:2] == [1, 9] and col.tolist()[:2] == [3, 4]
    assert label.tolist() == [POSITIVE] * 2 + [NEGATIVE] * 4
    assert row.tolist()[2:] == [1, 1, 1, 9] and col.tolist()[-1] == 90


def test_the_loader_input_batches_by_pairs_and_draws_anew_in_each_process():
    from graphstore.dataset.glt_adapter import HardNegativeEdgeInput, LabeledEdgeInput

    x = HardNegativeEdgeInput(torch.tensor([1, 5, 9, 1]), torch.tensor([2, 3, 4, 6]),
                              ("user", "buys", "item"), NEGS, 2, seed=7)
    assert len(x) == 4  # GLT's producers cut batches by len(): pairs, as without negatives
    batch = x[torch.tensor([0, 2])]
    assert type(batch) is LabeledEdgeInput and batch.input_type == ("user", "buys", "item")
    assert batch.row.tolist()[:2] == [1, 9] and batch.label.tolist() == [1, 1, 0, 0, 0]
    sent = pickle.loads(pickle.dumps(x.share_memory()))  # as it travels to a sampling process
    assert sent._rng is None and len(sent) == 4
    fresh = HardNegativeEdgeInput(x.row, x.col, x.input_type, NEGS, 2, seed=7)
    assert torch.equal(sent[torch.tensor([0])].col, fresh[torch.tensor([0])].col)  # seeded


def test_trainer_arg_default_and_loader_refusals():
    assert TrainerArgs().hard_negatives_per_anchor == 4
    with pytest.raises(UsageError, match="hard_negatives_per_anchor: -1 is not an int >= 0"):
        TrainerArgs.from_mapping({"hard_negatives_per_anchor": -1})


# -- the loss ---------------------------------------------------------------------------------------
def test_a_hard_negative_counts_only_for_its_own_anchors_rows():
    anchors, pos = torch.tensor([1, 2, 1]), torch.tensor([10, 20, 11])
    hard_anchor, hard = torch.tensor([1, 2, 1]), torch.tensor([30, 31, 11])  # 11: a positive of 1
    mask = hard_negative_mask(anchors, pos, hard_anchor, hard)
    assert mask.tolist() == [[False, True, True], [True, False, True], [False, True, True]]
    emb = torch.eye(4)
    a = emb[[0, 1, 0]]
    p = emb[[2, 3, 2]] * 0.5
    h = torch.stack([emb[0] * 5, emb[1] * 5, emb[0]])  # a hard negative scoring high for anchor 1

    def loss_of(h_rows: list[int]) -> torch.Tensor:
        hh = h[h_rows]
        scores = candidate_scores(a, p, hh)
        m = torch.cat([accidental_hit_mask(anchors, pos, torch.empty(0, dtype=torch.long)),
                       hard_negative_mask(anchors, pos, hard_anchor[h_rows], hard[h_rows])], 1)
        return torch.nn.functional.cross_entropy(scores.masked_fill(m, -1e9), torch.arange(3),
                                                 reduction="none")

    base, with_first = loss_of([]), loss_of([0])
    assert with_first[0] > base[0] + 1 and with_first[2] > base[2] + 1  # anchor 1's rows only
    assert torch.isclose(with_first[1], base[1])
    assert torch.allclose(loss_of([2]), base)  # the accidental hit is no negative
    assert torch.isclose(retrieval_loss(candidate_scores(a, p, h[[0]]), torch.cat(
        [accidental_hit_mask(anchors, pos, torch.empty(0, dtype=torch.long)),
         hard_negative_mask(anchors, pos, hard_anchor[[0]], hard[[0]])], 1)), with_first.mean())


# -- the generator's dislikes -----------------------------------------------------------------------
def test_generated_dislikes_are_only_when_asked_never_bought_and_from_other_communities(tmp_path):
    spec = DatasetSpec.from_preset("tiny", kind="hetero", seed=2)
    plain = generate_dataset(spec, tmp_path / "plain")
    asked = generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=2,
                                                     num_dislikes_per_user=3), tmp_path / "asked")
    assert "user__dislikes__item" not in plain["edge_types"] and "num_dislikes_per_user" not in plain
    assert not (tmp_path / "plain" / "user_dislikes_item.parquet").exists()
    for name in ("users", "items", "user_item", "item_item"):  # byte-identical with or without
        assert (tmp_path / "plain" / f"{name}.parquet").read_bytes() == \
            (tmp_path / "asked" / f"{name}.parquet").read_bytes()
    dl = pq.read_table(tmp_path / "asked" / "user_dislikes_item.parquet").to_pylist()
    buys = {(r["user_id"], r["item_id"]) for r in pq.read_table(tmp_path / "asked" / "user_item.parquet")
            .to_pylist()}
    pairs = [(r["user_id"], r["item_id"]) for r in dl]
    assert asked["edge_types"]["user__dislikes__item"]["count"] == len(pairs) == len(set(pairs))
    assert not set(pairs) & buys
    per_user = Counter(u for u, _ in pairs)
    assert max(per_user.values()) == 3 and len(per_user) == spec.num_users
    comm = {nt: {r[col]: r["community"] for r in pq.read_table(
        tmp_path / "asked" / f"truth/communities_{nt}.parquet").to_pylist()}
        for nt, col in (("user", "user_id"), ("item", "item_id"))}
    assert all(comm["user"][u] != comm["item"][i] for u, i in pairs)
    with pytest.raises(UsageError, match="num_dislikes_per_user"):
        DatasetSpec.from_preset("tiny", kind="homo", num_dislikes_per_user=1)
