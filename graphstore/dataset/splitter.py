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
placed by source (see graphstore.formats.shards.format), so the user-facing (src -> dst) edge type is what
both the splitter and ``fetch_ablp_input`` take; there is nothing to reverse by hand.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Sequence

import numpy as np

from graphstore.runtime.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from graphstore.formats.shards.format import Manifest

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


_CODES_CHUNK = 1 << 20
"""Labels hashed at a time by :meth:`SplitRules.label_codes` (the hash's temporaries are a few
int64 arrays of this length, whatever the partition's size)."""


class SplitRules:
    """A splitter applied to a shard set as storage (graphstore.dataset.partition_graph) and the graph
    file of replicated mode (graphstore.modes.replicated.writer) both apply it, so that the train view
    removes exactly the same edges in every mode.

    The splitter hashes each node's *rank* in its type (its raw id's position in ascending order;
    graphstore.formats.shards.format), not its dense id: dense ids depend on the partition count, ranks
    do not, so re-partitioning a graph into more machines keeps every split.
    """

    def __init__(self, splitter: DistNodeAnchorLinkSplitter, manifest: "Manifest") -> None:
        self.splitter, self.manifest = splitter, manifest

    def _ranks(self, node_type: str, dense: np.ndarray) -> np.ndarray:
        return self.manifest.node_ranges(node_type).rank_of_dense(dense.astype(np.int64, copy=False))

    def label_codes(self, name: str, anchors: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """int8 split code of each (anchor, label) row of supervision edge type ``name``
        (as the user reads it: anchors are its source nodes), hashed a chunk at a time."""
        info = self.manifest.edge_types[name]
        out = np.empty(len(anchors), dtype=np.int8)
        for lo in range(0, len(anchors), _CODES_CHUNK):
            a = self._ranks(info.src_node_type, anchors[lo:lo + _CODES_CHUNK])
            if self.splitter.per_edge:
                b = self._ranks(info.dst_node_type, labels[lo:lo + _CODES_CHUNK])
                out[lo:lo + len(a)] = self.splitter.assign_edges(name, a, b, info.count)
            else:
                out[lo:lo + len(a)] = self.splitter.assign(
                    info.src_node_type, a, self.manifest.node_types[info.src_node_type].count)
        return out

    def anchor_codes(self, name: str, anchors: np.ndarray) -> np.ndarray:
        """int8 split code of each anchor of supervision edge type ``name`` (node-based
        splitters only: a per-edge splitter splits (anchor, label) rows)."""
        info = self.manifest.edge_types[name]
        return self.splitter.assign(info.src_node_type, self._ranks(info.src_node_type, anchors),
                                    self.manifest.node_types[info.src_node_type].count)

    def range_codes(self, name: str, lo: int, hi: int) -> np.ndarray:
        """int8 split code of each anchor id in ``[lo, hi)`` of supervision edge type ``name``
        (node-based splitters), hashed a chunk at a time."""
        out = np.empty(hi - lo, dtype=np.int8)
        for start in range(lo, hi, _CODES_CHUNK):
            stop = min(hi, start + _CODES_CHUNK)
            ids = np.arange(start, stop, dtype=np.int64)
            out[start - lo:stop - lo] = self.anchor_codes(name, ids)
        return out

    def base_of(self, name: str) -> str | None:
        """The supervision type whose split removes edges of ``name`` (itself, or the type it
        reverses), None when the train view keeps every edge of ``name``."""
        info = self.manifest.edge_types[name]
        if info.is_supervision:
            return name
        if info.reverse_of and self.manifest.edge_types[info.reverse_of].is_supervision:
            return info.reverse_of
        return None

    def keep(self, name: str, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
        """Which edges (``src`` -> ``dst``) of ``name`` stay in the train view: a bool mask, or
        None when every edge of the type stays. All of a supervision type's edges go when
        ``should_convert_labels_to_edges`` is false; otherwise the train split's stay."""
        base = self.base_of(name)
        if base is None:
            return None
        if not self.splitter.should_convert_labels_to_edges:
            return np.zeros(len(src), dtype=bool)
        anchors, labels = (src, dst) if base == name else (dst, src)
        return self.label_codes(base, anchors, labels) == SPLIT_CODE["train"]

