"""``ABLPInputNodes``: the loader input of anchor-based link prediction, as storage serves it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

EdgeTypeTuple = tuple[str, str, str]


@dataclass(frozen=True)
class ABLPInputNodes:
    """Anchors of one storage rank's slice and their labels, per supervision edge type.

    ``positive_labels[et]`` is a ``[2, P]`` int64 tensor of (anchor id, label node id) pairs with
    ``P >= len(anchor_nodes)``; its first row is sorted and every id in it is in ``anchor_nodes``.
    Edge types are as the user reads them (src -> dst); ids are dense ids. Empty tensors are
    normal: this compute rank has nothing on that storage rank.

    ``negative_labels[et]`` (only for a supervision type with hard negatives, taskMetadata's
    ``hardNegativeEdgeTypes``) is a ``[2, N]`` int64 tensor of (anchor id, known negative id)
    pairs of the same anchors and split, first row sorted; an anchor may have none.
    ``DistABLPLoader(hard_negatives_per_anchor=k)`` draws from them into its batches.
    """

    anchor_node_type: str | None
    anchor_nodes: torch.Tensor
    positive_labels: dict[EdgeTypeTuple, torch.Tensor]
    negative_labels: dict[EdgeTypeTuple, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.anchor_nodes.numel())
