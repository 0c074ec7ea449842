"""Unit tests for graphstore.tools.datagen: schema, counts, ids, determinism, planted structure, CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from graphstore.tools import datagen
from graphstore.tools.datagen import SIZE_PRESETS, DatasetSpec, generate_dataset
from graphstore.runtime.errors import UsageError

FEATS = [f"f_{j}" for j in range(16)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[DatasetSpec, Path, dict]:
    spec = DatasetSpec.from_preset("tiny", seed=0)
    out = tmp_path_factory.mktemp("tiny") / "ds"
    return spec, out, generate_dataset(spec, out)


def read(folder: Path, name: str) -> pa.Table:
    return pq.read_table(folder / name)


def test_presets_and_spec_sizes() -> None:
    spec = DatasetSpec.from_preset("tiny")
    assert SIZE_PRESETS["tiny"] == 2_000
    assert (spec.num_users, spec.num_items, spec.num_user_item_edges, spec.num_item_item_edges) == (200, 100, 1600, 400)
    assert spec.communities == 10
    homo = DatasetSpec.from_preset("tiny", kind="homo")
    assert (homo.num_users, homo.num_items, homo.num_item_item_edges) == (0, 200, 2000)


def test_schemas_and_dtypes(tiny: tuple[DatasetSpec, Path, dict]) -> None:
    _, out, _ = tiny
    floats = [pa.field(f, pa.float32()) for f in FEATS]
    assert read(out, "users.parquet").schema.remove_metadata() == pa.schema([("user_id", pa.string()), *floats])
    assert read(out, "items.parquet").schema.remove_metadata() == pa.schema([("item_id", pa.int64()), *floats])
    ui = read(out, "user_item.parquet")
    assert ui.schema.remove_metadata() == pa.schema(
        [("user_id", pa.string()), ("item_id", pa.int64()), ("weight", pa.float32())])
    weight = ui["weight"].to_numpy()
    assert weight.min() > 0.0 and weight.max() <= 1.0
    assert read(out, "item_item.parquet").schema.remove_metadata() == pa.schema(
        [("src_item_id", pa.int64()), ("dst_item_id", pa.int64())])
    assert read(out, "truth/communities_user.parquet").schema.remove_metadata() == pa.schema(
        [("user_id", pa.string()), ("community", pa.int32())])
    assert read(out, "truth/communities_item.parquet").schema.remove_metadata() == pa.schema(
        [("item_id", pa.int64()), ("community", pa.int32())])


def test_counts_and_manifest(tiny: tuple[DatasetSpec, Path, dict]) -> None:
    spec, out, summary = tiny
    assert json.loads((out / "dataset.json").read_text()) == summary
    assert summary["schema_version"] == 1 and summary["kind"] == "hetero" and summary["seed"] == 0
    assert summary["feature_dim"] == 16 and summary["num_communities"] == spec.communities
    expected = {"users.parquet": spec.num_users, "items.parquet": spec.num_items,
                "user_item.parquet": spec.num_user_item_edges, "item_item.parquet": spec.num_item_item_edges}
    for name, count in expected.items():
        assert pq.read_metadata(out / name).num_rows == count
    files = {v["file"]: v["count"] for v in [*summary["node_types"].values(), *summary["edge_types"].values()]}
    assert files == expected
    assert sorted(p.name for p in out.parent.iterdir()) == ["ds"]  # no temp folder left behind


def test_ids_unique_and_edges_reference_nodes(tiny: tuple[DatasetSpec, Path, dict]) -> None:
    spec, out, _ = tiny
    users = read(out, "users.parquet")["user_id"].to_pylist()
    items = read(out, "items.parquet")["item_id"].to_numpy()
    assert len(set(users)) == len(users) and len(np.unique(items)) == len(items)
    assert all(u.startswith("u") and len(u) == 4 for u in users)  # zero-padded, width from the count
    assert "u042" in users
    assert not np.array_equal(items, np.sort(items))  # shuffled
    assert items.max() - items.min() + 1 > 2 * len(items)  # not dense
    assert not set(range(len(items))) & set(items.tolist())
    ui = read(out, "user_item.parquet")
    assert set(ui["user_id"].to_pylist()) <= set(users)
    assert np.isin(ui["item_id"].to_numpy(), items).all()
    ii = read(out, "item_item.parquet")
    src, dst = ii["src_item_id"].to_numpy(), ii["dst_item_id"].to_numpy()
    assert np.isin(src, items).all() and np.isin(dst, items).all()
    assert not (src == dst).any()
    assert len(set(zip(src.tolist(), dst.tolist()))) == len(src)  # de-duplicated
    pairs = list(zip(ui["user_id"].to_pylist(), ui["item_id"].to_pylist()))
    assert len(set(pairs)) == len(pairs)


def test_same_seed_is_byte_identical_and_seed_matters(tiny: tuple[DatasetSpec, Path, dict], tmp_path: Path) -> None:
    spec, out, _ = tiny
    again = generate_dataset(DatasetSpec.from_preset("tiny", seed=0), tmp_path / "again")
    assert again == tiny[2]
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert len(files) == 7
    for rel in files:
        assert (out / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes(), rel
    generate_dataset(DatasetSpec.from_preset("tiny", seed=1), tmp_path / "other")
    for name in ("users.parquet", "items.parquet", "user_item.parquet", "item_item.parquet"):
        assert not read(out, name).equals(read(tmp_path / "other", name)), name


def test_multi_chunk_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datagen, "CHUNK_ROWS", 256)
    spec = DatasetSpec.from_preset("tiny", seed=4)
    generate_dataset(spec, tmp_path / "a")
    generate_dataset(spec, tmp_path / "b")
    ui_meta = pq.read_metadata(tmp_path / "a" / "user_item.parquet")
    assert ui_meta.num_rows == spec.num_user_item_edges and ui_meta.num_row_groups >= 6
    assert pq.read_metadata(tmp_path / "a" / "users.parquet").num_row_groups == 1
    ui = read(tmp_path / "a", "user_item.parquet")
    pairs = set(zip(ui["user_id"].to_pylist(), ui["item_id"].to_pylist()))
    assert len(pairs) == ui.num_rows  # de-duplication holds across chunks (a user's edges share one chunk)
    for name in ("users.parquet", "user_item.parquet", "item_item.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def _truth(out: Path, node_type: str, col: str) -> dict:
    t = read(out, f"truth/communities_{node_type}.parquet")
    return dict(zip(t[col].to_pylist(), t["community"].to_pylist()))


def test_planted_communities_in_edges_and_features(tiny: tuple[DatasetSpec, Path, dict]) -> None:
    spec, out, _ = tiny
    user_comm, item_comm = _truth(out, "user", "user_id"), _truth(out, "item", "item_id")
    ui = read(out, "user_item.parquet")
    same = [user_comm[u] == item_comm[i] for u, i in zip(ui["user_id"].to_pylist(), ui["item_id"].to_pylist())]
    assert np.mean(same) >= 0.7
    ii = read(out, "item_item.parquet")
    same_ii = [item_comm[a] == item_comm[b] for a, b in zip(*(ii[c].to_pylist() for c in ii.column_names))]
    assert np.mean(same_ii) >= 0.7
    # Features carry the community: nearest item-community mean classifies users far above chance.
    items = read(out, "items.parquet")
    item_x = np.stack([items[f].to_numpy() for f in FEATS], axis=1)
    labels = np.array([item_comm[i] for i in items["item_id"].to_pylist()])
    means = np.stack([item_x[labels == c].mean(axis=0) for c in range(spec.communities)])
    users = read(out, "users.parquet")
    user_x = np.stack([users[f].to_numpy() for f in FEATS], axis=1)
    predicted = np.argmax(user_x @ means.T, axis=1)
    truth = np.array([user_comm[u] for u in users["user_id"].to_pylist()])
    assert np.mean(predicted == truth) >= 5.0 / spec.communities


def test_community_beats_global_popularity(tiny: tuple[DatasetSpec, Path, dict]) -> None:
    spec, out, _ = tiny
    user_comm, item_comm = _truth(out, "user", "user_id"), _truth(out, "item", "item_id")
    ui = read(out, "user_item.parquet")
    users, items = ui["user_id"].to_pylist(), ui["item_id"].to_numpy()
    held_out = np.random.default_rng(123).random(len(items)) < 0.2
    ids, counts = np.unique(items[~held_out], return_counts=True)
    popularity = dict(zip(ids.tolist(), counts.tolist()))
    by_pop = sorted(item_comm, key=lambda i: (-popularity.get(i, 0), i))
    global_top = set(by_pop[:10])
    community_top = {c: set([i for i in by_pop if item_comm[i] == c][:10]) for c in range(spec.communities)}
    test = [(u, i) for u, i, h in zip(users, items.tolist(), held_out) if h]
    hit_global = np.mean([i in global_top for _, i in test])
    hit_community = np.mean([i in community_top[user_comm[u]] for u, i in test])
    assert hit_community >= 0.5
    assert hit_community >= 2.0 * hit_global, (hit_community, hit_global)


def test_homogeneous(tmp_path: Path) -> None:
    spec = DatasetSpec(kind="homo", num_items=120, num_item_item_edges=900, feature_dim=4, seed=3)
    summary = generate_dataset(spec, tmp_path / "homo")
    nodes, edges = read(tmp_path / "homo", "nodes.parquet"), read(tmp_path / "homo", "edges.parquet")
    assert nodes.schema.remove_metadata() == pa.schema(
        [("node_id", pa.int64()), *[(f"f_{j}", pa.float32()) for j in range(4)]])
    assert edges.schema.remove_metadata() == pa.schema([("src", pa.int64()), ("dst", pa.int64())])
    assert (nodes.num_rows, edges.num_rows) == (120, 900)
    ids = nodes["node_id"].to_numpy()
    src, dst = edges["src"].to_numpy(), edges["dst"].to_numpy()
    assert len(np.unique(ids)) == 120 and np.isin(src, ids).all() and np.isin(dst, ids).all()
    assert not (src == dst).any()
    assert list(summary["node_types"]) == ["node"] and summary["truth"] == {"node": "truth/communities_node.parquet"}


def test_csv_format(tmp_path: Path) -> None:
    spec = DatasetSpec.from_preset("tiny", seed=2, file_format="csv", feature_dim=3)
    summary = generate_dataset(spec, tmp_path / "csv")
    out = tmp_path / "csv"
    assert sorted(p.name for p in out.iterdir()) == [
        "dataset.json", "item_item.csv", "items.csv", "truth", "user_item.csv", "users.csv"]
    assert summary["format"] == "csv"
    users = pacsv.read_csv(out / "users.csv")
    assert users.column_names == ["user_id", "f_0", "f_1", "f_2"] and users.num_rows == spec.num_users
    assert pa.types.is_string(users.schema.field("user_id").type)
    ui = pacsv.read_csv(out / "user_item.csv")
    assert ui.column_names == ["user_id", "item_id", "weight"] and ui.num_rows == spec.num_user_item_edges
    assert pacsv.read_csv(out / "item_item.csv").num_rows == spec.num_item_item_edges
    assert (out / "truth" / "communities_user.parquet").exists()


def test_invalid_specs_raise_usage_error() -> None:
    with pytest.raises(UsageError, match="num_users must be an integer >= 1, got 0"):
        DatasetSpec(num_users=0, num_items=10, num_user_item_edges=5, num_item_item_edges=5)
    with pytest.raises(UsageError, match="num_user_item_edges=1000 gives 100 edges per source node"):
        DatasetSpec(num_users=10, num_items=20, num_user_item_edges=1000, num_item_item_edges=5)
    with pytest.raises(UsageError, match="must be 0 for kind='homo'"):
        DatasetSpec(kind="homo", num_users=5, num_items=20, num_item_item_edges=5)
    with pytest.raises(UsageError, match="p_in"):
        DatasetSpec.from_preset("tiny", p_in=1.5)
    with pytest.raises(UsageError, match="size must be one of"):
        DatasetSpec.from_preset("huge")
    with pytest.raises(Exception):
        DatasetSpec.from_preset("tiny").seed = 3  # type: ignore[misc]


def test_failed_run_leaves_no_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(datagen, "_user_ids", broken)
    with pytest.raises(datagen.RuntimeFailure, match="disk full"):
        generate_dataset(DatasetSpec.from_preset("tiny"), tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []
