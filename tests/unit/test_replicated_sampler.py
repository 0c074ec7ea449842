"""The sampler over the mapped CSR against the raw edges of the shards: every sampled edge exists
(in the view sampled, in the message direction graph-store mode uses), at most ``fanout``
neighbours per node and hop, all of them when the degree is smaller, consistent relabelling,
held-out supervision edges never sampled from the train view."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated import CsrSampler, GraphFile
from tests.replicated_graphs import build, held_out_mask, raw_edges

CASES = {
    "hetero-in": dict(kind="hetero", direction="in"),
    "homo-out": dict(kind="homo", direction="out",
                     splitter="graphstore.dataset.splitter.DistEdgeLinkSplitter"),
    "hetero-out": dict(kind="hetero", direction="out"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def graph(request, tmp_path_factory):
    built = build(tmp_path_factory.mktemp(request.param), **CASES[request.param])
    return built, GraphFile.open(built.graph), raw_edges(built.shards)


def _reference(built, g: GraphFile, raw, view: str):
    """Per message type: the set of (neighbour, sampler, edge id) edges and each sampling node's
    degree, from the raw edges (a stored ``(s, r, d)`` flows ``s -> d`` with ``in`` sampling, and
    as ``(d, rev_r, s)``, ``d -> s``, with ``out``)."""
    edges, degree = {}, {}
    for name, (src, dst, eids) in raw.items():
        et = EdgeType.parse(name)
        keep = ~held_out_mask(built, name, src, dst) if view == "train" else np.ones(len(src), bool)
        if built.direction == "in":
            msg, nbr, anchor, anchor_type = et, src, dst, et.dst_node_type
        else:
            msg, nbr, anchor, anchor_type = et.reverse(), dst, src, et.src_node_type
        edges[msg.as_tuple()] = set(zip(nbr[keep].tolist(), anchor[keep].tolist(), eids[keep].tolist()))
        degree[msg.as_tuple()] = np.bincount(anchor[keep], minlength=g.metadata.node_counts[anchor_type])
    return edges, degree


def _seeds(g: GraphFile, rng) -> dict[str, torch.Tensor]:
    return {nt: torch.from_numpy(rng.choice(n, size=min(n, 40), replace=False))
            for nt, n in g.metadata.node_counts.items()}


@pytest.mark.parametrize("view", ["full", "train"])
def test_sampled_edges_exist_and_fanouts_hold(graph, view):
    built, g, raw = graph
    edges, degree = _reference(built, g, raw, view)
    rng = np.random.default_rng(1)
    k = 3
    for replace in (False, True):
        seeds = _seeds(g, rng)
        sub = CsrSampler(g, [k, k], view=view, replace=replace).sample(seeds)
        for nt, ids in sub.node.items():  # relabelling: unique ids, seeds first in order
            assert len(torch.unique(ids)) == len(ids)
            s = seeds.get(nt, torch.empty(0, dtype=torch.long))
            assert sub.num_seeds[nt] == len(s) and torch.equal(ids[:len(s)], s)
        assert set(sub.edge_index) <= set(edges)
        for msg, ei in sub.edge_index.items():
            src_t, _, dst_t = msg
            assert ei.shape[1] == len(sub.edge_id[msg])
            assert int(ei[0].numpy().max(initial=-1)) < len(sub.node[src_t])
            assert int(ei[1].numpy().max(initial=-1)) < len(sub.node[dst_t])
            got = zip(sub.node[src_t][ei[0]].tolist(), sub.node[dst_t][ei[1]].tolist(),
                      sub.edge_id[msg].tolist())
            assert all(e in edges[msg] for e in got), (msg, view)
            count = np.bincount(ei[1].numpy(), minlength=len(sub.node[dst_t]))
            deg = degree[msg][sub.node[dst_t].numpy()]
            sampled = count > 0
            if replace:
                assert (count[sampled] == k).all()
            else:  # every node that sampled took min(degree, fanout) edges
                assert (count[sampled] == np.minimum(deg[sampled], k)).all()
            n_seed = sub.num_seeds.get(dst_t, 0)  # every seed sampled; all when degree <= k
            want = np.minimum(deg[:n_seed], k) if not replace else np.where(deg[:n_seed] > 0, k, 0)
            assert (count[:n_seed] == want).all(), (msg, view, replace)
        for msg in edges:  # small degrees exist here: "all neighbours" was exercised
            assert (degree[msg] > 0).any()


def test_held_out_supervision_edges_are_never_sampled_from_the_train_view(graph):
    built, g, raw = graph
    every = {nt: torch.arange(n) for nt, n in g.metadata.node_counts.items()}
    held = {}
    for name, (src, dst, eids) in raw.items():
        et = EdgeType.parse(name)
        msg = et if built.direction == "in" else et.reverse()
        held[msg.as_tuple()] = set(eids[held_out_mask(built, name, src, dst)].tolist())
    assert any(held.values())
    for view, expect_held in (("train", False), ("full", True)):
        sub = CsrSampler(g, [-1, -1], view=view).sample(every)
        found = any(held[msg] & set(e.tolist()) for msg, e in sub.edge_id.items())
        assert found == expect_held, view


def test_same_seed_same_sample_and_bad_arguments_are_named(graph):
    _, g, _ = graph
    nt = g.metadata.node_types[0]
    sampler = CsrSampler(g, [2, 2])
    seeds = {nt: torch.arange(10)}
    torch.manual_seed(5)
    a = sampler.sample(seeds)
    torch.manual_seed(5)
    b = sampler.sample(seeds)
    assert all(torch.equal(a.edge_id[m], b.edge_id[m]) for m in a.edge_id)
    with pytest.raises(UsageError, match="must be in"):
        sampler.sample({nt: torch.tensor([g.metadata.node_counts[nt]])})
    with pytest.raises(UsageError, match="same number"):
        CsrSampler(g, {et: [2] * (i + 1) for i, et in enumerate(g.metadata.edge_types)}
                   if len(g.metadata.edge_types) > 1 else {g.metadata.edge_types[0]: []})
    with pytest.raises(UsageError, match=">= 0 or -1"):
        CsrSampler(g, [-2])


def test_each_node_draws_a_uniform_subset_of_its_neighbours():
    """``pick_neighbours`` on one node of degree 8 asked 20 000 times for 3: every draw is 3
    distinct edges of that node, and each of the C(8, 3) = 56 subsets comes up about equally
    often (expected 357 each; a bias towards any edge or position would skew them); with
    replacement every edge is drawn about 3/8 of the time per slot. Degrees 0 and 2 (<= fanout)
    give no edge and both edges."""
    from itertools import combinations

    from graphstore.modes.replicated.sampler import pick_neighbours

    indptr = torch.tensor([0, 8, 8, 10])  # node 0: edges 0..7, node 1: none, node 2: 8, 9
    torch.manual_seed(0)
    trials = 20_000
    pos, owner = pick_neighbours(indptr, torch.zeros(trials, dtype=torch.long), 3, replace=False)
    assert torch.equal(owner, torch.arange(trials).repeat_interleave(3))
    rows = pos.view(trials, 3).sort(1).values
    assert bool(((rows[:, 1:] > rows[:, :-1]) & (rows >= 0).all(1, keepdim=True)
                 & (rows < 8).all(1, keepdim=True)).all())
    counts = {s: 0 for s in combinations(range(8), 3)}
    for s in map(tuple, rows.tolist()):
        counts[s] += 1
    expected = trials / len(counts)
    assert min(counts.values()) > 0.75 * expected and max(counts.values()) < 1.25 * expected, counts
    pos, _ = pick_neighbours(indptr, torch.zeros(trials, dtype=torch.long), 3, replace=True)
    share = torch.bincount(pos, minlength=8).double() / pos.numel()
    assert bool(((share - 1 / 8).abs() < 0.01).all()), share
    pos, owner = pick_neighbours(indptr, torch.tensor([1, 2, 0]), 3, replace=False)
    assert torch.equal(owner[:2], torch.tensor([1, 1])) and torch.equal(pos[:2], torch.tensor([8, 9]))
    assert (owner == 2).sum() == 3 and not (owner == 0).any()


def test_relabel_keeps_known_ids_first_and_appends_new_ones_once_in_first_seen_order():
    """``relabel`` against its definition on random ids with repeats (and large ids that differ
    only in their high bits, so the hash table's probing is exercised): ``known`` kept in place,
    each missing id of ``found`` appended once in the order ``found`` first holds it, every
    ``found`` id mapped to its index."""
    from graphstore.modes.replicated.sampler import relabel

    rng = np.random.default_rng(3)
    for n, m, high in ((0, 0, 10), (0, 50, 20), (30, 0, 100), (500, 4000, 3000),
                       (64, 1000, 1 << 40)):
        known = torch.from_numpy(rng.choice(high, size=n, replace=False).astype(np.int64))
        if high > 1 << 30:  # ids differing only in their high bits
            known = known << 20
        pool = np.concatenate([known.numpy(), rng.integers(0, high, size=m) << (20 if high > 1 << 30 else 0)])
        found = torch.from_numpy(rng.choice(pool, size=m).astype(np.int64)) if m else known[:0]
        nodes, local = relabel(known, found)
        new = list(dict.fromkeys(i for i in found.tolist() if i not in set(known.tolist())))
        assert nodes.tolist() == known.tolist() + new
        assert torch.equal(nodes[local], found)


def test_a_seeded_generator_repeats_its_sample_and_different_seeds_differ(graph):
    _, g, _ = graph
    nt = g.metadata.node_types[0]
    seeds = {nt: torch.arange(min(30, g.metadata.node_counts[nt]))}

    def draw(seed: int):
        sampler = CsrSampler(g, [2, 2], generator=torch.Generator().manual_seed(seed))
        return [sampler.sample(seeds) for _ in range(3)]

    a, b, c = draw(11), draw(11), draw(12)
    key = lambda subs: [(m, e.tolist()) for s in subs for m, e in sorted(s.edge_id.items())]
    assert key(a) == key(b)
    assert key(a) != key(c)
    assert key(a[:1]) != key(a[1:2])  # consecutive calls draw afresh
