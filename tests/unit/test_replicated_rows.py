"""Read tasks' rows without Ray: link rows on a homogeneous graph (anchors and labels of one node
type), a train view left empty by ``should_convert_labels_to_edges: false``, and the rows'
pairs against the file's labels."""

from __future__ import annotations

import numpy as np
import torch

from graphstore.modes.replicated import GraphFile, collate_to_pyg
from graphstore.modes.replicated.datasource import _plan, _read
from tests.replicated_graphs import build


def _rows(built, **kw):
    g = GraphFile.open(built.graph)
    args = dict(num_neighbors=[3, 2], input_nodes=None, batch_size=40, replace=False,
                features_path=built.features, view=None, supervision_edge_type=None, split=None,
                num_negatives=0, random_seed=0, drop_last=False)
    args.update(kw)
    plan = _plan(g, built.graph, **args)
    return g, plan, [collate_to_pyg(t) for i in range(2)
                     for t in _read(plan, i * plan.count // 2, (i + 1) * plan.count // 2, i)]


def test_homogeneous_link_rows_index_one_node_list(tmp_path):
    built = build(tmp_path, kind="homo")
    g, _, batches = _rows(built, supervision_edge_type=g_sup(built), split="val", num_negatives=5)
    (sup,) = g.metadata.supervision_edge_types
    got = []
    for d in batches:
        assert d.y_positive.shape[1] <= 40 and len(d.y_negative) == 5
        assert int(d.y_positive.max()) < d.batch_size and int(d.y_negative.max()) < d.batch_size
        got.append(torch.stack([d.n_id[d.y_positive[0]], d.n_id[d.y_positive[1]]]))
    want = g.positives(sup, g.anchors(sup, "val"), "val")
    assert sorted(zip(*torch.cat(got, 1).tolist())) == sorted(zip(*want.tolist()))


def g_sup(built):
    (sup,) = GraphFile.open(built.graph).metadata.supervision_edge_types
    return sup


def test_train_view_without_supervision_edges_samples_none_of_them(tmp_path):
    built = build(tmp_path, kind="hetero", splitter="graphstore.DistNodeAnchorLinkSplitter")
    # rewrite with should_convert_labels_to_edges false: every supervision edge leaves the view
    from graphstore.modes.replicated import write_graph_file

    args = built.storage_args.model_copy(update={"splitter_kwargs": {
        **dict(built.storage_args.splitter_kwargs), "should_convert_labels_to_edges": False}})
    write_graph_file(built.shards, built.graph, storage_args=args)
    g, plan, batches = _rows(built, input_nodes="user")
    assert plan.view == "train"
    for name, entry in g.header.edge_types.items():
        want_empty = entry.is_supervision or entry.reverse_of is not None
        assert (entry.views["train"].count == 0) == want_empty, name
    assert sum(int(d["user"].batch_size) for d in batches) == g.metadata.node_counts["user"]
    for d in batches:
        for et in d.edge_types:
            if "buys" in et[1]:
                assert d[et].edge_index.shape[1] == 0
    assert np.all(GraphFile.open(built.graph).array(
        g.header.edge_types["user__buys__item"].views["full"].indptr)[-1] > 0)


def test_features_come_from_the_file_beside_the_graph_unless_a_path_is_given(tmp_path, caplog):
    """Seed 004's snippet passes no ``features_path``: the features file the partition task wrote
    beside the graph file is used; an explicit path wins; a graph file alone samples ``x=None``
    and says so once."""
    import shutil

    from graphstore.modes.replicated.datasource import sample_batches, sampling_plan
    from graphstore.modes.replicated.graph_file import FeatureFile

    built = build(tmp_path / "run", kind="hetero")
    x = FeatureFile.open(built.features).x("item")
    plan = sampling_plan(built.graph, [3, 2], "item", batch_size=40)
    assert plan.features_path == built.features
    batch = next(sample_batches(plan))
    assert torch.equal(batch["item"].x, x[batch["item"].n_id])

    other = tmp_path / "elsewhere" / "item_features.bin"
    other.parent.mkdir()
    shutil.copy(built.features, other)
    assert sampling_plan(built.graph, [3, 2], "item", batch_size=40,
                         features_path=str(other)).features_path == str(other)

    alone = tmp_path / "alone" / "graph.bin"
    alone.parent.mkdir()
    shutil.copy(built.graph, alone)
    with caplog.at_level("INFO", logger="graphstore.modes.replicated.datasource"):
        plan = sampling_plan(str(alone), [3, 2], "item", batch_size=40)
        batches = list(sample_batches(plan))
    assert plan.features_path is None and batches and all("x" not in b["item"] for b in batches)
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"{alone}: the graph has node features but no features.bin beside it; "
                    "batches have x=None (pass features_path)"]
