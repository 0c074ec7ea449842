"""Neighbour sampling over a mapped graph file, one compiled kernel per hop and edge type.

:class:`CsrSampler` walks the mapped CSR tensors of
:class:`~graphstore.modes.replicated.graph_file.GraphFile` directly (the kernels read the
``indptr`` / ``indices`` pages they touch; nothing is copied). Per hop and per edge type: at most
``fanout`` neighbours of every frontier node (the nodes first reached in the previous hop; the
seeds at hop 0), a uniform subset without replacement unless ``replace`` (then exactly ``fanout``
uniform draws); every neighbour when the degree is at most ``fanout``; ``-1``: every neighbour;
``0``: none. Randomness comes from the sampler's ``generator`` (default torch's global one:
``torch.manual_seed`` then makes a sample reproducible): one draw per kernel call seeds it.

How: per hop and edge type, :func:`pick_neighbours` (one pass over the frontier, Floyd's subset
algorithm per node) and per hop and node type :func:`relabel` (a hash table of the ids known so
far), both compiled with numba (graphstore.dataset.kernels); Python runs per hop and
edge type, never per node.

Edge direction, as in graph-store mode (GLT): a node's row in the file holds the edges the
sampler walks from it (``in``: edges pointing into it; ``out``: edges leaving it), and the output
is in PyG's message-passing convention, messages flowing from sampled neighbours to the nodes
that sampled them: with ``in`` an edge type keeps its name, ``edge_index[0]`` the sources;
with ``out`` the edges of ``(s, r, d)`` come out under ``(d, rev_r, s)`` (``EdgeType.reverse``,
GLT's naming), ``edge_index[0]`` their destinations. ``e_id`` are the stored edge's ids.

Output (:class:`SampledSubgraph`): per node type (every type of the graph) the global ids of the
sampled nodes, the seeds first in the order given (seeds must be unique per type), then each
hop's new nodes in the order they were first sampled (edge types in :attr:`message_types`
order); ``edge_index`` (every message type, possibly empty) holds local indices into those lists
(relabelled), edges grouped by the node that sampled them, in frontier order.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.dataset import kernels
from graphstore.modes.replicated.graph_file import GraphFile, View
from graphstore.dataset.subgraph import SampledSubgraph, fanouts_per_edge_type, joined

EdgeTypeTuple = tuple[str, str, str]


class CsrSampler:
    """Samples ``num_neighbors`` (one fanout per hop; or ``{edge type: fanouts}``, equal hop
    counts) around seeds, over ``view`` of ``graph`` (``"train"``: the message-passing graph
    of training, held-out supervision edges absent; ``"full"``: every edge); random draws from
    ``generator`` (None: torch's global generator)."""

    def __init__(self, graph: GraphFile, num_neighbors: Sequence[int] | Mapping, *,
                 view: View = "full", replace: bool = False,
                 generator: torch.Generator | None = None) -> None:
        graph.check_view(view)
        self.graph, self.view, self.replace = graph, view, bool(replace)
        self.generator = generator
        meta = graph.metadata
        self.homogeneous = meta.is_homogeneous
        self.node_types = list(meta.node_types)
        fanouts = fanouts_per_edge_type(num_neighbors, meta.edge_types)
        self.num_hops = len(next(iter(fanouts.values())))
        # per stored type: the message type it comes out as, and its mapped CSR
        self._message: dict[EdgeType, EdgeType] = {
            et: (et if graph.edge_dir == "in" else et.reverse()) for et in meta.edge_types}
        # numpy views of the mapped tensors (the kernels take numpy; numpy's gathers are several
        # times faster than torch indexing at these sizes, measured 2026-12-07)
        self._colptr, self._row, self._eids, self._fanout = {}, {}, {}, {}
        for et, msg in self._message.items():
            indptr, indices, eids = graph.csr(et, view)
            key = str(msg)
            self._colptr[key], self._row[key], self._eids[key] = (
                indptr.numpy(), indices.numpy(), eids.numpy())
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
        empty = np.empty(0, np.int64)
        node = {nt: seeds[nt].numpy() if nt in seeds else empty for nt in self.node_types}
        begin = {nt: 0 for nt in self.node_types}  # the frontier: node[nt][begin[nt]:]
        rows: dict[EdgeTypeTuple, list[np.ndarray]] = {msg: [] for msg in self._types}
        cols: dict[EdgeTypeTuple, list[np.ndarray]] = {msg: [] for msg in self._types}
        edges: dict[EdgeTypeTuple, list[np.ndarray]] = {msg: [] for msg in self._types}
        for hop in range(self.num_hops):
            found: dict[str, list[tuple[EdgeTypeTuple, np.ndarray]]] = {}
            for msg in self._types:
                key, (src_t, _, dst_t) = self._keys[msg], msg
                frontier = node[dst_t][begin[dst_t]:]
                fanout = self._fanout[key][hop]
                if not frontier.shape[0] or fanout == 0:
                    continue
                pos, owner = kernels.pick_neighbours(self._colptr[key], frontier, fanout,
                                                     self.replace, kernels.draw_seed(self.generator))
                owner += begin[dst_t]
                cols[msg].append(owner)
                edges[msg].append(pos)
                found.setdefault(src_t, []).append((msg, self._row[key][pos]))
            for nt in self.node_types:
                begin[nt] = node[nt].shape[0]
            for nt, parts in found.items():
                ids = parts[0][1] if len(parts) == 1 else np.concatenate([i for _, i in parts])
                node[nt], local = kernels.relabel(node[nt], ids)
                at = 0
                for msg, part in parts:
                    rows[msg].append(local[at:at + part.shape[0]])
                    at += part.shape[0]
        edge_index, edge_id = {}, {}
        for msg in self._types:
            pos = joined(edges[msg])
            edge_index[msg] = torch.from_numpy(np.stack([joined(rows[msg]), joined(cols[msg])]))
            edge_id[msg] = torch.from_numpy(self._eids[self._keys[msg]][pos])
        return SampledSubgraph(node={nt: torch.from_numpy(ids) for nt, ids in node.items()},
                               num_seeds={nt: int(s.numel()) for nt, s in seeds.items()},
                               edge_index=edge_index, edge_id=edge_id)


def pick_neighbours(indptr: torch.Tensor, frontier: torch.Tensor, fanout: int, replace: bool,
                    generator: torch.Generator | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One hop over a CSR: the positions (into its ``indices``) of the edges every ``frontier``
    node samples, and for each the index of its node in ``frontier``; edges grouped by node in
    frontier order. Without ``replace``: ``min(degree, fanout)`` distinct edges per node, a
    uniform subset; with it, ``fanout`` uniform draws per node of degree > 0; ``fanout`` -1:
    every edge (graphstore.dataset.kernels.pick_neighbours, seeded by one draw from
    ``generator``)."""
    if fanout == 0 or not frontier.numel():
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    pos, owner = kernels.pick_neighbours(indptr.numpy(), frontier.numpy(), int(fanout),
                                         bool(replace), kernels.draw_seed(generator))
    return torch.from_numpy(pos), torch.from_numpy(owner)


def relabel(known: torch.Tensor, found: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``known`` (unique ids) extended by the ids of ``found`` it lacks (appended in the order
    ``found`` first holds them), and the local index of every ``found`` id in that list
    (graphstore.dataset.kernels.relabel)."""
    nodes, local = kernels.relabel(known.numpy(), found.numpy())
    return torch.from_numpy(nodes), torch.from_numpy(local)
