"""Full-ranking recall@k / NDCG@k (graphstore.training.full_ranking) against a worked example and a
per-anchor Python reference written from the definitions."""

from __future__ import annotations

import math

import pytest
import torch

from graphstore.training.full_ranking import PairIndex, finalize, ranking_sums, score_in_chunks


def test_a_worked_example():
    # one anchor, labels scored 5 4 3 2 1; label 0 is a training pair (masked), labels 2 and 4
    # are its test positives; top 2 after masking: labels 1, 2 -> one hit at position 1
    scores = torch.tensor([[5.0, 4.0, 3.0, 2.0, 1.0]])
    train = PairIndex.from_pairs(torch.tensor([[0], [0]]), 1, 5)
    test = PairIndex.from_pairs(torch.tensor([[0, 0], [2, 4]]), 1, 5)
    out = finalize(ranking_sums(scores, torch.tensor([0]), train, test, k=2), k=2)
    assert out["count"] == 1.0
    assert out["recall@2"] == pytest.approx(0.5)
    hit = 1 / math.log2(3)
    assert out["ndcg@2"] == pytest.approx(hit / (1 + hit))


def test_masking_the_training_pairs_is_what_lets_a_test_positive_in():
    scores = torch.tensor([[9.0, 8.0, 1.0]])
    test = PairIndex.from_pairs(torch.tensor([[0], [2]]), 1, 3)
    nothing = PairIndex.from_pairs(torch.empty(2, 0, dtype=torch.long), 1, 3)
    both = PairIndex.from_pairs(torch.tensor([[0, 0], [0, 1]]), 1, 3)
    assert float(ranking_sums(scores.clone(), torch.tensor([0]), nothing, test, 1)[1]) == 0.0
    assert float(ranking_sums(scores.clone(), torch.tensor([0]), both, test, 1)[1]) == 1.0


def reference(scores: torch.Tensor, train: set, test: set, k: int) -> tuple[float, float, int]:
    """Mean recall@k and NDCG@k over anchors with a test positive, one anchor at a time."""
    recalls, ndcgs = [], []
    for a in range(scores.size(0)):
        positives = {l for (x, l) in test if x == a}
        if not positives:
            continue
        order = sorted((l for l in range(scores.size(1)) if (a, l) not in train),
                       key=lambda l: -float(scores[a, l]))[:k]
        dcg = sum(1 / math.log2(i + 2) for i, l in enumerate(order) if l in positives)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(k, len(positives))))
        recalls.append(sum(l in positives for l in order) / len(positives))
        ndcgs.append(dcg / idcg)
    return sum(recalls) / len(recalls), sum(ndcgs) / len(ndcgs), len(recalls)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunked_sums_match_the_per_anchor_reference(seed: int):
    gen = torch.Generator().manual_seed(seed)
    n_anchors, n_labels, k = 37, 53, 10
    scores = torch.rand(n_anchors, n_labels, generator=gen)  # distinct: no ties to break
    train_pairs = torch.stack([torch.randint(0, n_anchors, (300,), generator=gen),
                               torch.randint(0, n_labels, (300,), generator=gen)])
    test_pairs = torch.stack([torch.randint(0, n_anchors, (120,), generator=gen),
                              torch.randint(0, n_labels, (120,), generator=gen)])
    train = PairIndex.from_pairs(train_pairs, n_anchors, n_labels)
    test = PairIndex.from_pairs(test_pairs, n_anchors, n_labels)
    anchors = torch.unique(test_pairs[0])
    sums = score_in_chunks(lambda part: scores[part], anchors, train, test, k, chunk=7)
    got = finalize(sums, k)
    recall, ndcg, count = reference(scores, set(map(tuple, train_pairs.T.tolist())),
                                    set(map(tuple, test_pairs.T.tolist())), k)
    assert got["count"] == count
    assert got["recall@10"] == pytest.approx(recall)
    assert got["ndcg@10"] == pytest.approx(ndcg)
    assert 0.0 < got["recall@10"] < 1.0  # the data leaves room to be wrong either way


def test_pair_index_rows_are_each_anchors_distinct_labels():
    pairs = torch.tensor([[2, 0, 2, 2, 0], [4, 1, 3, 4, 0]])
    index = PairIndex.from_pairs(pairs, 3, 5)
    row, label = index.rows(torch.tensor([2, 1, 0]))
    assert row.tolist() == [0, 0, 2, 2] and label.tolist() == [3, 4, 0, 1]
    assert index.degree(torch.tensor([0, 1, 2])).tolist() == [2, 0, 2]
