"""The graph file of replicated mode, checked against the shard set it was written from (read
back through the shard reader), and opened without copying: a 4x larger file does not grow the
anonymous memory of the process that maps and reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated import FeatureFile, GraphFile, GraphFileError, write_graph_file
from graphstore.modes.replicated.format import GraphHeader
from graphstore.modes.replicated.sections import SectionWriter
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset.splitter import SPLIT_CODE
from tests.shard_sets import ranks
from tests.replicated_graphs import REPO, build, held_out_mask, raw_edges, raw_labels

CASES = {
    "hetero-in-node-split": dict(kind="hetero", direction="in"),
    "homo-out-edge-split": dict(kind="homo", direction="out",
                                splitter="graphstore.dataset.splitter.DistEdgeLinkSplitter"),
    "hetero-out-no-split": dict(kind="hetero", direction="out", splitter=None),
}


def _rows(indptr: torch.Tensor) -> np.ndarray:
    """The CSR row (anchor) of every stored edge."""
    ip = indptr.numpy()
    return np.repeat(np.arange(len(ip) - 1), np.diff(ip))


def _by_eid(*cols: np.ndarray) -> list[tuple]:
    order = np.argsort(cols[-1], kind="stable")
    return list(zip(*(c[order].tolist() for c in cols)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_file_holds_the_shards_edges_in_the_sampling_direction(tmp_path, case):
    built = build(tmp_path, **CASES[case])
    g = GraphFile.open(built.graph, verify=True)
    raw = raw_edges(built.shards)
    assert g.edge_dir == built.direction
    assert g.views == (("full",) if CASES[case].get("splitter", 1) is None else ("full", "train"))
    checked_removal = False
    for name, (src, dst, eids) in raw.items():
        et = EdgeType.parse(name)
        anchor, nbr = (dst, src) if built.direction == "in" else (src, dst)
        for view in g.views:
            keep = ~held_out_mask(built, name, src, dst) if view == "train" else np.ones(len(src), bool)
            indptr, indices, file_eids = g.csr(et, view)
            n_anchor = g.metadata.node_counts[et.dst_node_type if built.direction == "in"
                                             else et.src_node_type]
            assert len(indptr) == n_anchor + 1 and int(indptr[0]) == 0
            got = _by_eid(_rows(indptr), indices.numpy(), file_eids.numpy())
            assert got == _by_eid(anchor[keep], nbr[keep], eids[keep]), (name, view)
            rows = _rows(indptr)  # within a row, ascending edge id
            same_row = rows[1:] == rows[:-1]
            assert (np.diff(file_eids.numpy())[same_row] > 0).all()
            checked_removal |= view == "train" and not keep.all()
    if "train" in g.views:
        assert checked_removal, "the splitter removed no edge: the train view was not tested"


def test_labels_and_split_anchors_are_storages(tmp_path):
    built = build(tmp_path, kind="hetero")
    g = GraphFile.open(built.graph)
    from graphstore.dataset.partition_graph import load_splitter

    splitter = load_splitter(built.storage_args)
    for name, (a, lab) in raw_labels(built.shards).items():
        et = EdgeType.parse(name)
        pairs = g.positives(et, np.arange(g.metadata.node_counts[et.src_node_type]))
        assert sorted(zip(*pairs.tolist())) == sorted(zip(a.tolist(), lab.tolist()))
        rank = ranks(ShardSet.open(built.shards), et.src_node_type)  # splits hash ranks
        codes = splitter.assign(et.src_node_type, rank[np.unique(a)],
                                g.metadata.node_counts[et.src_node_type])
        for split, code in SPLIT_CODE.items():
            want = np.unique(a)[codes == code]
            assert np.array_equal(g.anchors(et, split), want)
            some = want[:5]
            got = g.positives(et, some, split)
            assert sorted(zip(*got.tolist())) == sorted((x, y) for x, y in zip(a.tolist(), lab.tolist())
                                                        if x in set(some.tolist()))
        assert np.array_equal(g.anchors(et, None), np.unique(a))


def test_train_view_keeps_exactly_what_graph_store_storage_keeps(tmp_path):
    """Storage's own loading (GLT dataset, splits) against the file's train view and anchors."""
    from graphstore.dataset.partition_graph import build_storage_dataset

    built = build(tmp_path, kind="hetero")
    g = GraphFile.open(built.graph)
    shards = ShardSet.open(built.shards)
    kept = {et: 0 for et in g.metadata.edge_types}
    anchors: dict = {}
    for p in range(2):
        _, state = build_storage_dataset(shards, p, built.storage_args, "in")
        for et, n in state.edge_counts.items():
            kept[et] += n
        for et, sup in state.supervision.items():
            for split, ids in sup.anchors_by_split.items():
                anchors.setdefault((et, split), []).append(ids.numpy())
    for et, n in kept.items():
        assert g.header.edge_types[str(et)].views["train"].count == n, et
    for (et, split), parts in anchors.items():
        assert np.array_equal(g.anchors(et, None if split == "all" else split),
                              np.sort(np.concatenate(parts)))


def test_features_file_rows_are_the_shards_features_by_dense_id(tmp_path):
    built = build(tmp_path, kind="hetero")
    f = FeatureFile.open(built.features, verify=True)
    f.check_matches(GraphFile.open(built.graph))
    s = ShardSet.open(built.shards)
    for nt, info in s.manifest.node_types.items():
        x = f.x(nt)
        assert tuple(x.shape) == (info.count, info.feature_dim) and x.dtype == torch.float32
        for p in range(2):
            node = s.load_partition(p).nodes[nt]
            assert np.array_equal(x.numpy()[node.ids], node.feats)


def test_header_names_the_shards_and_their_id_maps(tmp_path):
    built = build(tmp_path, kind="hetero")
    h = GraphFile.open(built.graph).header
    m = ShardSet.open(built.shards).manifest
    assert h.format == "graphstore-graph" and h.schema_version == 1 and h.kind == "graph"
    assert h.source["config_hash"] == m.config_hash
    for nt in m.node_types:
        (entry,) = h.id_maps[nt]
        assert os.path.isfile(entry["uri"]) and entry["uri"].startswith(h.source["uri"])
        assert entry["bytes"] == os.path.getsize(entry["uri"]) > 0
        assert entry["uri"].endswith(f"/id_map/{nt}.parquet")
    assert h.splitter["cls_path"] == "graphstore.DistNodeAnchorLinkSplitter"


def test_damaged_or_foreign_files_are_refused_with_the_file_named(tmp_path):
    built = build(tmp_path, kind="homo", direction="in")
    data = Path(built.graph).read_bytes()
    g = GraphFile.open(built.graph)
    name, section = next((k, s) for k, s in g.header.sections.items() if s.nbytes > 64)
    bad = tmp_path / "flipped.bin"
    flipped = bytearray(data)
    flipped[section.offset + 8] ^= 0xFF
    bad.write_bytes(bytes(flipped))
    GraphFile.open(str(bad))  # opening checks the header only...
    with pytest.raises(GraphFileError, match=f"{bad}: section '{name}' fails its checksum"):
        GraphFile.open(str(bad), verify=True)  # ...verify reads every section
    cases = {
        "short.bin": data[:-10],
        "header.bin": data[:-3] + bytes(b ^ 0x20 for b in data[-3:]),
        "foreign.bin": b"PAR1" + data[4:],
        "empty.bin": b"",
    }
    for fname, content in cases.items():
        (tmp_path / fname).write_bytes(content)
        with pytest.raises(GraphFileError, match=str(tmp_path / fname)):
            GraphFile.open(str(tmp_path / fname))
    with pytest.raises(GraphFileError, match="not found"):
        GraphFile.open(str(tmp_path / "missing.bin"))
    with pytest.raises(GraphFileError, match="not a graphstore features file"):
        FeatureFile.open(built.graph)


def test_writer_never_overwrites_a_file_it_did_not_write(tmp_path):
    built = build(tmp_path, kind="homo")
    theirs = tmp_path / "theirs.bin"
    theirs.write_bytes(b"somebody else's data")
    with pytest.raises(UsageError, match="not overwritten"):
        write_graph_file(built.shards, str(theirs))
    assert theirs.read_bytes() == b"somebody else's data"
    before = GraphFile.open(built.graph).header.created_at
    write_graph_file(built.shards, built.graph, storage_args=built.storage_args)  # ours: replaced
    GraphFile.open(built.graph, verify=True)
    assert GraphFile.open(built.graph).header.created_at >= before
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_mapped_tensors_share_the_files_pages(tmp_path):
    built = build(tmp_path, kind="homo")
    g = GraphFile.open(built.graph)
    (et,) = g.metadata.edge_types
    indptr, indices, _ = g.csr(et, "full")
    base = g._base
    lo, hi = base.ctypes.data, base.ctypes.data + len(base)
    assert lo <= indices.data_ptr() < hi and lo <= indptr.data_ptr() < hi
    # the map is read-only: a write into these pages would fault, never change the file
    assert not g.array(g.header.edge_types[str(et)].views["full"].indices).flags.writeable


# -- memory: opening and reading a 4x larger file ------------------------------------------------
