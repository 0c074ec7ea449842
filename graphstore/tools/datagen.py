"""Deterministic synthetic graphs shaped like a user's raw tables, with planted communities.

Run ``python -m graphstore.tools.datagen --help``. Same spec and seed => byte-identical files (same pyarrow).

On-disk format (``dataset.json`` ``schema_version`` 1; written last, inside a temp sibling folder that is
renamed into place at the end, so an interrupted run never leaves a folder that looks complete):

kind "hetero" (node types ``user``, ``item``):
  users.<ext>      user_id STRING ("u" + zero-padded index, fixed width), f_0..f_{d-1} float32
  items.<ext>      item_id INT64 (100000 + 7*k over a shuffled k: not dense, not sorted), f_0..f_{d-1} float32
  user_item.<ext>  user_id STRING, item_id INT64, weight float32 in (0, 1]   (user -buys-> item)
  item_item.<ext>  src_item_id INT64, dst_item_id INT64                     (item -similar_to-> item)
  user_dislikes_item.<ext>  user_id STRING, item_id INT64    (user -dislikes-> item; only when
                   num_dislikes_per_user > 0: known negatives, e.g. for hardNegativeEdgeTypes)
kind "homo" (node type ``node``; the spec's num_items / num_item_item_edges are the node / edge counts):
  nodes.<ext>      node_id INT64 (same scheme as item_id), f_0..f_{d-1} float32
  edges.<ext>      src INT64, dst INT64                                      (node -links_to-> node)
truth/communities_<node_type>.parquet: <id column>, community INT32 (always Parquet; kept out of the main
tables so models cannot read it).

Planted structure: K balanced communities (default max(4, round(sqrt(num_items)))). Features are the community's
random unit centroid plus Gaussian noise (norm ~0.5). Every source node (user, or item/node for item-item and
homo edges) has the same out-degree (+-1). Each edge goes to the source's community with probability p_in, else
to a uniformly random community; inside a community the target is drawn with a mild Zipf popularity
(weight (rank+1)**-popularity_skew over a random rank), so community beats global popularity as a predictor.
Edges are de-duplicated (no repeated (src, dst) pair) and item-item / homo edges have no self loops: offending
rows are redrawn, falling back to uniform targets after a few rounds. Sources are generated in blocks of about
CHUNK_ROWS edges (one Parquet row group each) from per-block RNG streams, so memory stays bounded; rows are
shuffled within each block.

Dislikes (only when asked): each user dislikes ``num_dislikes_per_user`` distinct items drawn from
communities other than its own (with the same popularity skew), never an item it buys; rows
that stay bad after the redraw rounds are dropped, so a user may have a few fewer. They are drawn
per block of users from their own RNG streams, beside that block's buys, so the buys and every
other table are byte-identical with or without them.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterator, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from graphstore.runtime.cli import run_cli, setup_logging
from graphstore.runtime.errors import RuntimeFailure, UsageError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SIZE_PRESETS: MappingProxyType[str, int] = MappingProxyType(  # preset -> total edges
    {"tiny": 2_000, "small": 50_000, "medium": 1_000_000, "large": 10_000_000, "xlarge": 50_000_000}
)
CHUNK_ROWS = 1_000_000
ID_BASE, ID_STRIDE = 100_000, 7
_FEATURE_NOISE = 0.5  # expected noise norm; centroids have norm 1
_COMMUNITY_ROUNDS = 16  # redraw rounds from the community mixture before falling back to uniform targets
_MAX_ROUNDS = 200

Kind = Literal["hetero", "homo"]
FileFormat = Literal["parquet", "csv"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetSpec:
    """What to generate. For kind="homo", num_items / num_item_item_edges are the node / edge counts and
    num_users / num_user_item_edges must stay 0."""

    kind: Kind = "hetero"
    num_users: int = 0
    num_items: int
    num_user_item_edges: int = 0
    num_item_item_edges: int
    feature_dim: int = 16
    num_communities: int | None = None  # None: max(4, round(sqrt(num_items))), at most num_items
    seed: int = 0
    p_in: float = 0.8
    popularity_skew: float = 0.6
    file_format: FileFormat = "parquet"
    num_dislikes_per_user: int = 0  # hetero only: user -dislikes-> item rows per user (module docs)

    def __post_init__(self) -> None:
        errors = _spec_errors(self)
        if errors:
            raise UsageError("invalid dataset spec: " + "; ".join(errors))

    @property
    def communities(self) -> int:
        if self.num_communities is not None:
            return self.num_communities
        return min(self.num_items, max(4, round(math.sqrt(self.num_items))))

    @classmethod
    def from_num_edges(cls, num_edges: int, *, kind: Kind = "hetero", **overrides: object) -> DatasetSpec:
        """hetero: users = E/10, items = E/20, 80% user-item and 20% item-item edges; homo: nodes = E/10."""
        if isinstance(num_edges, bool) or not isinstance(num_edges, int) or num_edges < 1:
            raise UsageError(f"num_edges must be an integer >= 1, got {num_edges!r}")
        if kind == "homo":
            sizes = {"num_items": max(1, num_edges // 10), "num_item_item_edges": num_edges}
        else:
            sizes = {"num_users": max(1, num_edges // 10), "num_items": max(1, num_edges // 20),
                     "num_user_item_edges": num_edges - num_edges // 5, "num_item_item_edges": num_edges // 5}
        return cls(kind=kind, **{**sizes, **overrides})  # type: ignore[arg-type]

    @classmethod
    def from_preset(cls, size: str, *, kind: Kind = "hetero", **overrides: object) -> DatasetSpec:
        if size not in SIZE_PRESETS:
            raise UsageError(f"size must be one of {', '.join(SIZE_PRESETS)}, got {size!r}")
        return cls.from_num_edges(SIZE_PRESETS[size], kind=kind, **overrides)


def _spec_errors(spec: DatasetSpec) -> list[str]:
    def bad_int(value: object, low: int) -> bool:
        return isinstance(value, bool) or not isinstance(value, int) or value < low

    errors = []
    if spec.kind not in ("hetero", "homo"):
        errors.append(f"kind must be 'hetero' or 'homo', got {spec.kind!r}")
    if spec.file_format not in ("parquet", "csv"):
        errors.append(f"file_format must be 'parquet' or 'csv', got {spec.file_format!r}")
    for name in ("num_users", "num_user_item_edges", "num_items", "num_item_item_edges"):
        value = getattr(spec, name)
        if spec.kind == "homo" and name in ("num_users", "num_user_item_edges"):
            if value != 0:
                errors.append(f"{name} must be 0 for kind='homo' (num_items / num_item_item_edges are the "
                              f"node / edge counts), got {value!r}")
        elif bad_int(value, 1):
            errors.append(f"{name} must be an integer >= 1, got {value!r}")
    if bad_int(spec.num_dislikes_per_user, 0) or spec.kind == "homo" and spec.num_dislikes_per_user:
        errors.append("num_dislikes_per_user must be an integer >= 0 (0 for kind='homo'), got "
                      f"{spec.num_dislikes_per_user!r}")
    for name, low in (("feature_dim", 0), ("seed", 0)):
        if bad_int(getattr(spec, name), low):
            errors.append(f"{name} must be an integer >= {low}, got {getattr(spec, name)!r}")
    if spec.num_communities is not None and bad_int(spec.num_communities, 1):
        errors.append(f"num_communities must be None or an integer >= 1, got {spec.num_communities!r}")
    if not isinstance(spec.p_in, (int, float)) or not 0.0 <= spec.p_in <= 1.0:
        errors.append(f"p_in must be in [0, 1], got {spec.p_in!r}")
    if not isinstance(spec.popularity_skew, (int, float)) or not 0.0 <= spec.popularity_skew <= 10.0:
        errors.append(f"popularity_skew must be in [0, 10], got {spec.popularity_skew!r}")
    if errors:
        return errors
    if spec.communities > spec.num_items:
        errors.append(f"num_communities={spec.communities} must be <= num_items={spec.num_items}")
    dense = [("num_item_item_edges", spec.num_items, (spec.num_items - 1) // 2)]
    if spec.kind == "hetero":
        dense.append(("num_user_item_edges", spec.num_users, spec.num_items // 2))
        if spec.num_dislikes_per_user > spec.num_items // 4:
            errors.append(f"num_dislikes_per_user={spec.num_dislikes_per_user} must be <= "
                          f"{spec.num_items // 4} (a quarter of num_items={spec.num_items})")
    for name, n_src, limit in dense:
        edges = getattr(spec, name)
        if -(-edges // n_src) > limit:
            errors.append(f"{name}={edges} gives {-(-edges // n_src)} edges per source node, more than "
                          f"{limit} (half of num_items={spec.num_items}): lower the edges or raise the nodes")
    return errors


@dataclass(frozen=True, slots=True)
class _Targets:
    """Target nodes grouped by community; keys = community + cumulative popularity share, for searchsorted."""

    order: np.ndarray
    start: np.ndarray
    keys: np.ndarray


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def _communities(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.permutation(np.arange(n, dtype=np.int32) % np.int32(k))


def _build_targets(rng: np.random.Generator, comm: np.ndarray, k: int, skew: float) -> _Targets:
    order = np.lexsort((rng.random(len(comm)), comm))  # random popularity rank within each community
    sorted_comm = comm[order]
    start = np.zeros(k + 1, np.int64)
    start[1:] = np.cumsum(np.bincount(comm, minlength=k))
    weights = (np.arange(len(comm)) - start[sorted_comm] + 1.0) ** -skew
    cum = np.cumsum(weights)
    before = np.concatenate(([0.0], cum))[start[:-1]]
    share = (cum - before[sorted_comm]) / (cum[start[1:] - 1] - before)[sorted_comm]
    share[start[1:] - 1] = 1.0
    return _Targets(order=order, start=start, keys=sorted_comm + share)


def _sample(rng: np.random.Generator, src_comm: np.ndarray, t: _Targets, p_in: float, uniform: bool) -> np.ndarray:
    n, k = len(src_comm), len(t.start) - 1
    if uniform:
        return rng.integers(0, len(t.order), n)
    comm = np.where(rng.random(n) < p_in, src_comm, rng.integers(0, k, n))
    pos = np.searchsorted(t.keys, comm + rng.random(n), side="right")
    return t.order[np.clip(pos, t.start[comm], t.start[comm + 1] - 1)]


def _bad_rows(src: np.ndarray, dst: np.ndarray, n_dst: int, no_self: bool) -> np.ndarray:
    """Indices of rows that repeat an earlier (src, dst) pair, or are self loops when no_self."""
    key = src * np.int64(n_dst) + dst
    order = np.argsort(key, kind="stable")  # near-sorted (src is blocked), so timsort is fast
    sorted_key = key[order]
    bad = np.zeros(len(key), bool)
    bad[order[1:]] = sorted_key[1:] == sorted_key[:-1]
    if no_self:
        bad |= src == dst
    return np.flatnonzero(bad)


def _edge_chunks(spec: DatasetSpec, stream: int, src_comm: np.ndarray, t: _Targets, num_edges: int,
                 no_self: bool) -> Iterator[tuple[np.ndarray, np.ndarray, np.random.Generator]]:
    n_src = len(src_comm)
    base, extra = divmod(num_edges, n_src)
    degree = np.full(n_src, base, np.int64)
    degree[_rng(spec.seed, stream, 0).permutation(n_src)[:extra]] += 1
    per_chunk = max(1, CHUNK_ROWS // (base + (extra > 0)))
    for chunk, lo in enumerate(range(0, n_src, per_chunk)):
        rng = _rng(spec.seed, stream, chunk + 1)
        hi = min(lo + per_chunk, n_src)
        src = np.repeat(np.arange(lo, hi, dtype=np.int64), degree[lo:hi])
        if not len(src):
            continue
        dst = _sample(rng, src_comm[src], t, spec.p_in, uniform=False)
        bad = _bad_rows(src, dst, len(t.order), no_self)
        for attempt in range(_MAX_ROUNDS):
            if not len(bad):
                break
            dst[bad] = _sample(rng, src_comm[src[bad]], t, spec.p_in, uniform=attempt >= _COMMUNITY_ROUNDS)
            bad = _bad_rows(src, dst, len(t.order), no_self)
        if len(bad):
            raise RuntimeFailure(f"datagen: {len(bad)} duplicate or self-loop edges left after {_MAX_ROUNDS} redraws")
        perm = rng.permutation(len(src))
        yield src[perm], dst[perm], rng


def _dislikes(spec: DatasetSpec, lay: _Layout) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(user, item) index rows of the dislikes, block by block of the buys (module docs)."""
    t, k, n = lay.targets, len(lay.targets.start) - 1, spec.num_dislikes_per_user
    for chunk, (src, dst, _) in enumerate(_edge_chunks(spec, 3, lay.user_comm, t,
                                                       spec.num_user_item_edges, False)):
        rng = _rng(spec.seed, 5, chunk)
        users = np.repeat(np.unique(src), n)
        comm = lay.user_comm[users]

        def draw(rows: np.ndarray, uniform: bool) -> np.ndarray:
            other = (comm[rows] + 1 + rng.integers(0, max(k - 1, 1), len(rows))) % k
            return _sample(rng, other, t, 1.0, uniform=uniform or k == 1)

        items = draw(np.arange(len(users)), False)
        both = np.concatenate([src, users]), np.concatenate([dst, items])
        for attempt in range(_MAX_ROUNDS):
            bad = _bad_rows(*both, len(t.order), False)
            bad = bad[bad >= len(src)] - len(src)  # a repeat of a buy or of an earlier dislike
            if not len(bad):
                break
            items[bad] = draw(bad, attempt >= _COMMUNITY_ROUNDS)
            both = both[0], np.concatenate([dst, items])
        bad = _bad_rows(*both, len(t.order), False)
        keep = np.ones(len(users), bool)
        keep[bad[bad >= len(src)] - len(src)] = False
        perm = rng.permutation(int(keep.sum()))
        yield users[keep][perm], items[keep][perm]


