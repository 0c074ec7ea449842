"""The partitioned sampler (graph-store and colocated mode) against the raw edges of the shards:
two storage partitions answering in-process (the same ``StorageService`` a storage session
registers), every sampled edge exists in the message-passing graph storage holds, fan-outs hold,
features are the shards' rows, a round of several batches gives each batch what it alone would
be entitled to, and the loader iteration covers every unit once, mixes partitions within a batch
and raises a partition's failure instead of skipping a batch."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from graphstore.config import EdgeType
from graphstore.dataset import kernels
from graphstore.dataset import protocol as P
from graphstore.dataset.partitioned_loading import PartitionedIteration
from graphstore.dataset.partitioned_sampler import InProcessReply, PartitionedSampler, RpcReply
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.runtime.ports import PortHold
from tests.replicated_graphs import build, held_out_mask, raw_edges

CASES = {"hetero-in": dict(kind="hetero", direction="in"),
         "hetero-out": dict(kind="hetero", direction="out")}


@pytest.fixture(scope="module", params=sorted(CASES))
def parts(request, tmp_path_factory):
    from graphstore.dataset.partition_graph import load_partition_graph
    from graphstore.dataset.service import StorageService
    from graphstore.formats.shards.reader import ShardSet

    built = build(tmp_path_factory.mktemp(request.param), **CASES[request.param])
    services = []
    with ShardSet.open(built.shards) as shards:
        for p in range(shards.manifest.num_partitions):
            graph, state = load_partition_graph(shards, p, built.storage_args, built.direction)
            services.append(StorageService(state, "127.0.0.1", PortHold(), graph))
    return built, services, raw_edges(built.shards)


def _ask(services, log=None):
    def ask(partition, request):
        if log is not None:
            log.append((partition, type(request).__name__))
        return InProcessReply(services[partition], request)
    return ask


def _train_edges(built, raw):
    """Per message type: (neighbour, sampler, edge id) of every edge storage samples (held-out
    supervision edges absent), and each sampling node's degree."""
    edges, degree = {}, {}
    for name, (src, dst, eids) in raw.items():
        et = EdgeType.parse(name)
        keep = ~held_out_mask(built, name, src, dst)
        if built.direction == "in":
            msg, nbr, anchor = et, src, dst
        else:
            msg, nbr, anchor = et.reverse(), dst, src
        edges[msg.as_tuple()] = set(zip(nbr[keep].tolist(), anchor[keep].tolist(),
                                        eids[keep].tolist()))
        degree[msg.as_tuple()] = np.bincount(anchor[keep], minlength=10**4)
    return edges, degree


def test_group_by_key_is_a_stable_counting_sort():
    keys = np.random.default_rng(0).integers(0, 7, 1000)
    order, starts = kernels.group_by_key(keys, 9)
    assert np.array_equal(order, np.argsort(keys, kind="stable"))
    assert np.array_equal(np.diff(starts), np.bincount(keys, minlength=9))


def _random_csr(seed: int, nodes: int = 300, edges: int = 4000):
    rng = np.random.default_rng(seed)
    degree = np.bincount(rng.integers(0, nodes, edges), minlength=nodes)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return indptr, rng.integers(0, 10**6, edges).astype(np.int64), rng


@pytest.mark.parametrize("fanout,replace", [(3, False), (3, True), (-1, False), (0, False)])
@pytest.mark.parametrize("wire", [np.int32, np.int64])
def test_pick_neighbour_ids_draws_what_pick_neighbours_draws(fanout, replace, wire):
    """The storage kernel gives the edges pick_neighbours picks (same seed, same draws), their
    neighbours in the wire dtype asked for, and per frontier node how many it took."""
    indptr, indices, rng = _random_csr(1)
    frontier = rng.permutation(300)[:120].astype(wire)
    pos, owner = kernels.pick_neighbours(indptr, frontier.astype(np.int64), fanout, replace, 7)
    pos2, nbr, counts = kernels.pick_neighbour_ids(indptr, indices, frontier, fanout, replace, 7,
                                                   np.empty(0, wire), np.empty(0, np.int32))
    assert np.array_equal(pos2, pos)
    assert nbr.dtype == wire and np.array_equal(nbr, indices[pos])
    assert counts.dtype == np.int32
    assert np.array_equal(counts, np.bincount(owner, minlength=frontier.shape[0]))


