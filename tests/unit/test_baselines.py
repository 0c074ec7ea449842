"""The baselines (graphstore.training.baselines) learn a planted structure and are scored as the
evaluation scores the model (graphstore.training.metrics)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graphstore.training import metrics as M
from graphstore.training.baselines import (
    DEFAULT_SETTINGS, FitSettings, PairGraph, PopularityScorer, fit, fit_bpr,
)

SMALL = FitSettings(dim=16, epochs=30, batch_size=256, lr=0.02, l2=1e-4, num_layers=2, seed=0)


def planted(num_anchors: int = 300, num_labels: int = 150, communities: int = 5,
            per_anchor: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, test) ``[2, E]`` pairs: each anchor links inside its community (90 %), with a mild
    popularity skew; a per-edge split keeps 80 % of each anchor's pairs for training."""
    rng = np.random.default_rng(seed)
    a_comm = rng.integers(communities, size=num_anchors)
    l_comm = np.arange(num_labels) % communities
    pop = 1.0 / (1 + rng.permutation(num_labels))
    rows = []
    for a in range(num_anchors):
        mine: set[int] = set()
        while len(mine) < per_anchor:
            inside = rng.random() < 0.9
            cand = np.flatnonzero(l_comm == a_comm[a]) if inside else np.arange(num_labels)
            mine.add(int(rng.choice(cand, p=pop[cand] / pop[cand].sum())))
        rows += [(a, label) for label in sorted(mine)]
    pairs = np.array(rows).T
    test = rng.random(pairs.shape[1]) < 0.2
    return torch.from_numpy(pairs[:, ~test]), torch.from_numpy(pairs[:, test])


def mrr(scorer, train: torch.Tensor, test: torch.Tensor, num_labels: int) -> float:
    """Filtered MRR of ``test`` pairs against every label (known positives skipped)."""
    cand = torch.arange(num_labels)
    known = torch.unique(torch.cat([train, test], 1)[0] * num_labels + torch.cat([train, test], 1)[1])
    a, p = test
    mask = torch.isin(a[:, None] * num_labels + cand[None, :], known)
    ranks = M.ranks(scorer.pair_scores(a, p), scorer.candidate_scores(a, cand), mask)
    return M.finalize(M.metric_sums(ranks))["mrr"]


@pytest.fixture(scope="module")
def data():
    train, test = planted()
    return train, test, PairGraph(train, 300, 150, same_type=False)


@pytest.mark.parametrize("name", ["bpr", "lightgcn"])
def test_embedding_baselines_learn_the_communities(data, name):
    train, test, graph = data
    table, epochs, seconds = fit(name, graph, SMALL)
    assert table.shape == (450, 16) and epochs == SMALL.epochs and seconds > 0
    learned = mrr(graph.split(table), train, test, 150)
    popularity = mrr(PopularityScorer(torch.bincount(train[1], minlength=150)), train, test, 150)
    untrained = mrr(graph.split(torch.randn(450, 16)), train, test, 150)
    # communities of 30 labels: a model that found them ranks well above popularity
    assert learned > 1.5 * popularity and learned > 3 * untrained, (learned, popularity, untrained)


def test_fits_are_reproducible_with_a_seed(data):
    _, _, graph = data
    a, _ = fit_bpr(graph, dataclasses.replace(SMALL, epochs=2))
    b, _ = fit_bpr(graph, dataclasses.replace(SMALL, epochs=2))
    c, _ = fit_bpr(graph, dataclasses.replace(SMALL, epochs=2, seed=1))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_same_type_pairs_share_one_table():
    train, _ = planted(num_anchors=150, num_labels=150)
    graph = PairGraph(train, 150, 150, same_type=True)
    table, _, _ = fit("lightgcn", graph, dataclasses.replace(SMALL, epochs=1))
    assert table.shape == (150, 16)
    scorer = graph.split(table)
    assert scorer.anchor_emb is scorer.label_emb


def test_a_fit_stops_between_epochs_when_its_budget_runs_out(data):
    _, _, graph = data
    table, epochs, _ = fit("bpr", graph, SMALL, budget_s=0.0)
    assert epochs == 0 and table.shape == (450, 16)


def test_scores_have_the_shapes_the_evaluation_ranks():
    pop = PopularityScorer(torch.tensor([3.0, 0.0, 5.0]))
    a, c = torch.tensor([0, 1]), torch.tensor([2, 0, 1])
    assert pop.pair_scores(a, torch.tensor([2, 1])).tolist() == [5.0, 0.0]
    assert pop.candidate_scores(a, c).tolist() == [[5.0, 3.0, 0.0]] * 2


def test_the_settings_each_baseline_states():
    bpr = DEFAULT_SETTINGS["bpr"].describe("bpr")
    light = DEFAULT_SETTINGS["lightgcn"].describe("lightgcn")
    assert "num_layers" not in bpr and light["num_layers"] == 3
    assert "LightGCN" in light["method"] and "BPR" in bpr["method"]
    assert {"dim", "epochs", "batch_size", "lr", "l2", "negatives", "seed"} <= set(bpr)


def test_the_budget_cuts_inside_an_epoch(data, monkeypatch):
    """A budget that runs out mid-epoch stops before the next batch (a large graph's epoch can
    outlast the collective timeout the other ranks wait under)."""
    from graphstore.training import baselines

    clock = iter(range(1000))
    monkeypatch.setattr(baselines.time, "monotonic", lambda: float(next(clock)))
    _, _, graph = data
    settings = dataclasses.replace(SMALL, epochs=5, batch_size=1024)  # 3 batches per epoch
    _, epochs, _ = fit("bpr", graph, settings, budget_s=4.5)
    assert 0 < epochs < 2 and epochs == round(epochs, 2), epochs