def _user_ids(idx: np.ndarray, width: int) -> pa.Array:
    digits = pc.utf8_lpad(pa.array(idx, pa.int64()).cast(pa.string()), width=width, padding="0")
    return pc.binary_join_element_wise("u", digits, "")


def _write(path: Path, schema: pa.Schema, file_format: str, tables: Iterator[pa.Table]) -> int:
    """Stream tables into one file (one Parquet row group per table); log a line per chunk."""
    rows, t0 = 0, time.perf_counter()
    csv = file_format == "csv"
    options = {} if csv else {"row_group_size": CHUNK_ROWS}
    with pacsv.CSVWriter(path, schema) if csv else pq.ParquetWriter(path, schema, compression="snappy") as writer:
        for table in tables:
            writer.write_table(table, **options)
            rows += table.num_rows
            log.info("file=%s rows=%d total_rows=%d rows_per_s=%.0f", path.name, table.num_rows, rows,
                     rows / max(time.perf_counter() - t0, 1e-9))
    return rows


def _slices(n: int) -> Iterator[tuple[int, int, int]]:
    for chunk, lo in enumerate(range(0, n, CHUNK_ROWS)):
        yield chunk, lo, min(lo + CHUNK_ROWS, n)


def _node_tables(spec: DatasetSpec, stream: int, schema: pa.Schema, comm: np.ndarray, centroids: np.ndarray,
                 ids: Callable[[int, int], pa.Array]) -> Iterator[pa.Table]:
    d = spec.feature_dim
    noise = np.float32(_FEATURE_NOISE / math.sqrt(max(d, 1)))
    for chunk, lo, hi in _slices(len(comm)):
        rng = _rng(spec.seed, stream, chunk)
        feats = centroids.T[:, comm[lo:hi]] + noise * rng.standard_normal((d, hi - lo), dtype=np.float32)
        yield pa.Table.from_arrays([ids(lo, hi), *feats], schema=schema)