def test_merge_replies_puts_edges_back_in_frontier_order():
    """Parts that asked for interleaved frontier positions come back grouped by position,
    ascending, each node's edges in the order its partition sent them; ``order`` reorders
    anything else sent along (edge ids) the same way. Checked against a stable sort."""
    rng = np.random.default_rng(3)
    size = 50
    positions = rng.permutation(size)[:40]
    at = [np.sort(positions[:25]), np.sort(positions[25:])]  # two partitions' positions
    counts = [rng.integers(0, 4, a.shape[0]).astype(np.int32) for a in at]
    nbr = [rng.integers(0, 10**5, int(c.sum())).astype(np.int32) for c in counts]
    at_all, counts_all, nbr_all = (np.concatenate(x) for x in (at, counts, nbr))
    owner, out, order = kernels.merge_replies(size, at_all, counts_all, nbr_all)
    sent_owner = np.repeat(at_all, counts_all)
    expect = np.argsort(sent_owner, kind="stable")
    assert np.array_equal(order, expect)
    assert np.array_equal(owner, sent_owner[expect])
    assert out.dtype == np.int64 and np.array_equal(out, nbr_all[expect])


def test_gather_rows_is_take_from_an_offset_for_any_id_dtype():
    rows = np.arange(60, dtype=np.float32).reshape(20, 3)
    ids = np.array([105, 100, 119, 105], dtype=np.int32)
    assert np.array_equal(kernels.gather_rows(rows, ids, 100), rows[ids.astype(np.int64) - 100])
    assert kernels.gather_rows(rows, np.empty(0, np.int64), 0).shape == (0, 3)


def test_relabel_keeps_known_order_and_appends_new_ids_in_first_seen_order():
    rng = np.random.default_rng(5)
    known = rng.permutation(10**6)[:500].astype(np.int64)
    found = np.concatenate([rng.integers(0, 10**6, 3000), known[:100]]).astype(np.int64)
    nodes, local = kernels.relabel(known, found)
    assert np.array_equal(nodes[:500], known)
    assert np.array_equal(nodes[local], found)
    assert np.unique(nodes).shape[0] == nodes.shape[0]
    new = nodes[500:]
    seen, first_seen = set(known.tolist()), []
    for v in found.tolist():
        if v not in seen:
            seen.add(v)
            first_seen.append(v)
    assert new.tolist() == first_seen


def test_sampled_edges_exist_fanouts_hold_and_features_are_the_shards(parts):
    from graphstore.modes.replicated.graph_file import FeatureFile

    built, services, raw = parts
    meta = services[0].state.metadata
    edges, degree = _train_edges(built, raw)
    features = FeatureFile.open(built.features)
    rng = np.random.default_rng(3)
    k = 3
    batches = [{nt: rng.choice(n, size=min(n, 30), replace=False)
                for nt, n in meta.node_counts.items()} for _ in range(3)]
    log: list = []
    sampler = PartitionedSampler(meta, _ask(services, log), [k, k], with_edge_ids=True,
                                 generator=torch.Generator().manual_seed(0))
    subs = sampler.sample(batches)
    # one round: per hop one request per partition and edge type for all three batches
    assert sum(1 for _, kind in log if kind == "NeighboursRequest") <= 2 * 2 * len(edges)
    assert {p for p, _ in log} == {0, 1}
    for seeds, sub in zip(batches, subs):
        for nt, ids in sub.node.items():  # seeds first, in order, ids unique
            assert len(torch.unique(ids)) == len(ids)
            assert torch.equal(ids[:sub.num_seeds[nt]], torch.from_numpy(seeds[nt]))
        for msg, ei in sub.edge_index.items():
            src_t, _, dst_t = msg
            got = list(zip(sub.node[src_t][ei[0]].tolist(), sub.node[dst_t][ei[1]].tolist(),
                           sub.edge_id[msg].tolist()))
            assert all(e in edges[msg] for e in got), msg
            count = np.bincount(ei[1].numpy(), minlength=len(sub.node[dst_t]))
            n_seed = sub.num_seeds[dst_t]
            deg = degree[msg][sub.node[dst_t].numpy()]
            assert (count[:n_seed] == np.minimum(deg[:n_seed], k)).all(), msg
            assert (np.diff(ei[1].numpy()) >= 0).all()  # grouped by the sampling node, in order
    for sub, x in zip(subs, sampler.features(subs)):
        for nt, rows in x.items():
            assert torch.equal(rows, features.rows(nt, sub.node[nt]))
        assert set(x) == {nt for nt, d in meta.node_feature_dims.items() if d}


