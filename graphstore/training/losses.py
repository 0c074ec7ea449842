"""Link-prediction losses over one ABLP batch (anchors, their positives, and negatives).

Shapes: ``anchor_emb [A, d]`` (one row per (anchor, positive) pair, i.e. ``batch.y_positive``
gathered), ``pos_emb [A, d]``, ``neg_emb [N, d]`` (random negatives; the batch's own positives are
added as in-batch negatives; the trainer appends the batch's hard negatives, ``[M, d]``, as the
last ``M`` columns, each a negative of its own anchor's rows only: :func:`hard_negative_mask`).
``anchor_ids`` / ``pos_ids`` / ``neg_ids`` are global node ids used to remove *accidental hits*:
a candidate that is the pair's own positive (or any positive of the same anchor in the batch) is
not a negative for it.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

NEG_INF = -1e9


def candidate_scores(anchor_emb: torch.Tensor, pos_emb: torch.Tensor, neg_emb: torch.Tensor,
                     scorer: Literal["dot", "cosine"] = "dot", temperature: float = 1.0) -> torch.Tensor:
    """``[A, A + N]`` scores of each anchor against every in-batch positive and random negative."""
    cands = torch.cat([pos_emb, neg_emb], dim=0)
    if scorer == "cosine":
        anchor_emb, cands = F.normalize(anchor_emb, dim=-1), F.normalize(cands, dim=-1)
    return anchor_emb @ cands.T / temperature


def logq_offsets(pos_ids: torch.Tensor, neg_ids: torch.Tensor, popularity: torch.Tensor,
                 in_batch: bool = True) -> torch.Tensor:
    """``[A + N]`` log of how often each candidate is expected among one batch's candidates.

    In-batch candidates are other pairs' positives, drawn in proportion to their training
    popularity; random negatives are drawn uniformly from the label nodes. The expected count of
    candidate ``j`` is ``A * pop_j / sum(pop) + N / num_labels``. Subtracting its log from every
    score (sampling-bias correction, Yi et al., RecSys 2019) makes the sampled softmax estimate the
    full softmax, so the model keeps the popularity signal that in-batch negatives would otherwise
    remove. ``popularity``: training positives per label node (global ids), as the trainer counts.
    ``in_batch`` False (no in-batch negatives): only the random draws count.
    """
    cand_ids = torch.cat([pos_ids, neg_ids])
    total = float(popularity.sum()) or 1.0
    share = popularity[cand_ids] / total if in_batch else torch.zeros(len(cand_ids),
                                                                      device=popularity.device)
    expected = len(pos_ids) * share + len(neg_ids) / max(len(popularity), 1)
    return torch.log(expected.clamp_min(1e-12))


def accidental_hit_mask(anchor_ids: torch.Tensor, pos_ids: torch.Tensor,
                        neg_ids: torch.Tensor, in_batch: bool = True) -> torch.Tensor:
    """``[A, A + N]`` True where a candidate is a positive of the row's anchor but not the row's own
    positive column (those must not count as negatives). ``in_batch`` False: every other row's
    positive is masked too, so each pair's negatives are the random ones only."""
    cand_ids = torch.cat([pos_ids, neg_ids])
    same_anchor = anchor_ids[:, None] == anchor_ids[None, :]  # [A, A]
    # positives of the same anchor, seen as in-batch candidates
    hits = torch.zeros(len(anchor_ids), len(cand_ids), dtype=torch.bool, device=anchor_ids.device)
    hits[:, :len(pos_ids)] = same_anchor if in_batch else True
    # random negatives that happen to be a positive of this anchor: compare (anchor, node) keys
    if len(neg_ids):
        base = int(torch.cat([pos_ids, neg_ids]).max()) + 1
        known = anchor_ids * base + pos_ids
        keys = anchor_ids[:, None] * base + neg_ids[None, :]
        hits[:, len(pos_ids):] = torch.isin(keys, known)
    eye = torch.arange(len(anchor_ids), device=anchor_ids.device)
    hits[eye, eye] = False  # the row's own positive stays
    return hits


def hard_negative_mask(anchor_ids: torch.Tensor, pos_ids: torch.Tensor,
                       hard_anchor_ids: torch.Tensor, hard_ids: torch.Tensor) -> torch.Tensor:
    """``[A, M]`` True where hard negative ``j`` (drawn by anchor ``hard_anchor_ids[j]``, node
    ``hard_ids[j]``) is NOT a negative of row ``i``: it belongs to another anchor, or it is a
    positive of row ``i``'s anchor in the batch (an accidental hit). So each pair's extra
    negatives are exactly its own anchor's drawn hard negatives (graphstore.dataset.hard_negatives)."""
    own = anchor_ids[:, None] == hard_anchor_ids[None, :]
    if not len(hard_ids):
        return ~own
    base = int(torch.cat([pos_ids, hard_ids]).max()) + 1
    known = anchor_ids * base + pos_ids
    hit = torch.isin(hard_anchor_ids * base + hard_ids, known)[None, :]
    return ~own | hit


def retrieval_loss(scores: torch.Tensor, hit_mask: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy: row ``i``'s target is column ``i`` (its own positive)."""
    masked = scores.masked_fill(hit_mask, NEG_INF)
    target = torch.arange(scores.size(0), device=scores.device)
    return F.cross_entropy(masked, target)


def bpr_loss(scores: torch.Tensor, hit_mask: torch.Tensor) -> torch.Tensor:
    """Bayesian personalised ranking: ``-log sigmoid(s_pos - s_neg)`` over every true negative."""
    pos = scores.diagonal()[:, None]
    valid = ~hit_mask
    valid[torch.arange(scores.size(0)), torch.arange(scores.size(0))] = False
    diffs = (pos - scores)[valid]
    return -F.logsigmoid(diffs).mean() if diffs.numel() else scores.sum() * 0
