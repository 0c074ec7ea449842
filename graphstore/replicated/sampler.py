"""Neighbour sampling over a mapped graph file with torch-sparse's compiled kernels.

``torch.ops.torch_sparse.neighbor_sample`` (homogeneous) and ``hetero_neighbor_sample`` run on
the mapped CSR tensors of :class:`~graphstore.replicated.graph_file.GraphFile` directly: the
kernels read ``indptr`` / ``indices`` pages as they walk, nothing is copied, there is no Python
loop per node. Per hop and per edge type: at most ``fanout`` neighbours of every frontier node,
uniformly, without replacement unless ``replace`` (then exactly ``fanout`` draws); every
neighbour when the degree is at most ``fanout``; ``-1``: every neighbour; ``0``: none. Randomness comes from
torch's global generator (``torch.manual_seed`` makes a sample reproducible).

Edge direction, as in graph-store mode (GLT): a node's row in the file holds the edges the
sampler walks from it (``in``: edges pointing into it; ``out``: edges leaving it), and the output
is in PyG's message-passing convention, messages flowing from sampled neighbours to the nodes
that sampled them: with ``in`` an edge type keeps its name, ``edge_index[0]`` the sources;
with ``out`` the edges of ``(s, r, d)`` come out under ``(d, rev_r, s)`` (``EdgeType.reverse``,
GLT's naming), ``edge_index[0]`` their destinations. ``e_id`` are the stored edge's ids.

Output (:class:`SampledSubgraph`): per node type the global ids of the sampled nodes, the seeds
first in the order given (seeds must be unique per type), then nodes in the order sampled;
``edge_index`` holds local indices into those lists (relabelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch_sparse  # noqa: F401  (registers torch.ops.torch_sparse)

from graphstore.config import EdgeType
from graphstore.errors import UsageError
from graphstore.replicated.graph_file import GraphFile, View

EdgeTypeTuple = tuple[str, str, str]


@dataclass(frozen=True)
class SampledSubgraph:
    """One sampled neighbourhood (see the module docs for order and direction)."""

    node: dict[str, torch.Tensor]  # int64 global ids per node type, seeds first
    num_seeds: dict[str, int]  # leading entries of ``node[t]`` that are seeds
    edge_index: dict[EdgeTypeTuple, torch.Tensor]  # [2, E] local, neighbour -> sampler
    edge_id: dict[EdgeTypeTuple, torch.Tensor]  # [E] ids of the stored edges


class CsrSampler:
    """Samples ``num_neighbors`` (one fanout per hop; or ``{edge type: fanouts}``, equal hop
    counts) around seeds, over ``view`` of ``graph`` (``"train"``: the message-passing graph
    of training, held-out supervision edges absent; ``"full"``: every edge)."""

    def __init__(self, graph: GraphFile, num_neighbors: Sequence[int] | Mapping, *,
                 view: View = "full", replace: bool = False) -> None:
        graph.check_view(view)
        self.graph, self.view, self.replace = graph, view, bool(replace)
        meta = graph.metadata
        self.homogeneous = meta.is_homogeneous
        self.node_types = list(meta.node_types)
        fanouts = _fanouts(num_neighbors, meta.edge_types)
        self.num_hops = len(next(iter(fanouts.values())))
        # per stored type: the message type it comes out as, and its mapped CSR
        self._message: dict[EdgeType, EdgeType] = {
            et: (et if graph.edge_dir == "in" else et.reverse()) for et in meta.edge_types}
        self._colptr, self._row, self._eids, self._fanout = {}, {}, {}, {}
        for et, msg in self._message.items():
            indptr, indices, eids = graph.csr(et, view)
            key = str(msg)
            self._colptr[key], self._row[key], self._eids[key] = indptr, indices, eids
            self._fanout[key] = list(fanouts[et])
        self._types = [msg.as_tuple() for msg in self._message.values()]
        self._keys = {msg.as_tuple(): str(msg) for msg in self._message.values()}

    @property
    def message_types(self) -> list[EdgeTypeTuple]:
        """The edge types batches carry: each stored type as messages flow (module docs)."""
        return list(self._types)

    def sample(self, seeds: Mapping[str, torch.Tensor] | torch.Tensor) -> SampledSubgraph:
        """Sample around ``seeds`` (``{node type: ids}``, or a tensor in a homogeneous graph)."""
        if isinstance(seeds, torch.Tensor):
            if not self.homogeneous:
                raise UsageError("seeds must be {node_type: ids} in a heterogeneous graph")
            seeds = {self.node_types[0]: seeds}
        seeds = {nt: s.to(torch.long).contiguous() for nt, s in seeds.items() if s.numel()}
        for nt, s in seeds.items():
            n = self.graph.metadata.node_counts.get(nt)
            if n is None:
                raise UsageError(f"unknown node type {nt!r} (one of {self.node_types})")
            if int(s.min()) < 0 or int(s.max()) >= n:
                raise UsageError(f"seed ids of {nt!r} must be in [0, {n}), got {int(s.min())}.."
                                 f"{int(s.max())}")
        if self.homogeneous:
            return self._homogeneous(seeds)
        node, row, col, edge = torch.ops.torch_sparse.hetero_neighbor_sample(
            self.node_types, self._types, self._colptr, self._row, seeds, self._fanout,
            self.num_hops, self.replace, True)
        edge_index, edge_id = {}, {}
        for msg in self._types:
            key = self._keys[msg]  # torch-sparse keys types by their str() form
            if key not in row:
                continue
            edge_index[msg] = torch.stack([row[key], col[key]])
            edge_id[msg] = self._eids[key][edge[key]]
        return SampledSubgraph(node=dict(node), num_seeds={nt: int(s.numel()) for nt, s in seeds.items()},
                               edge_index=edge_index, edge_id=edge_id)

    def _homogeneous(self, seeds: dict[str, torch.Tensor]) -> SampledSubgraph:
        nt = self.node_types[0]
        ((key, colptr),) = self._colptr.items()
        msg = next(iter(self._types))
        s = seeds.get(nt, torch.empty(0, dtype=torch.long))
        node, row, col, edge = torch.ops.torch_sparse.neighbor_sample(
            colptr, self._row[key], s, self._fanout[key], self.replace, True)
        return SampledSubgraph(node={nt: node}, num_seeds={nt: int(s.numel())},
                               edge_index={msg: torch.stack([row, col])},
                               edge_id={msg: self._eids[key][edge]})


def _fanouts(num_neighbors: Sequence[int] | Mapping, edge_types: Sequence[EdgeType]
             ) -> dict[EdgeType, tuple[int, ...]]:
    """Fanouts per stored edge type: one list for all, or a mapping keyed by edge type."""
    from graphstore.dataset_metadata import as_edge_type

    if isinstance(num_neighbors, Mapping):
        given = {as_edge_type(k): tuple(int(x) for x in v) for k, v in num_neighbors.items()}
        missing = [str(et) for et in edge_types if et not in given]
        if missing:
            raise UsageError(f"num_neighbors has no fanouts for edge types {missing}")
        out = {et: given[et] for et in edge_types}
    else:
        out = {et: tuple(int(x) for x in num_neighbors) for et in edge_types}
    hops = {len(v) for v in out.values()}
    if len(hops) != 1 or 0 in hops:
        raise UsageError(f"num_neighbors must give the same number (>= 1) of hops for every edge "
                         f"type, got {sorted(hops)}")
    bad = [v for v in out.values() if any(x < -1 for x in v)]
    if bad:
        raise UsageError(f"num_neighbors: every fanout must be >= 0 or -1 (all), got {bad[0]}")
    return out