@dataclass(frozen=True, slots=True)
class _Layout:
    """The planted structure: centroids, communities, raw ids and the popularity-weighted targets."""

    centroids: np.ndarray
    item_comm: np.ndarray
    item_raw: np.ndarray
    targets: _Targets
    user_comm: np.ndarray | None

    @classmethod
    def build(cls, spec: DatasetSpec) -> _Layout:
        rng, k = _rng(spec.seed, 0), spec.communities
        centroids = rng.standard_normal((k, spec.feature_dim)).astype(np.float32)
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-6)
        item_comm = _communities(rng, spec.num_items, k)
        item_raw = ID_BASE + ID_STRIDE * rng.permutation(spec.num_items).astype(np.int64)
        targets = _build_targets(rng, item_comm, k, spec.popularity_skew)
        user_comm = _communities(rng, spec.num_users, k) if spec.kind == "hetero" else None
        return cls(centroids=centroids, item_comm=item_comm, item_raw=item_raw, targets=targets, user_comm=user_comm)


def _write_nodes(spec: DatasetSpec, folder: Path, lay: _Layout) -> tuple[dict, dict]:
    ext, hetero = spec.file_format, spec.kind == "hetero"
    nodes = {("item" if hetero else "node"): ("item_id" if hetero else "node_id", pa.int64(), lay.item_comm,
                                              lambda lo, hi: pa.array(lay.item_raw[lo:hi]),
                                              "items" if hetero else "nodes", 2)}
    if lay.user_comm is not None:
        width = len(str(spec.num_users - 1))
        nodes = {"user": ("user_id", pa.string(), lay.user_comm,
                          lambda lo, hi: _user_ids(np.arange(lo, hi), width), "users", 1), **nodes}
    feat_fields = [pa.field(f"f_{j}", pa.float32()) for j in range(spec.feature_dim)]
    summary, truth = {}, {}
    for node_type, (col, id_type, comm, ids, stem, stream) in nodes.items():
        schema = pa.schema([pa.field(col, id_type), *feat_fields])
        tables = _node_tables(spec, stream, schema, comm, lay.centroids, ids)
        count = _write(folder / f"{stem}.{ext}", schema, ext, tables)
        truth[node_type] = f"truth/communities_{node_type}.parquet"
        truth_schema = pa.schema([pa.field(col, id_type), pa.field("community", pa.int32())])
        _write(folder / truth[node_type], truth_schema, "parquet",
               (pa.Table.from_arrays([ids(lo, hi), pa.array(comm[lo:hi])], schema=truth_schema)
                for _, lo, hi in _slices(len(comm))))
        summary[node_type] = {"count": count, "file": f"{stem}.{ext}", "id_column": col, "id_dtype": str(id_type)}
    return summary, truth


