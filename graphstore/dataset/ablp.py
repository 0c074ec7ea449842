"""``ABLPInputNodes``: the loader input of anchor-based link prediction, as storage serves it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

EdgeTypeTuple = tuple[str, str, str]


class FetchRequest(Protocol):
    """The request that fetched an input: graphstore.dataset.protocol.AblpInputRequest (named by
    its shape here, so that this record does not import the protocol that carries it)."""

    @property
    def supervision_edge_type(self) -> Any: ...

    @property
    def split(self) -> str | None: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...


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

    ``stored``: the request that fetched this input (set by ``fetch_ablp_input``; not an
    argument, and ``dataclasses.replace`` drops it). A graph-store loader given this input names
    its pairs by that request, and the storage session reads them from its own memory instead of
    receiving them back; the session checks their count and sums against this input's.
    """

    anchor_node_type: str | None
    anchor_nodes: torch.Tensor
    positive_labels: dict[EdgeTypeTuple, torch.Tensor]
    negative_labels: dict[EdgeTypeTuple, torch.Tensor] = field(default_factory=dict)
    stored: FetchRequest | None = field(default=None, init=False, compare=False, repr=False)

    def __len__(self) -> int:
        return int(self.anchor_nodes.numel())
