"""Splitter (pure, hash-deterministic) and the storage queries built on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphstore.config import EdgeType
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.runtime.errors import UsageError
from graphstore.formats.shards.format import EdgeTypeInfo, Manifest, NodeTypeInfo
from graphstore.dataset.splitter import (DistEdgeLinkSplitter, DistNodeAnchorLinkSplitter, SplitRules,
                                 splitmix64)
from graphstore.dataset import queries
from graphstore.dataset.partition_graph import StorageState, Supervision


def test_split_is_deterministic_disjoint_and_honours_fractions():
    ids = np.arange(200_000, dtype=np.int64)
    s = DistNodeAnchorLinkSplitter(num_val=0.1, num_test=0.2)
    codes = s.assign("user", ids, len(ids))
    assert np.array_equal(codes, s.assign("user", ids, len(ids)))  # rerun: same split
    # any subset (another storage rank's anchors) gets the same codes: no coordination needed
    sub = ids[::7]
    assert np.array_equal(s.assign("user", sub, len(ids)), codes[::7])
    frac = np.bincount(codes, minlength=3) / len(ids)
    assert abs(frac[1] - 0.1) < 0.005 and abs(frac[2] - 0.2) < 0.005
    other = DistNodeAnchorLinkSplitter(num_val=0.1, num_test=0.2, seed=1).assign("user", ids, len(ids))
    assert (other != codes).mean() > 0.2  # the seed changes the assignment
    assert (s.assign("item", ids, len(ids)) != codes).mean() > 0.2  # so does the node type


def test_integer_counts_and_bad_arguments():
    s = DistNodeAnchorLinkSplitter(num_val=1000, num_test=2000)
    codes = s.assign("user", np.arange(100_000), 100_000)
    assert abs((codes == 2).sum() - 2000) < 300
    with pytest.raises(UsageError, match="num_val \\+ num_test"):
        DistNodeAnchorLinkSplitter(num_val=0.6, num_test=0.5).assign("u", np.arange(3), 3)
    with pytest.raises(UsageError, match="num_val"):
        DistNodeAnchorLinkSplitter(num_val=-0.1)
    with pytest.raises(UsageError, match="sampling_direction"):
        DistNodeAnchorLinkSplitter(sampling_direction="sideways")


def test_splitmix64_is_a_bijection_on_a_sample():
    x = np.arange(100_000, dtype=np.uint64)
    assert len(np.unique(splitmix64(x))) == len(x)


BUYS = EdgeType(src_node_type="user", relation="buys", dst_node_type="item")


def _t(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.int64))


def _state() -> StorageState:
    """Rows grouped by split (train: anchors 1, 6, 9; val: 4), as storage holds them."""
    src = np.array([1, 1, 1, 6, 6, 9, 4], dtype=np.int64)
    dst = np.array([10, 11, 12, 14, 15, 16, 13], dtype=np.int64)
    sup = Supervision(BUYS, _t(src), _t(dst),
                      {"all": _t([1, 4, 6, 9]), "train": _t([1, 6, 9]),
                       "val": _t([4]), "test": _t([])},
                      {"all": (0, 7), "train": (0, 6), "val": (6, 7), "test": (7, 7)})
    return _one_partition_state(sup, users=10, items=20)


def _manifest(users: int, items: int, edges: int) -> Manifest:
    """One partition of a user-buys-item graph with its reverse type (dense ids = ranks)."""
    def edge(src: str, rel: str, dst: str, **kw) -> EdgeTypeInfo:
        return EdgeTypeInfo(src_node_type=src, relation=rel, dst_node_type=dst, count=edges,
                            counts_per_partition=(edges,), has_weight=False, feature_dim=0, **kw)
    return Manifest(
        schema_version=3, num_partitions=1, sample_edge_direction="in",
        node_types={nt: NodeTypeInfo(count=n, id_dtype="int64", feature_dim=0,
                                     counts_per_partition=(n,))
                    for nt, n in (("user", users), ("item", items))},
        edge_types={"user__buys__item": edge("user", "buys", "item", is_supervision=True,
                                             labels_per_partition=(edges,)),
                    "item__rev_buys__user": edge("item", "rev_buys", "user", is_supervision=False,
                                                 reverse_of="user__buys__item")},
        files={}, config_hash="-", created_at="-")


def _one_partition_state(sup: Supervision, users: int, items: int) -> StorageState:
    """A single-partition user-buys-item storage state holding ``sup``."""
    meta = DatasetMetadata(num_partitions=1, edge_dir="in", node_types=("user", "item"),
                           edge_types=(BUYS,), supervision_edge_types=(BUYS,),
                           node_counts={"user": users, "item": items},
                           edge_counts_per_partition={BUYS: (len(sup.anchor_src),)},
                           node_feature_dims={"user": 0, "item": 0}, has_splits=True)
    return StorageState(partition=0, metadata=meta,
                        owned_ranges={"user": (0, users), "item": (0, items)},
                        supervision={BUYS: sup})


def test_slices_cover_every_id_once_for_any_world_size():
    values = np.arange(17)
    for world in (1, 2, 3, 5, 17, 20):
        got = np.concatenate([queries.contiguous_slice(values, r, world) for r in range(world)])
        assert np.array_equal(got, values)
    with pytest.raises(UsageError):
        queries.contiguous_slice(values, 3, 3)


def test_ablp_input_returns_every_label_of_each_anchor():
    s = _state()
    parts = [queries.ablp_input(s, "train", r, 2, BUYS) for r in range(2)]
    pairs = np.concatenate([p.positive_labels[("user", "buys", "item")].numpy() for p in parts], 1)
    assert sorted(map(tuple, pairs.T)) == [(1, 10), (1, 11), (1, 12), (6, 14), (6, 15), (9, 16)]
    assert sorted(np.concatenate([p.anchor_nodes.numpy() for p in parts])) == [1, 6, 9]
    assert queries.ablp_input(s, "test", 0, 1, BUYS).positive_labels[
        ("user", "buys", "item")].shape == (2, 0)
    with pytest.raises(UsageError, match="not a supervision edge type"):
        queries.ablp_input(s, "train", 0, 1, EdgeType.parse("item__x__user"))
    assert queries.node_ids(s, 0, 1, "user", "val").tolist() == [4]
    assert queries.node_ids(s, 1, 2, "item", None).tolist() == list(range(10, 20))


def test_edge_split_is_per_edge_deterministic_and_honours_fractions():
    rng = np.random.default_rng(3)
    src = rng.integers(0, 1000, 200_000)
    dst = rng.integers(0, 5000, 200_000)
    s = DistEdgeLinkSplitter(num_val=0.1, num_test=0.2)
    codes = s.assign_edges("user__buys__item", src, dst, len(src))
    assert np.array_equal(codes, s.assign_edges("user__buys__item", src, dst, len(src)))
    # any subset (another storage rank's edges, or the reverse type's flipped copy) agrees
    assert np.array_equal(s.assign_edges("user__buys__item", src[::7], dst[::7], len(src)),
                          codes[::7])
    frac = np.bincount(codes, minlength=3) / len(src)
    assert abs(frac[1] - 0.1) < 0.005 and abs(frac[2] - 0.2) < 0.005
    # warm start: most anchors have edges in training and in test
    train_anchors = set(src[codes == 0].tolist())
    test_anchors = set(src[codes == 2].tolist())
    assert len(train_anchors & test_anchors) > 0.9 * len(test_anchors)
    # the pair decides, not the anchor or the label alone
    same_src = src == src[0]
    assert len(set(codes[same_src].tolist())) > 1
    assert (s.assign_edges("user__buys__item", dst, src, len(src)) != codes).mean() > 0.2
    assert DistEdgeLinkSplitter.per_edge and not DistNodeAnchorLinkSplitter.per_edge


def _edge_split_state() -> StorageState:
    """Labels grouped by their per-edge split, then sorted by anchor, as storage holds them."""
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 50, 3000), rng.integers(0, 80, 3000)
    codes = DistEdgeLinkSplitter(num_val=0.2, num_test=0.2).assign_edges(
        "user__buys__item", src, dst, len(src))
    order = np.lexsort((src, codes))
    src, dst, codes = src[order], dst[order], codes[order]
    by_split = {"all": _t(np.unique(src))}
    by_split.update({s: _t(np.unique(src[codes == c])) for s, c in (("train", 0), ("val", 1),
                                                                    ("test", 2))})
    bounds = np.searchsorted(codes, [0, 1, 2, 3])
    rows = {s: (int(bounds[c]), int(bounds[c + 1])) for s, c in (("train", 0), ("val", 1),
                                                                 ("test", 2))}
    sup = Supervision(BUYS, _t(src), _t(dst), by_split, {"all": (0, len(src)), **rows})
    return _one_partition_state(sup, users=50, items=80)


def test_edge_split_ablp_inputs_hold_each_label_once_in_its_own_split():
    s = _edge_split_state()
    sup = s.supervision[BUYS]
    splitter = DistEdgeLinkSplitter(num_val=0.2, num_test=0.2)
    src, dst = sup.anchor_src.numpy(), sup.label_dst.numpy()
    codes = splitter.assign_edges("user__buys__item", src, dst, len(src))
    everything = []
    for split, code in (("train", 0), ("val", 1), ("test", 2)):
        parts = [queries.ablp_input(s, split, r, 3, BUYS) for r in range(3)]
        pairs = np.concatenate([p.positive_labels[("user", "buys", "item")].numpy() for p in parts], 1)
        want = np.stack([src[codes == code], dst[codes == code]])
        assert sorted(map(tuple, pairs.T)) == sorted(map(tuple, want.T)), split
        anchors = np.concatenate([p.anchor_nodes.numpy() for p in parts])
        assert np.array_equal(anchors, np.unique(want[0]))
        everything.extend(map(tuple, pairs.T))
    assert sorted(everything) == sorted(zip(src.tolist(), dst.tolist()))
    # a filtered evaluation skips every known positive of the anchor among its candidates
    cand = np.array([3, 7, 11, 79])
    known = queries.positive_pairs_to(s, BUYS, cand).numpy()
    want = [(a, b) for a, b in zip(src.tolist(), dst.tolist()) if b in cand]
    assert sorted(map(tuple, known.T)) == sorted(want) and len(want) > 0


def test_edge_split_keeps_only_training_edges_for_message_passing():
    rng = np.random.default_rng(9)
    src, dst = rng.integers(0, 50, 2000), rng.integers(0, 80, 2000)
    splitter = DistEdgeLinkSplitter(num_val=0.1, num_test=0.1)
    codes = splitter.assign_edges("user__buys__item", src, dst, 2000)
    rules = SplitRules(splitter, _manifest(50, 80, 2000))  # one partition: dense ids are ranks
    keep = rules.keep("user__buys__item", src, dst)
    keep_rev = rules.keep("item__rev_buys__user", dst, src)
    assert np.array_equal(keep, codes == 0) and np.array_equal(keep_rev, codes == 0)
    assert 0.75 < keep.mean() < 0.85


def test_node_split_keeps_only_training_anchors_edges_in_both_directions():
    """The reverse type (item -rev_buys-> user) holds each supervision edge flipped: its anchor is
    the edge's *destination*. Users and items share id ranges, so hashing the item side as if it
    were the user would pick other edges (checked below: that mask differs)."""
    rng = np.random.default_rng(11)
    users, items = 400, 400
    src, dst = rng.integers(0, users, 3000), rng.integers(0, items, 3000)
    splitter = DistNodeAnchorLinkSplitter(num_val=0.2, num_test=0.2)
    codes = splitter.assign("user", np.arange(users), users)  # per user id
    manifest = _manifest(users, items, 3000)
    keep = SplitRules(splitter, manifest).keep("user__buys__item", src, dst)
    keep_rev = SplitRules(splitter, manifest).keep("item__rev_buys__user", dst, src)
    assert np.array_equal(keep, codes[src] == 0)  # forward: the source is the anchor
    assert np.array_equal(keep_rev, codes[src] == 0)  # reverse: its destination (src above)
    heldout = set(np.flatnonzero(codes != 0).tolist())
    assert not heldout & set(src[keep_rev].tolist())  # no held-out anchor keeps an in-edge
    assert not heldout & set(src[keep].tolist())
    assert 0.5 < keep.mean() < 0.7  # ~60 % of users train: the masks are not trivially all/none
    wrong_side = splitter.assign("user", dst, users) == 0  # hashing the item end instead
    assert (wrong_side != keep_rev).mean() > 0.3
    # labels not converted to edges: no supervision edge is in the graph, either direction
    off = DistNodeAnchorLinkSplitter(num_val=0.2, num_test=0.2, should_convert_labels_to_edges=False)
    assert not SplitRules(off, manifest).keep("item__rev_buys__user", dst, src).any()


@pytest.mark.parametrize("splitter", ["graphstore.DistNodeAnchorLinkSplitter",
                                      "graphstore.DistEdgeLinkSplitter"])
def test_splits_do_not_depend_on_the_partition_count(tmp_path, splitter):
    """The same raw graph in 2 and in 3 partitions: every anchor (node split) or label (edge
    split) lands in the same split, read back as raw ids. Dense ids differ between the two."""
    from graphstore.config import StorageArgs
    from graphstore.formats.shards.reader import ShardSet
    from graphstore.dataset.partition_graph import build_storage_dataset
    from tests.unit.test_partition import make_raw, run_partition, task_dict

    make_raw(tmp_path / "raw")
    args = StorageArgs.model_validate({"sample_edge_direction": "in", "splitter_cls_path": splitter,
                                       "splitter_kwargs": {"num_val": 0.3, "num_test": 0.3}})
    got = {}
    for parts in (2, 3):
        out = tmp_path / f"p{parts}"
        run_partition(tmp_path, task_dict(tmp_path / "raw"), out, num_partitions=parts)
        shards = ShardSet.open(str(out))
        users = shards.id_map("user").column("raw_id").to_pylist()
        items = shards.id_map("item").column("raw_id").to_pylist()
        seen = {}
        for p in range(parts):
            _, state = build_storage_dataset(shards, p, args, "in")
            for split in ("train", "val", "test"):
                pairs = queries.ablp_input(state, split, 0, 1, BUYS).positive_labels[BUYS.as_tuple()]
                seen.setdefault(split, set()).update(
                    (users[a], items[b]) for a, b in pairs.T.tolist())
        got[parts] = seen
    assert all(got[2][s] for s in ("train", "val", "test"))  # every split is populated
    assert got[2] == got[3]
    assert ShardSet.open(str(tmp_path / "p2")).id_map("user").column("raw_id").to_pylist() != \
        ShardSet.open(str(tmp_path / "p3")).id_map("user").column("raw_id").to_pylist()


@pytest.mark.parametrize("splitter", [None, "graphstore.DistNodeAnchorLinkSplitter",
                                      "graphstore.DistEdgeLinkSplitter"])
def test_label_rows_are_grouped_by_split_so_a_ranks_share_is_one_range(tmp_path, splitter):
    """Storage holds each split's labels as one run of rows sorted by anchor: a compute rank's
    ``fetch_ablp_input`` share is one range of rows (``ablp_rows``), equal, in order, to the
    copy ``ablp_input`` replies with."""
    from graphstore.config import StorageArgs
    from graphstore.formats.shards.reader import ShardSet
    from graphstore.dataset.partition_graph import build_storage_dataset
    from tests.unit.test_partition import make_raw, run_partition, task_dict

    make_raw(tmp_path / "raw")
    run_partition(tmp_path, task_dict(tmp_path / "raw"), tmp_path / "shards", num_partitions=2)
    shards = ShardSet.open(str(tmp_path / "shards"))
    storage = {"sample_edge_direction": "in"}
    if splitter:
        storage.update(splitter_cls_path=splitter,
                       splitter_kwargs={"num_val": 0.3, "num_test": 0.3})
    splits = ("train", "val", "test") if splitter else (None,)
    for p in range(2):
        _, state = build_storage_dataset(shards, p, StorageArgs.model_validate(storage), "in")
        sup = state.supervision[BUYS]
        src, dst = sup.anchor_src.numpy(), sup.label_dst.numpy()
        assert sup.split_rows["all"] == (0, len(src))
        runs = sup.sorted_runs
        assert runs[0][0] == 0 and runs[-1][1] == len(src)
        assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))  # the runs tile the rows
        assert all((np.diff(src[a:b]) >= 0).all() for a, b in runs)
        every = set()
        for split in splits:
            whole = queries.ablp_input(state, split, 0, 1, BUYS).positive_labels[BUYS.as_tuple()]
            if split:  # the split's run holds exactly its pairs
                a, b = sup.split_rows[split]
                assert sorted(zip(src[a:b].tolist(), dst[a:b].tolist())) == sorted(
                    map(tuple, whole.T.tolist())), split
            every |= set(map(tuple, whole.T.tolist()))
            for world in (1, 3):
                for rank in range(world):
                    copy = queries.ablp_input(state, split, rank, world, BUYS)
                    want = copy.positive_labels[BUYS.as_tuple()]
                    start, end = queries.ablp_rows(state, split, rank, world, BUYS)
                    rows = torch.stack([sup.anchor_src[start:end], sup.label_dst[start:end]])
                    assert torch.equal(rows, want), (split, rank, world)
                    if want.numel():  # the reply is a copy, not a view of the state
                        assert want.untyped_storage().data_ptr() != \
                            sup.anchor_src.untyped_storage().data_ptr()
        assert every == set(zip(src.tolist(), dst.tolist()))
        # every split at once: sorted by anchor, all rows; not one range when there are splits
        owned = sup.anchors_by_split["all"].numpy()
        pairs = queries.labels_of(sup, owned)
        assert (np.diff(pairs[0]) >= 0).all()
        assert sorted(map(tuple, pairs.T.tolist())) == sorted(zip(src.tolist(), dst.tolist()))
        if splitter:
            assert queries.ablp_rows(state, None, 0, 1, BUYS) is None