def _write_edges(spec: DatasetSpec, folder: Path, lay: _Layout) -> dict:
    ext, raw, hetero = spec.file_format, lay.item_raw, spec.kind == "hetero"
    item_type = "item" if hetero else "node"
    ii_cols = ("src_item_id", "dst_item_id") if hetero else ("src", "dst")
    ii_schema = pa.schema([pa.field(ii_cols[0], pa.int64()), pa.field(ii_cols[1], pa.int64())])
    ii_tables = (pa.Table.from_arrays([pa.array(raw[s]), pa.array(raw[t])], schema=ii_schema)
                 for s, t, _ in _edge_chunks(spec, 4, lay.item_comm, lay.targets, spec.num_item_item_edges, True))
    relation = "similar_to" if hetero else "links_to"
    edges = [(f"{item_type}__{relation}__{item_type}", "item_item" if hetero else "edges",
              ii_schema, ii_tables, item_type, relation)]
    if lay.user_comm is not None:
        width = len(str(spec.num_users - 1))
        ui_schema = pa.schema([("user_id", pa.string()), ("item_id", pa.int64()), ("weight", pa.float32())])
        ui_tables = (pa.Table.from_arrays([_user_ids(s, width), pa.array(raw[t]),
                                           1.0 - r.random(len(s), dtype=np.float32)], schema=ui_schema)
                     for s, t, r in _edge_chunks(spec, 3, lay.user_comm, lay.targets, spec.num_user_item_edges, False))
        edges.insert(0, ("user__buys__item", "user_item", ui_schema, ui_tables, "user", "buys"))
        if spec.num_dislikes_per_user:
            dl_schema = pa.schema([("user_id", pa.string()), ("item_id", pa.int64())])
            dl_tables = (pa.Table.from_arrays([_user_ids(s, width), pa.array(raw[t])], schema=dl_schema)
                         for s, t in _dislikes(spec, lay))
            edges.append(("user__dislikes__item", "user_dislikes_item", dl_schema, dl_tables, "user",
                          "dislikes"))
    summary = {}
    for edge_type, stem, schema, tables, src_type, relation in edges:
        count = _write(folder / f"{stem}.{ext}", schema, ext, tables)
        summary[edge_type] = {"count": count, "file": f"{stem}.{ext}", "src_type": src_type,
                              "relation": relation, "dst_type": item_type,
                              "src_column": schema.names[0], "dst_column": schema.names[1]}
    return summary


