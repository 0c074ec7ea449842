"""Hard negatives in ABLP batches: each batch's anchors draw some of their known negatives.

A supervision edge type may have known negatives (``hardNegativeEdgeTypes`` in the task config:
edges meaning "this anchor does NOT link to this node"); storage serves them with the anchors of
each split as ``ABLPInputNodes.negative_labels`` (graphstore.dataset.queries). A
``DistABLPLoader(hard_negatives_per_anchor=k)`` turns them into :class:`AnchorNegatives` (one per
input partition) and, for every batch of (anchor, positive) pairs, :func:`batch_rows` adds up to
``k`` negatives of each distinct anchor of the batch as extra (anchor, node) rows; the sampler
then samples the negatives' neighbourhoods with the batch, so the model embeds them in the same
forward pass (graphstore.dataset.loaders: ``batch.y_hard_negative``).

Rules (pure functions of their arguments and the random generator):

- an anchor with ``k`` or fewer negatives brings all of them; one with more brings ``k``
  distinct ones, uniformly at random, drawn anew for every batch (so every epoch differs);
- rows come out positives first, in the batch's order (label 1), then the drawn negatives
  grouped by anchor in ascending anchor id (label 0);
- an anchor without negatives brings none; a batch may have no negative rows at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

POSITIVE, NEGATIVE = 1, 0
"""The row labels of :func:`batch_rows` (what ``batch.edge_label`` holds for each row)."""


@dataclass(frozen=True)
class AnchorNegatives:
    """Known negatives grouped by anchor (CSR): ``anchors`` ``[A]`` sorted distinct anchor ids,
    ``indptr`` ``[A + 1]`` offsets into ``nodes`` ``[N]``, the negatives of ``anchors[i]`` being
    ``nodes[indptr[i]:indptr[i + 1]]``. int64 tensors (they travel to the samplers, shared)."""

    anchors: torch.Tensor
    indptr: torch.Tensor
    nodes: torch.Tensor

    @classmethod
    def from_pairs(cls, pairs: torch.Tensor) -> AnchorNegatives:
        """From ``[2, N]`` (anchor, negative) pairs in any order (duplicates kept)."""
        if pairs.dim() != 2 or pairs.size(0) != 2:
            raise ValueError(f"AnchorNegatives: pairs must be [2, N], got {list(pairs.shape)}")
        src, dst = pairs[0].numpy(), pairs[1].numpy()
        order = np.argsort(src, kind="stable")
        anchors, counts = np.unique(src[order], return_counts=True)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(torch.from_numpy(anchors.astype(np.int64)), torch.from_numpy(indptr),
                   torch.from_numpy(np.ascontiguousarray(dst[order], dtype=np.int64)))

    def __len__(self) -> int:
        return int(self.nodes.numel())

    def share_memory_(self) -> AnchorNegatives:
        for t in (self.anchors, self.indptr, self.nodes):
            t.share_memory_()
        return self

    def draw(self, anchors: torch.Tensor, k: int,
             rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``k`` distinct negatives of every distinct anchor in ``anchors`` (module rules):
        ``(anchor ids [M], negative ids [M])``, grouped by anchor in ascending id."""
        empty = torch.empty(0, dtype=torch.long)
        if k < 1 or not len(self):
            return empty, empty
        known = self.anchors.numpy()
        uniq = np.unique(anchors.numpy())
        slot = np.searchsorted(known, uniq)
        found = slot < len(known)
        found[found] = known[slot[found]] == uniq[found]
        slot = slot[found]
        if not len(slot):
            return empty, empty
        indptr = self.indptr.numpy()
        lo, counts = indptr[slot], indptr[slot + 1] - indptr[slot]
        group = np.repeat(np.arange(len(slot)), counts)  # each candidate's anchor group
        starts = np.cumsum(counts) - counts
        flat = np.arange(int(counts.sum())) - np.repeat(starts, counts) + np.repeat(lo, counts)
        order = np.lexsort((rng.random(len(flat)), group))  # random order inside each group
        rank = np.arange(len(flat)) - np.repeat(starts, counts)  # position inside the group
        chosen = flat[order][rank < k]
        return (torch.from_numpy(known[slot][group[order][rank < k]]),
                torch.from_numpy(self.nodes.numpy()[chosen]))


def batch_rows(row: torch.Tensor, col: torch.Tensor, negatives: AnchorNegatives, k: int,
               rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(row, col, label)`` of one batch: its (anchor, positive) pairs (label :data:`POSITIVE`),
    then up to ``k`` drawn negatives of each distinct anchor (label :data:`NEGATIVE`)."""
    neg_row, neg_col = negatives.draw(row, k, rng)
    label = torch.cat([torch.full((row.numel(),), POSITIVE, dtype=torch.long),
                       torch.full((neg_row.numel(),), NEGATIVE, dtype=torch.long)])
    return torch.cat([row, neg_row]), torch.cat([col, neg_col]), label


__all__ = ["AnchorNegatives", "batch_rows", "POSITIVE", "NEGATIVE"]
