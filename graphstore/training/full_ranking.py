"""Full-ranking metrics of link prediction: recall@k and NDCG@k over every label node.

The protocol of the LightGCN paper and RecBole's full-sort evaluation, beside the sampled one
(graphstore.training.metrics): every anchor with at least one positive in the evaluated split
is scored against **every** label node; the label nodes it is paired with in training are
removed (they cannot be recommended again); the ``k`` best of the rest are its list.

- ``recall@k`` of an anchor = (its split positives in the list) / (its split positives);
- ``NDCG@k`` = DCG / IDCG, DCG = sum over list positions ``i`` (0-based) holding a split
  positive of ``1 / log2(i + 2)``, IDCG the same for a list that starts with
  ``min(k, its split positives)`` positives;
- each is the mean over anchors (not pairs): sums ``(anchors, recall, NDCG)`` are additive, so
  ranks sum their anchors' and divide once.

Ties at the list's edge are broken by ``torch.topk`` (not half-credit as in the sampled ranks):
a constant scorer's figures depend on the label order. Positives of the split that are also
training positives (a repeated pair) are masked like the other training positives, so such an
anchor's recall cannot reach 1 (RecBole counts them the same way).

Pairs are held per anchor in :class:`PairIndex` (CSR), so masking and counting are tensor ops
over a chunk of anchors, never a loop per anchor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

SUMS = ("count", "recall", "ndcg")
"""What :func:`ranking_sums` adds up, in order."""


@dataclass(frozen=True)
class PairIndex:
    """Distinct ``(anchor, label)`` pairs grouped by anchor: ``labels[indptr[a]:indptr[a + 1]]``
    are anchor ``a``'s labels, ascending. ``indptr`` has ``num_anchors + 1`` entries."""

    indptr: torch.Tensor  # [num_anchors + 1] int64
    labels: torch.Tensor  # [pairs] int64

    @classmethod
    def from_pairs(cls, pairs: torch.Tensor, num_anchors: int, num_labels: int) -> PairIndex:
        """From ``[2, P]`` (anchor, label) dense ids; repeated pairs count once."""
        keys = torch.unique(pairs[0].long() * num_labels + pairs[1].long())
        anchors, labels = keys // num_labels, keys % num_labels
        counts = torch.bincount(anchors, minlength=num_anchors)
        indptr = torch.zeros(num_anchors + 1, dtype=torch.long)
        indptr[1:] = torch.cumsum(counts, 0)
        return cls(indptr, labels)

    def degree(self, anchors: torch.Tensor) -> torch.Tensor:
        return self.indptr[anchors + 1] - self.indptr[anchors]

    def rows(self, anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(row, label)`` of every pair of ``anchors``: row ``i`` is ``anchors[i]``."""
        degree = self.degree(anchors)
        row = torch.repeat_interleave(torch.arange(len(anchors)), degree)
        first = torch.cumsum(degree, 0) - degree
        offset = torch.arange(len(row)) - first[row]
        return row, self.labels[self.indptr[anchors][row] + offset]


def ranking_sums(scores: torch.Tensor, anchors: torch.Tensor, train: PairIndex,
                 split: PairIndex, k: int) -> torch.Tensor:
    """``[3]`` sums (anchors, recall@k, NDCG@k) of ``anchors`` (distinct, each with >= 1 split
    positive) from ``scores [len(anchors), num_labels]`` (changed in place: training positives
    become -inf)."""
    row, label = train.rows(anchors)
    scores[row, label] = float("-inf")
    top = torch.topk(scores, min(k, scores.size(1)), dim=1).indices  # [A, k]
    hit = torch.zeros_like(scores, dtype=torch.bool)
    row, label = split.rows(anchors)
    hit[row, label] = True
    in_list = torch.gather(hit, 1, top).float()  # [A, k]
    n_pos = split.degree(anchors).float()
    discount = 1.0 / torch.log2(torch.arange(top.size(1), dtype=torch.float) + 2.0)
    dcg = (in_list * discount).sum(1)
    ideal = torch.cumsum(discount, 0)[(n_pos.clamp(max=top.size(1)) - 1).long()]
    return torch.stack([torch.tensor(float(len(anchors))), (in_list.sum(1) / n_pos).sum(),
                        (dcg / ideal).sum()])


def score_in_chunks(score: Callable[[torch.Tensor], torch.Tensor], anchors: torch.Tensor,
                    train: PairIndex, split: PairIndex, k: int, chunk: int = 512) -> torch.Tensor:
    """:func:`ranking_sums` over ``anchors`` in chunks of ``chunk``; ``score(anchor_chunk)`` gives
    the chunk's ``[len, num_labels]`` scores (float, on the CPU)."""
    total = torch.zeros(len(SUMS))
    for part in anchors.split(chunk):
        total += ranking_sums(score(part).float().clone(), part, train, split, k)
    return total


def finalize(sums: torch.Tensor, k: int) -> dict[str, float]:
    """(All-reduced) sums as ``{"count", "recall@k", "ndcg@k"}``; count is the anchors ranked."""
    count = float(sums[0])
    return {"count": count,
            f"recall@{k}": float(sums[1]) / count if count else 0.0,
            f"ndcg@{k}": float(sums[2]) / count if count else 0.0}
