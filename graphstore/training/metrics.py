"""Ranking metrics for link prediction, and the popularity baseline, under one stated protocol.

Protocol (the same for the model and the baseline): each evaluation pair (anchor, positive) is
ranked against a fixed set of candidate label nodes (e.g. a shared sample of ``K`` random label
nodes drawn once with a seed), with the pair's other known positives removed from the candidates
(filtered ranking). ``rank = 1 + #candidates scoring strictly higher than the positive``
(+ half the ties, so constant scores give the expected rank, not the best one).

- MRR = mean of 1 / rank; hits@k = share of pairs with rank <= k.
- Across ranks, sum ``(reciprocal-rank sum, hits sums, count)`` and divide once (all-reduce).
"""

from __future__ import annotations

import torch


def ranks(pos_scores: torch.Tensor, cand_scores: torch.Tensor,
          cand_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Rank of each positive among its candidates.

    ``pos_scores [P]``, ``cand_scores [P, K]``; ``cand_mask [P, K]`` True where a candidate must be
    ignored (another positive of the same anchor). Ties count half.
    """
    higher = cand_scores > pos_scores[:, None]
    ties = cand_scores == pos_scores[:, None]
    if cand_mask is not None:
        higher &= ~cand_mask
        ties &= ~cand_mask
    return 1.0 + higher.sum(1).float() + 0.5 * ties.sum(1).float()


def metric_sums(rank: torch.Tensor, ks: tuple[int, ...] = (1, 10, 50)) -> torch.Tensor:
    """``[2 + len(ks)]`` additive sums: (count, sum of 1/rank, hits@k counts...)."""
    parts = [torch.tensor([float(rank.numel())]), (1.0 / rank).sum()[None]]
    parts += [(rank <= k).sum().float()[None] for k in ks]
    return torch.cat(parts)


def finalize(sums: torch.Tensor, ks: tuple[int, ...] = (1, 10, 50)) -> dict[str, float]:
    """Turn (all-reduced) sums into ``{"mrr", "hits@k", "count"}``."""
    count = float(sums[0])
    out = {"count": count, "mrr": float(sums[1]) / count if count else 0.0}
    for i, k in enumerate(ks):
        out[f"hits@{k}"] = float(sums[2 + i]) / count if count else 0.0
    return out


def popularity_scores(train_label_ids: torch.Tensor, num_label_nodes: int) -> torch.Tensor:
    """The baseline's score of each label node: its number of training positives."""
    return torch.bincount(train_label_ids, minlength=num_label_nodes).float()