def test_same_generator_same_batches_and_no_edge_ids_unless_asked(parts):
    _, services, _ = parts
    meta = services[0].state.metadata
    nt = meta.node_types[0]
    seeds = [{nt: np.arange(0, 20)}, {nt: np.arange(20, 40)}]

    def run(seed):
        s = PartitionedSampler(meta, _ask(services), [2, 2],
                               generator=torch.Generator().manual_seed(seed))
        return s.sample(seeds)

    a, b, c = run(1), run(1), run(2)
    assert all(torch.equal(x.node[t], y.node[t]) for x, y in zip(a, b) for t in x.node)
    assert any(not torch.equal(x.node[t], y.node[t]) for x, y in zip(a, c) for t in x.node)
    assert a[0].edge_id == {}
    with pytest.raises(UsageError, match="must be in"):
        PartitionedSampler(meta, _ask(services), [2]).sample(
            [{nt: np.array([meta.node_counts[nt]])}])


def test_storage_refuses_nodes_it_does_not_own(parts):
    _, services, _ = parts
    meta = services[0].state.metadata
    et = meta.edge_types[0]
    anchor = et.dst_node_type if meta.edge_dir == "in" else et.src_node_type
    lo, hi = services[1].state.owned_ranges[anchor]
    with pytest.raises(UsageError, match="outside partition 0"):
        services[0].answer(P.NeighboursRequest(et, torch.tensor([lo]), 2, False, 0))


def test_ids_travel_as_int32_below_2_31_nodes_and_the_same_either_way(parts):
    """Requests and replies carry int32 ids for a type of fewer than 2^31 nodes (half the
    bytes); an int64 request (a type of more nodes) gets the same neighbours; a wider id than the
    wire type holds is never narrowed."""
    _, services, _ = parts
    meta = services[0].state.metadata
    et = meta.edge_types[0]
    anchor = et.dst_node_type if meta.edge_dir == "in" else et.src_node_type
    lo, hi = services[0].state.owned_ranges[anchor]
    ids = np.arange(lo, hi, dtype=np.int64)
    narrow = P.wire_ids(ids, meta.node_counts[anchor])
    wide = P.wire_ids(ids, 2**31 + 1)
    assert narrow.dtype == torch.int32 and wide.dtype == torch.int64
    assert np.array_equal(narrow.numpy(), ids) and np.array_equal(wide.numpy(), ids)
    a = services[0].answer(P.NeighboursRequest(et, narrow, 3, False, 11))
    b = services[0].answer(P.NeighboursRequest(et, wide, 3, False, 11))
    assert a.neighbours.dtype == torch.int32 and a.counts.dtype == torch.int32
    assert a.neighbours.numel() > 0
    assert torch.equal(a.neighbours, b.neighbours) and torch.equal(a.counts, b.counts)
    rows = services[0].answer(P.FeatureRowsRequest(anchor, narrow)).rows \
        if meta.node_feature_dims.get(anchor) else None
    if rows is not None:
        assert torch.equal(rows, services[0].answer(P.FeatureRowsRequest(anchor, wide)).rows)
    with pytest.raises(UsageError, match="int32 or int64"):
        P.NeighboursRequest(et, narrow.to(torch.int16), 3, False, 11)


def _node_inputs(services, node_type):
    from graphlearn_torch.sampler import NodeSamplerInput

    return [NodeSamplerInput(node=torch.from_numpy(s.state.owned_ids(node_type)),
                             input_type=node_type) for s in services]


def _sampling(kind, batch_size, shuffle=True, drop_last=False):
    from graphstore.dataset.graph_dataset import LoaderOptions, SamplingOptions

    return (SamplingOptions(kind, [2, 2], batch_size, shuffle, drop_last, "in", 7),
            LoaderOptions("nbr" if kind == "node" else "ablp", None, 4, 2))


