"""The dataset contract: ``EdgeType`` parsing at the edge, ``DatasetMetadata`` and its invariants,
the storage protocol's typed requests and replies, and a colocated ``DistDataset`` answering
GiGL's calls in-process on real tiny shards (homogeneous: GiGL's homogeneous shapes)."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from graphstore.config import EdgeType, load_config_pair
from graphstore.dataset.glt_adapter import range_partition_book
from graphstore.dataset.metadata import DatasetMetadata, FeatureInfo, as_edge_type
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset import protocol as P

REPO = Path(__file__).resolve().parents[2]
BUYS = EdgeType(src_node_type="user", relation="buys", dst_node_type="item")
REV = EdgeType(src_node_type="item", relation="rev_buys", dst_node_type="user")


def _meta(**change) -> DatasetMetadata:
    values = dict(num_partitions=2, edge_dir="in", node_types=("user", "item"),
                  edge_types=(BUYS, REV), supervision_edge_types=(BUYS,),
                  node_counts={"user": 5, "item": 7},
                  edge_counts_per_partition={BUYS: (3, 4), REV: (2, 5)},
                  node_feature_dims={"user": 0, "item": 16}, has_splits=True)
    return DatasetMetadata(**{**values, **change})


# -- EdgeType at the edge of the system ----------------------------------------------------------
def test_edge_types_enter_as_values_tuples_or_strings_and_bad_ones_are_named():
    assert as_edge_type("user__buys__item") == BUYS
    assert as_edge_type(("user", "buys", "item")) == BUYS
    assert as_edge_type(BUYS) is BUYS
    assert str(BUYS) == "user__buys__item" and BUYS.as_tuple() == ("user", "buys", "item")
    assert BUYS.reverse() == REV and REV.reverse() == BUYS
    for bad in ("user__buys", "a__b__c__d", ("user", "buys"), ("user", "bad-name", "item"), 3):
        with pytest.raises(UsageError, match="edge type"):
            as_edge_type(bad)


def test_no_edge_type_name_is_split_outside_the_one_parser():
    """``"src__rel__dst"`` strings become EdgeType values in EdgeType.parse only."""
    offenders = []
    for folder in ("graphstore", "examples", "components", "pipeline"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("split", "rsplit", "partition") and node.args
                        and _is_separator(node.args[0])):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert [o.split(":")[0] for o in offenders] == ["graphstore/config/_graph.py"], offenders


def _is_separator(arg: ast.expr) -> bool:
    return ((isinstance(arg, ast.Constant) and arg.value == "__")
            or (isinstance(arg, ast.Name) and arg.id == "EDGE_TYPE_SEP"))


# -- DatasetMetadata ------------------------------------------------------------------------------
def test_metadata_views_follow_gigl_shapes():
    meta = _meta()
    assert not meta.is_homogeneous and meta.homogeneous_types is None
    assert meta.node_feature_info == {"item": FeatureInfo(16, torch.float32)}  # types with features
    assert meta.edge_feature_info is None
    assert meta.edge_count(REV) == 7
    assert meta.edge_bounds(BUYS) == (0, 3, 7)
    assert range_partition_book(meta.edge_bounds(BUYS))[torch.arange(7)].tolist() == [0, 0, 0, 1, 1, 1, 1]
    assert meta.node_type("item") == "item"
    assert meta.supervision_edge_type(None) == BUYS
    assert meta.supervision_edge_type(("user", "buys", "item")) == BUYS
    assert meta.edge_type("item__rev_buys__user") == REV
    with pytest.raises(UsageError, match=r"node_type is required .*\['user', 'item'\]"):
        meta.node_type(None)
    with pytest.raises(UsageError, match="unknown node_type 'shop'"):
        meta.node_type("shop")
    with pytest.raises(UsageError, match="not a supervision edge type"):
        meta.supervision_edge_type(REV)
    with pytest.raises(UsageError, match="edge_type is required"):
        meta.edge_type(None)
    homo_et = EdgeType(src_node_type="item", relation="similar_to", dst_node_type="item")
    homo = _meta(node_types=("item",), edge_types=(homo_et,), supervision_edge_types=(homo_et,),
                 node_counts={"item": 4}, edge_counts_per_partition={homo_et: (1, 1)},
                 node_feature_dims={"item": 8})
    assert homo.is_homogeneous and homo.homogeneous_types == ("item", ("item", "similar_to", "item"))
    assert homo.node_feature_info == FeatureInfo(8, torch.float32)  # one value, not a dict
    assert homo.node_type(None) == "item" and homo.edge_type(None) == homo_et
    assert _meta(node_feature_dims={"user": 0, "item": 0}).node_feature_info is None


@pytest.mark.parametrize("change,problem", [
    ({"edge_dir": "both"}, "edge_dir"),
    ({"num_partitions": 0}, "num_partitions"),
    ({"node_types": ("user", "user")}, "distinct"),
    ({"node_types": ("user", "item", "shop")}, "node_counts"),
    ({"node_counts": {"user": -1, "item": 7}}, "node_counts"),
    ({"edge_types": (BUYS, EdgeType(src_node_type="user", relation="x", dst_node_type="shop"))},
     "joins a node type"),
    ({"edge_counts_per_partition": {BUYS: (3,), REV: (2, 5)}}, r"edge_counts_per_partition\[user__buys__item\]"),
    ({"supervision_edge_types": (EdgeType(src_node_type="user", relation="x", dst_node_type="item"),)},
     "not among the edge types"),
])
def test_metadata_refuses_values_that_break_its_invariants(change, problem):
    with pytest.raises(ValueError, match=problem):
        _meta(**change)


def test_metadata_is_frozen_and_pickles():
    meta = _meta()
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.edge_dir = "out"
    with pytest.raises(TypeError):
        meta.node_counts["user"] = 9
    again = pickle.loads(pickle.dumps(meta))
    assert again == meta and again.edge_counts_per_partition[BUYS] == (3, 4)
    with pytest.raises(TypeError):
        again.node_counts["user"] = 9


# -- the storage protocol's values ------------------------------------------------------------------
def test_requests_check_their_arguments_before_any_rpc():
    assert P.NodeIdsRequest("user", "train", 1, 2).reply_type is P.NodeIdsReply
    with pytest.raises(UsageError, match=r"rank 2 is not in \[0, world_size 2\)"):
        P.NodeIdsRequest("user", None, 2, 2)
    with pytest.raises(UsageError, match="split must be one of"):
        P.AblpInputRequest(BUYS, "holdout", 0, 1)
    with pytest.raises(UsageError, match="must be an EdgeType"):
        P.AblpInputRequest("user__buys__item", "train", 0, 1)
    with pytest.raises(UsageError, match="num_ports"):
        P.FreePortsRequest(0)
    with pytest.raises(UsageError, match="label_ids must be an int64 tensor"):
        P.PositivePairsRequest(BUYS, torch.tensor([1.0, 2.0]))
    with pytest.raises(UsageError, match="anchors must be an int64 tensor"):
        P.LabelsRequest(BUYS, torch.zeros(2, 2, dtype=torch.long))


def test_replies_check_their_shape_and_match_their_request():
    P.PairsReply(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(UsageError, match=r"\[2, K\]"):
        P.PairsReply(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(UsageError, match="distinct"):
        P.FreePortsReply((5000, 5000))
    with pytest.raises(UsageError, match="1..65535"):
        P.FreePortsReply((0,))
    with pytest.raises(UsageError, match="DatasetMetadata"):
        P.MetadataReply({"node_types": ["user"]})
    reply = P.NodeIdsReply(torch.arange(3))
    assert P.check_reply(P.NodeIdsRequest("user", None, 0, 1), reply) is reply
    with pytest.raises(RuntimeFailure, match="answered MetadataRequest with NodeIdsReply"):
        P.check_reply(P.MetadataRequest(), reply)


def test_every_request_and_reply_pickles_as_it_crosses_rpc():
    values = [P.MetadataRequest(), P.FreePortsRequest(2), P.NodeIdsRequest("user", "val", 0, 3),
              P.AblpInputRequest(BUYS, None, 0, 1),
              P.MetadataReply(_meta()), P.FreePortsReply((4100, 4101))]
    for v in values:
        assert pickle.loads(pickle.dumps(v)) == v
    pairs = pickle.loads(pickle.dumps(P.PositivePairsRequest(BUYS, torch.arange(4))))
    assert pairs.supervision_edge_type == BUYS and pairs.label_ids.tolist() == [0, 1, 2, 3]


def test_call_needs_a_registered_service_and_a_protocol_request():
    P.register_service(None)
    with pytest.raises(RuntimeFailure, match="no storage service is registered"):
        P.call(P.MetadataRequest())
    with pytest.raises(UsageError, match="not a storage protocol request"):
        P.call("metadata")


def test_mode_independent_modules_do_not_branch_on_the_dataset_kind():
    """Trainer, evaluator, job, inferencer and loaders name no dataset class and no mode."""
    for rel in ("graphstore/training/trainer.py", "graphstore/training/evaluation.py",
                "graphstore/training/job.py", "graphstore/inference/inferencer.py", "graphstore/dataset/loaders.py"):
        tree = ast.parse((REPO / rel).read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        used = (names | attrs | imported) & {"DistDataset", "RemoteDistDataset", "colocated",
                                             "ReplicatedDataset", "replicated"}
        assert not used, f"{rel} uses {sorted(used)}"


# -- a colocated DistDataset on real tiny shards, in-process -----------------------------------------
def _shards(tmp: Path, kind: str) -> tuple[str, object]:
    generate_dataset(DatasetSpec.from_preset("tiny", kind=kind, seed=4), str(tmp / "data"))
    task = yaml.safe_load((REPO / "configs" / f"task_{kind}.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp / "data")
    tp = tmp / "task.yaml"
    tp.write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(tp), str(REPO / "configs" / "resource_local.yaml"))
    partition_graph(cfg, num_partitions=2, output_uri=str(tmp / "shards"))
    return str(tmp / "shards"), cfg.trainer.storage.storage_args


def test_metadata_from_a_real_manifest_and_its_edge_partition_book(tmp_path):
    uri, _ = _shards(tmp_path, "hetero")
    shards = ShardSet.open(uri)
    meta = DatasetMetadata.from_manifest(shards.manifest, has_splits=False)
    assert set(meta.node_types) == {"user", "item"} and meta.edge_dir == "in"
    assert BUYS in meta.edge_types and REV in meta.edge_types
    assert meta.supervision_edge_types == (BUYS,)
    for et in meta.edge_types:
        assert meta.edge_count(et) == shards.manifest.edge_types[str(et)].count
        book = range_partition_book(meta.edge_bounds(et))
        for p in range(2):  # the partition holding each edge id, as the shards store it
            eids = shards.load_partition(p).edges[str(et)].eids
            assert len(eids) and (book[torch.from_numpy(eids)] == p).all()


def test_colocated_homogeneous_dataset_answers_gigl_calls_in_process(tmp_path):
    from graphstore import DistDataset

    uri, storage_args = _shards(tmp_path, "homo")
    shards = ShardSet.open(uri)
    ds = DistDataset.from_shards(uri, 1, storage_args)
    assert ds.input_partitions == (1,)
    assert ds.fetch_node_types() is None and ds.fetch_edge_types() is None  # homogeneous
    assert ds.fetch_edge_dir() == "in"
    assert ds.fetch_node_feature_info() == FeatureInfo(16, torch.float32)
    assert ds.fetch_edge_feature_info() is None
    (nt,) = shards.manifest.node_types
    n, parts = shards.manifest.node_types[nt].count, shards.manifest.node_types[nt].counts_per_partition
    owners = np.repeat(np.arange(len(parts)), parts)  # one range per partition, partition 0 first
    assert ds.fetch_node_partition_book()[torch.arange(n)].tolist() == owners.tolist()
    e = ds.metadata.edge_count(ds.metadata.edge_types[0])
    assert ds.fetch_edge_partition_book()[torch.tensor([0, e - 1])].tolist() == [0, 1]
    owned = ds.fetch_node_ids(rank=0, world_size=1)
    assert list(owned) == [1] and np.array_equal(owned[1].numpy(),
                                                 np.sort(shards.load_partition(1).nodes[nt].ids))
    halves = [ds.fetch_node_ids(rank=r, world_size=2)[1] for r in range(2)]
    assert torch.equal(torch.cat(halves), owned[1])
    splits = {s: set(ds.fetch_node_ids(rank=0, world_size=1, split=s)[1].tolist())
              for s in ("train", "val", "test")}
    assert not (splits["train"] & splits["val"]) and not (splits["val"] & splits["test"])
    ablp = ds.fetch_ablp_input(split="val", rank=0, world_size=1)[1]
    assert set(ablp.anchor_nodes.tolist()) == splits["val"]
    with pytest.raises(UsageError, match="holds partition 1, not 0"):
        ds._ask(0, P.MetadataRequest())
