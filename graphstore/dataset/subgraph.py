"""A sampled neighbourhood (:class:`SampledSubgraph`) and the PyG batch made of it.

Every sampler of the library gives a :class:`SampledSubgraph` (replicated mode's over the mapped
graph file, graphstore.modes.replicated.sampler; graph-store and colocated mode's over the
storage partitions, graphstore.dataset.partitioned_sampler), and :func:`subgraph_to_pyg` makes
the batch the default trainer reads (graphstore.training.batches), with the names GLT's batches
have: homogeneous ``Data`` with ``x``, ``edge_index``, ``node`` (= ``n_id``), ``e_id``,
``batch_size`` and, in node batches, ``batch`` (the seeds' ids: ``node[:batch_size]``);
``HeteroData`` with those per node / edge type. Link batches add ``y_positive``
(``[2, P]``: index into the anchor type's nodes, index into the label type's nodes, as
``DistABLPLoader`` gives it), ``y_negative`` (``[K]`` indices of random label-type nodes),
``supervision_edge_type``, ``anchor_node_type``, ``label_node_type``.

Order (what every sampler promises): per node type (every type of the graph) the global ids of
the sampled nodes, the seeds first in the order given (unique per type), then each hop's new
nodes in the order they were first sampled; ``edge_index`` (every message type, possibly empty)
holds local indices into those lists, ``edge_index[0]`` the sampled neighbour (the message's
source) and ``edge_index[1]`` the node that sampled it, edges grouped by that node in frontier
order; ``edge_id`` the stored edges' ids (batches' ``e_id``), or empty when the sampler was not
asked for them (then batches have no ``e_id``, as GLT's without ``with_edge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError

EdgeTypeTuple = tuple[str, str, str]


@dataclass(frozen=True)
class SampledSubgraph:
    """One sampled neighbourhood (see the module docs for order and direction)."""

    node: dict[str, torch.Tensor]  # int64 global ids per node type, seeds first
    num_seeds: dict[str, int]  # leading entries of ``node[t]`` that are seeds
    edge_index: dict[EdgeTypeTuple, torch.Tensor]  # [2, E] local, neighbour -> sampler
    edge_id: dict[EdgeTypeTuple, torch.Tensor]  # [E] ids of the stored edges ({}: not sampled)


def joined(parts: list) -> Any:
    """numpy ``parts`` (of one dtype) end to end (the one part itself, no copy; an empty int64
    array when none)."""
    import numpy as np

    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def subgraph_to_pyg(sub: SampledSubgraph, *, message_types: list[EdgeTypeTuple],
                    x: dict[str, torch.Tensor], homogeneous: bool,
                    link: tuple[EdgeTypeTuple, torch.Tensor, torch.Tensor] | None = None) -> Any:
    """The PyG batch of ``sub`` (module docs), built directly from its tensors: every node type
    of ``sub``, every message type, in the same order; ``x`` the features per node type (types
    without features absent); ``link``: (supervision type, ``[2, P]`` positives, ``[K]``
    negatives) in local indices. ``collate_to_pyg`` gives the same batch for the Arrow row that
    graphstore.modes.replicated.arrow_batch.encode makes of the same arguments."""
    empty = torch.empty(0, dtype=torch.long)
    r: dict[str, Any] = {
        "meta": {"homogeneous": homogeneous,
                 "supervision_edge_type": list(link[0]) if link is not None else None},
        "node": dict(sub.node), "num_seeds": {nt: sub.num_seeds.get(nt, 0) for nt in sub.node},
        "x": {nt: x[nt] for nt in sub.node if nt in x},
        "edge_index": {mt: sub.edge_index.get(mt, empty.view(2, 0)) for mt in message_types},
        "e_id": {mt: sub.edge_id.get(mt, empty) for mt in message_types if sub.edge_id}}
    if link is not None:
        r["y_positive"], r["y_negative"] = link[1], link[2]
    return to_pyg(r)


def to_pyg(r: dict[str, Any]) -> Any:
    """``Data`` / ``HeteroData`` of a batch given as a dict (``meta``, ``node``, ``num_seeds``, ``x``,
    ``edge_index``, ``e_id``, link batches ``y_positive`` / ``y_negative``): module docs."""
    from torch_geometric.data import Data, HeteroData

    if r["meta"]["homogeneous"]:
        (nt,) = r["node"]
        (et,) = r["edge_index"]
        data = Data(x=r["x"].get(nt), edge_index=r["edge_index"][et], num_nodes=len(r["node"][nt]))
        data.n_id = data.node = r["node"][nt]
        if r["e_id"]:
            data.e_id = r["e_id"][et]
        data.batch_size = r["num_seeds"][nt]
        if "y_positive" not in r:  # node batches: their seeds' ids, as GLT's
            data.batch = data.node[:data.batch_size]
    else:
        data = HeteroData()
        for nt, ids in r["node"].items():
            store = data[nt]
            store.n_id = store.node = ids
            store.num_nodes = len(ids)
            store.batch_size = r["num_seeds"][nt]
            if "y_positive" not in r and store.batch_size:
                store.batch = ids[:store.batch_size]
            if nt in r["x"]:
                store.x = r["x"][nt]
        for et, ei in r["edge_index"].items():
            data[et].edge_index = ei
            if r["e_id"]:
                data[et].e_id = r["e_id"][et]
    if "y_positive" in r:
        sup = tuple(r["meta"]["supervision_edge_type"])
        data.y_positive, data.y_negative = r["y_positive"], r["y_negative"]
        data.supervision_edge_type = sup
        data.anchor_node_type, data.label_node_type = sup[0], sup[2]
    return data


def link_seeds(sup: EdgeType, pairs: torch.Tensor, neg: torch.Tensor
               ) -> tuple[dict[str, torch.Tensor], tuple[EdgeTypeTuple, torch.Tensor, torch.Tensor]]:
    """Seeds of a link batch (unique per type, sorted) and the batch's positives and negatives
    as local indices into them (``y_positive`` [2, P], ``y_negative`` [K]): ``pairs`` [2, P]
    (anchor, label) global ids of ``sup``, ``neg`` [K] label-type ids."""
    a_type, l_type = sup.src_node_type, sup.dst_node_type
    if a_type == l_type:
        seeds = {a_type: torch.unique(torch.cat([pairs[0], pairs[1], neg]))}
    else:
        seeds = {a_type: torch.unique(pairs[0]), l_type: torch.unique(torch.cat([pairs[1], neg]))}
    pos = torch.stack([torch.searchsorted(seeds[a_type], pairs[0]),
                       torch.searchsorted(seeds[l_type], pairs[1])])
    return seeds, (sup.as_tuple(), pos, torch.searchsorted(seeds[l_type], neg))


def fanouts_per_edge_type(num_neighbors: Sequence[int] | Mapping, edge_types: Sequence[EdgeType]
             ) -> dict[EdgeType, tuple[int, ...]]:
    """Fanouts per stored edge type of ``num_neighbors``: one list for all, or a mapping keyed by
    edge type (every type, the same number of hops); a UsageError names what is wrong."""
    from graphstore.dataset.metadata import as_edge_type

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