def test_an_epoch_covers_every_seed_once_mixing_partitions(parts):
    _, services, _ = parts
    meta = services[0].state.metadata
    nt = meta.node_types[0]
    sampling, options = _sampling("node", 16)
    loader = type("Loader", (), {})()
    it = PartitionedIteration.from_loader(meta, _ask(services), loader, _node_inputs(services, nt),
                                          sampling, options)
    bound = services[1].state.owned_ranges[nt][0]
    for _ in range(2):
        it.start_epoch()
        seen, mixed = [], 0
        while True:
            try:
                batch = it.next()
            except StopIteration:
                break
            seeds = batch[nt].batch if not meta.is_homogeneous else batch.batch
            seen += seeds.tolist()
            mixed += int(bool((seeds < bound).any() and (seeds >= bound).any()))
        assert sorted(seen) == list(range(meta.node_counts[nt]))
        assert mixed > 0  # shuffled across partitions: batches hold seeds of both
    it.shutdown()


def test_link_batches_carry_their_pairs(parts):
    from graphstore.dataset.glt_adapter import LabeledEdgeInput

    _, services, _ = parts
    meta = services[0].state.metadata
    sup = meta.supervision_edge_types[0]
    inputs = []
    for s in services:
        pairs = s.answer(P.AblpInputRequest(sup, "train", 0, 1)).input.positive_labels[
            sup.as_tuple()]
        inputs.append(LabeledEdgeInput(pairs[0].contiguous(), pairs[1].contiguous(),
                                       torch.ones(pairs.size(1), dtype=torch.long),
                                       sup.as_tuple()))
    want = sorted(p for i in inputs for p in zip(i.row.tolist(), i.col.tolist()))
    loader = type("Loader", (), {"supervision_edge_type": sup.as_tuple()})()
    sampling, options = _sampling("link", 8)
    it = PartitionedIteration.from_loader(meta, _ask(services), loader, inputs, sampling, options)
    it.start_epoch()
    got = []
    while True:
        try:
            batch = it.next()
        except StopIteration:
            break
        a = batch[batch.anchor_node_type].node[batch.y_positive[0]]
        b = batch[batch.label_node_type].node[batch.y_positive[1]]
        got += list(zip(a.tolist(), b.tolist()))
    assert sorted(got) == want


def test_a_partition_failure_is_raised_not_skipped(parts):
    _, services, _ = parts
    meta = services[0].state.metadata
    nt = meta.node_types[0]
    good = _ask(services)
    calls = {"n": 0}

    def flaky(partition, request):
        calls["n"] += 1
        if partition == 1 and isinstance(request, P.FeatureRowsRequest):
            raise RuntimeFailure("storage 1 went away")
        return good(partition, request)

    sampling, options = _sampling("node", 8, shuffle=False)
    it = PartitionedIteration.from_loader(meta, flaky, type("L", (), {})(),
                                          _node_inputs(services, nt), sampling, options)
    it.start_epoch()
    with pytest.raises(RuntimeFailure, match="storage 1 went away"):
        while True:
            it.next()
    it.shutdown()
    assert not [t for t in threading.enumerate() if t.name.startswith("graphstore-sampler")
                and t.is_alive() and not t.daemon]


def test_a_failed_rpc_names_who_asked_the_request_and_the_peer():
    """RpcReply: the peer's (or the RPC's) error comes out as a RuntimeFailure naming the loader's
    mode, the request and the peer; a reply of the wrong type is refused."""
    request = P.FeatureRowsRequest("user", torch.arange(3))
    failed = torch.futures.Future()
    failed.set_exception(RuntimeError("peer went away"))
    with pytest.raises(RuntimeFailure, match=r"^colocated loader: FeatureRowsRequest to partition "
                                             r"1 \(compute rank 3\) failed: RuntimeError: "
                                             r"peer went away"):
        RpcReply(request, "colocated loader", "partition 1 (compute rank 3)", failed).wait()
    wrong = torch.futures.Future()
    wrong.set_result(P.PairsReply(torch.zeros((2, 0), dtype=torch.long)))
    with pytest.raises(RuntimeFailure, match="answered FeatureRowsRequest with PairsReply"):
        RpcReply(request, "graph-store loader", "storage rank 0", wrong).wait()
    ok = torch.futures.Future()
    ok.set_result(P.FeatureRowsReply(torch.zeros((3, 2))))
    assert RpcReply(request, "graph-store loader", "storage rank 0", ok).wait().rows.shape == (3, 2)