def _generate_into(spec: DatasetSpec, folder: Path) -> dict:
    """Write every table, then dataset.json last."""
    layout = _Layout.build(spec)
    folder.joinpath("truth").mkdir()
    node_types, truth = _write_nodes(spec, folder, layout)
    edge_types = _write_edges(spec, folder, layout)
    summary = {"schema_version": SCHEMA_VERSION, "kind": spec.kind, "seed": spec.seed, "format": spec.file_format,
               "feature_dim": spec.feature_dim, "num_communities": spec.communities, "p_in": spec.p_in,
               "popularity_skew": spec.popularity_skew, "deduplicated": True, "self_loops": False,
               "node_types": node_types, "edge_types": edge_types, "truth": truth}
    if spec.num_dislikes_per_user:  # only when asked: datasets without them stay byte-identical
        summary["num_dislikes_per_user"] = spec.num_dislikes_per_user
    folder.joinpath("dataset.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _check_target(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {out} exists and is not a folder; choose another --output")
    if out.exists() and not overwrite:
        raise UsageError(f"output folder {out} already exists; pass --overwrite (overwrite=True) to replace it")


def generate_dataset(spec: DatasetSpec, output_dir: str | os.PathLike[str], overwrite: bool = False) -> dict:
    """Generate ``spec`` into ``output_dir`` atomically and return the dataset.json dict."""
    out = Path(output_dir).absolute()
    _check_target(out, overwrite)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp = out.parent / f".{out.name}.tmp-{tag}"
    try:
        tmp.mkdir(parents=True)
        summary = _generate_into(spec, tmp)
        _check_target(out, overwrite)
        if out.exists():
            old = out.parent / f".{out.name}.old-{tag}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except OSError as exc:
        raise RuntimeFailure(f"datagen: cannot write {out}: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m graphstore.tools.datagen",
        description="Write a deterministic synthetic graph (node tables, edge tables, dataset.json and "
                    "truth/ community files) with planted communities, for link-prediction tests and benchmarks.",
        epilog="Presets (total edges): " + ", ".join(f"{k}={v:,}" for k, v in SIZE_PRESETS.items())
               + ". hetero: users=E/10, items=E/20, 80% user-item / 20% item-item edges; homo: nodes=E/10.")
    p.add_argument("--output", required=True, help="output folder (replaced only with --overwrite)")
    p.add_argument("--kind", choices=("hetero", "homo"), default="hetero", help="graph kind (default hetero)")
    p.add_argument("--size", choices=tuple(SIZE_PRESETS), default="small", help="size preset (default small)")
    p.add_argument("--num-edges", type=int, help="total edges; replaces the preset and derives node counts")
    p.add_argument("--num-users", type=int, help="hetero: number of users (overrides the derived count)")
    p.add_argument("--num-items", type=int, help="hetero: number of items (overrides the derived count)")
    p.add_argument("--num-nodes", type=int, help="homo: number of nodes (overrides the derived count)")
    p.add_argument("--feature-dim", type=int, default=16, help="feature columns per node (default 16)")
    p.add_argument("--num-communities", type=int, help="planted communities (default ~sqrt(items), >= 4)")
    p.add_argument("--p-in", type=float, default=0.8, help="probability an edge stays in its community (0.8)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="table format (parquet)")
    p.add_argument("--dislikes-per-user", type=int, default=0,
                   help="hetero: also write user_dislikes_item (user -dislikes-> item, known negatives "
                        "from other communities, never a bought item), this many per user (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
    return p


def _spec_from_args(args: argparse.Namespace) -> DatasetSpec:
    given = {k: v for k, v in (("num_users", args.num_users), ("num_items", args.num_items),
                               ("num_nodes", args.num_nodes)) if v is not None}
    wrong = {"hetero": ["num_nodes"], "homo": ["num_users", "num_items"]}[args.kind]
    if any(name in given for name in wrong):
        raise UsageError(f"--{wrong[0].replace('_', '-')} does not apply to --kind {args.kind}")
    if "num_nodes" in given:
        given["num_items"] = given.pop("num_nodes")
    total = args.num_edges if args.num_edges is not None else SIZE_PRESETS[args.size]
    return DatasetSpec.from_num_edges(total, kind=args.kind, feature_dim=args.feature_dim,
                                      num_communities=args.num_communities, p_in=args.p_in, seed=args.seed,
                                      file_format=args.format, num_dislikes_per_user=args.dislikes_per_user,
                                      **given)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    setup_logging("datagen")
    spec = _spec_from_args(args)
    t0 = time.perf_counter()
    summary = generate_dataset(spec, args.output, overwrite=args.overwrite)
    counts = {**summary["node_types"], **summary["edge_types"]}
    print(f"datagen: wrote {spec.kind} dataset to {args.output}: "
          + " ".join(f"{name}={v['count']}({v['file']})" for name, v in counts.items())
          + f" communities={summary['num_communities']} seconds={time.perf_counter() - t0:.2f}")
    return 0


if __name__ == "__main__":
    run_cli(main, "graphstore.tools.datagen")
