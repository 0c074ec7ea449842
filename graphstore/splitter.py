"""Link splits, computed on storage: node-anchor (cold start) or per edge (warm start).

``DistNodeAnchorLinkSplitter`` assigns every *anchor* (the source node of a supervision edge, as the
user reads the edge type) to train, val or test by hashing its dense id. So:

- the split of an anchor is a pure function of (anchor node type, anchor id, seed): every storage
  process computes the same answer for any anchor without talking to the others, and reruns give
  the same split;
- fractions are honoured in expectation (a uniform 64-bit hash), i.e. within rounding noise; integer
  ``num_val`` / ``num_test`` are read as absolute counts over the anchor node type's node count;
- all supervision edges of an anchor follow it (node-based split, no anchor in two splits).

``DistEdgeLinkSplitter`` assigns every supervision *edge* to a split by hashing its (anchor,
label) pair, with the same arguments: an anchor keeps its training edges in the graph and is
evaluated on its held-out ones (warm start, the usual recommendation protocol). Fractions are of
the edges; an integer ``num_val`` / ``num_test`` is a count over the edge type's edges.

With ``sample_edge_direction: in`` the edges are stored with their destination, but labels are kept
placed by source (see graphstore.shards.format), so the user-facing (src -> dst) edge type is what
both the splitter and ``fetch_ablp_input`` take; there is nothing to reverse by hand.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar, Literal, Sequence

import numpy as np

from graphstore.errors import UsageError

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")
SPLIT_CODE = {"train": 0, "val": 1, "test": 2}

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, vectorised: a fast, well-mixed 64-bit hash of uint64 values."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _salt(node_type: str, seed: int) -> np.uint64:
    digest = hashlib.sha256(f"{node_type}:{seed}".encode()).digest()
    return np.uint64(int.from_bytes(digest[:8], "little"))


@dataclass(frozen=True)
class DistNodeAnchorLinkSplitter:
    """Seed-000 splitter. Arguments keep the seed's names; ``seed`` changes every assignment."""

    per_edge: ClassVar[bool] = False  # splits anchors (``assign``), not edges
    sampling_direction: Literal["in", "out"] = "in"
    num_val: float = 0.1
    num_test: float = 0.1
    supervision_edge_types: Sequence[Sequence[str]] | None = None
    should_convert_labels_to_edges: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_val", "num_test"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise UsageError(f"DistNodeAnchorLinkSplitter: {name} must be a number >= 0, got {value!r}")
        if self.sampling_direction not in ("in", "out"):
            raise UsageError("DistNodeAnchorLinkSplitter: sampling_direction must be 'in' or 'out', "
                             f"got {self.sampling_direction!r}")

    def fractions(self, num_anchor_nodes: int) -> tuple[float, float]:
        """(val, test) fractions; integer values are counts over ``num_anchor_nodes``."""
        def frac(v: float) -> float:
            if isinstance(v, int) and v >= 1:
                return v / max(num_anchor_nodes, 1)
            return float(v)

        val, test = frac(self.num_val), frac(self.num_test)
        if val + test >= 1:
            raise UsageError(f"DistNodeAnchorLinkSplitter: num_val + num_test must leave training "
                             f"anchors (got val {val:.3f} + test {test:.3f} of the anchors)")
        return val, test

    def assign(self, anchor_node_type: str, anchor_ids: np.ndarray,
               num_anchor_nodes: int) -> np.ndarray:
        """Split code per anchor (0 train, 1 val, 2 test): int8 array aligned with ``anchor_ids``."""
        h = splitmix64(anchor_ids.astype(np.uint64) ^ _salt(anchor_node_type, self.seed))
        return _codes(h, *self.fractions(num_anchor_nodes))


@dataclass(frozen=True)
class DistEdgeLinkSplitter(DistNodeAnchorLinkSplitter):
    """Per-edge (warm-start) splits: see the module docs. Same arguments as the node splitter."""

    per_edge: ClassVar[bool] = True

    def assign_edges(self, edge_type: str, src: np.ndarray, dst: np.ndarray,
                     num_edges: int) -> np.ndarray:
        """Split code per (src, dst) edge of ``edge_type`` (as the user reads it): int8, aligned.
        A pure function of (edge type, src, dst, seed): duplicate edges share their split."""
        salt = _salt(edge_type, self.seed)
        h = splitmix64(splitmix64(src.astype(np.uint64) ^ salt) ^ dst.astype(np.uint64))
        return _codes(h, *self.fractions(num_edges))


def _codes(h: np.ndarray, val: float, test: float) -> np.ndarray:
    """Split codes from uniform 64-bit hashes: test below ``test``, val below ``test + val``."""
    u = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # uniform in [0, 1)
    codes = np.zeros(len(h), dtype=np.int8)
    codes[u < test + val] = SPLIT_CODE["val"]
    codes[u < test] = SPLIT_CODE["test"]
    return codes
