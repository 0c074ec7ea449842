"""Losses and metrics on hand-computed cases."""

from __future__ import annotations

import math

import torch

from graphstore.training.losses import (
    accidental_hit_mask, bpr_loss, candidate_scores, logq_offsets, retrieval_loss,
)
from graphstore.training.metrics import finalize, metric_sums, popularity_scores, ranks


def test_accidental_hits_are_masked_but_own_positive_stays():
    anchors = torch.tensor([7, 7, 9])
    positives = torch.tensor([100, 101, 102])
    negatives = torch.tensor([101, 200])  # 101 is a positive of anchor 7
    mask = accidental_hit_mask(anchors, positives, negatives)
    expected = torch.tensor([
        [False, True, False, True, False],   # row 0 (7->100): 101 in-batch and 101 random are hits
        [True, False, False, True, False],   # row 1 (7->101): 100 in-batch is a hit; random 101 too
        [False, False, False, False, False],  # row 2 (9->102): nothing
    ])
    assert torch.equal(mask, expected)


def test_retrieval_loss_matches_hand_computed_softmax():
    scores = torch.tensor([[2.0, 0.0, 1.0], [0.5, 1.0, 0.0]])
    mask = torch.tensor([[False, True, False], [False, False, False]])
    loss = retrieval_loss(scores, mask)
    row0 = -math.log(math.exp(2.0) / (math.exp(2.0) + math.exp(1.0)))
    row1 = -math.log(math.exp(1.0) / (math.exp(0.5) + math.exp(1.0) + math.exp(0.0)))
    assert abs(float(loss) - (row0 + row1) / 2) < 1e-6
    # perfectly separated scores drive the loss to ~0, reversed ones make it large
    assert float(retrieval_loss(torch.tensor([[50.0, 0.0], [0.0, 50.0]]), torch.zeros(2, 2, dtype=torch.bool))) < 1e-6
    assert float(bpr_loss(torch.tensor([[0.0, 5.0], [5.0, 0.0]]), torch.zeros(2, 2, dtype=torch.bool))) > 4


def test_logq_offsets_are_log_expected_draws_per_candidate():
    popularity = torch.tensor([6.0, 2.0, 0.0, 0.0])  # 4 label nodes, 8 training positives
    pos, neg = torch.tensor([0, 1, 0]), torch.tensor([2, 3])
    off = logq_offsets(pos, neg, popularity)
    # expected draws: 3 in-batch picks by popularity + 2 uniform picks over 4 nodes
    expected = [3 * 6 / 8 + 2 / 4, 3 * 2 / 8 + 2 / 4, 3 * 6 / 8 + 2 / 4, 2 / 4, 2 / 4]
    assert torch.allclose(off, torch.log(torch.tensor(expected)))
    # a popular candidate is pushed down relative to a rare one with the same raw score
    scores = torch.zeros(1, 5) - off[None, :]
    assert float(scores[0, 0]) < float(scores[0, 3])


def test_candidate_scores_shapes_and_cosine():
    a, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(6, 8)
    assert candidate_scores(a, p, n).shape == (4, 10)
    cos = candidate_scores(a * 10, p, n, scorer="cosine")
    assert float(cos.abs().max()) <= 1 + 1e-5


def test_ranks_mrr_and_hits_with_filtering_and_ties():
    pos = torch.tensor([0.9, 0.1, 0.5])
    cands = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.6, 0.0], [0.5, 0.5, 0.9]])
    mask = torch.tensor([[False, False, False], [False, True, False], [False, False, True]])
    r = ranks(pos, cands, mask)
    assert r.tolist() == [1.0, 2.0, 2.0]  # row 1: 0.6 filtered; row 2: two ties count half each
    m = finalize(metric_sums(r, ks=(1, 2)), ks=(1, 2))
    assert m["count"] == 3 and abs(m["mrr"] - (1 + 0.5 + 0.5) / 3) < 1e-9
    assert m["hits@1"] == 1 / 3 and m["hits@2"] == 1.0
    # sums are additive across ranks (what the all-reduce relies on)
    both = metric_sums(r[:1], ks=(1, 2)) + metric_sums(r[1:], ks=(1, 2))
    assert torch.allclose(both, metric_sums(r, ks=(1, 2)))
    assert popularity_scores(torch.tensor([2, 2, 0]), 4).tolist() == [1.0, 0.0, 2.0, 0.0]
