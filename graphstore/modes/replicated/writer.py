"""Write the graph file (and the features file) of replicated mode from a shard set.

Written from the shards, not from the raw tables, so the numbering is the shard set's by
construction (dense node ids, edge ids, labels; graphstore.formats.shards.format) and every shard file
is checked against its checksum as it is read. Order of work:

  1. every edge type, one after another: pass 1 streams its rows (per partition, per file, in
     batches of ``batch_rows``) and counts each anchor's degree in the full view and, with a
     splitter, in the train view; pass 2 streams them again and scatters anchors' neighbours
     and edge ids into the file (graphstore.modes.replicated.sections);
  2. every supervision edge type: the labels by anchor, their split codes, anchors per split;
  3. the header, then the preamble; the file is built under a temporary name beside the output
     and renamed over it at the end, so a reader sees the old file or the complete new one.

Memory: one batch of ``batch_rows`` rows (and the Parquet row group it comes from) plus a few
int64 arrays the size of the largest anchor node type (degrees, write cursors, label counts per
split); the sections themselves are filled through file-backed maps (page cache, not anonymous
memory). Measured here (hetero graphs, 2 partitions): peak anonymous growth 39 / 56 MiB for 0.5 M
/ 2 M edges with ``batch_rows=65536``, 42 / 98 MiB with the default 1 M-row batches.
The splitter is the one graph-store storage would use (``storageArgs``), applied with the same
rules (graphstore.dataset.splitter.SplitRules), so the train view removes exactly the edges storage removes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from datetime import datetime, timezone
from typing import Iterator

import numpy as np

from graphstore.io import uris
from graphstore.config import EdgeType, StorageArgs
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated.format import (
    MAGIC, CsrView, EdgeTypeEntry, GraphHeader, LabelEntry, Kind,
)
from graphstore.dataset.csr import count_rows, indptr_of, scatter_positions
from graphstore.modes.replicated.sections import SectionWriter
from graphstore.formats.shards.format import MANIFEST, edge_dir, label_dir, node_dir
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset.splitter import SPLIT_CODE, SplitRules
from graphstore.dataset.partition_graph import load_splitter

log = logging.getLogger(__name__)
BATCH_ROWS = 1 << 20


def _check_output(path: str) -> None:
    """``path`` is a local file path we may write: absent, or a file of ours (replaced)."""
    if uris.is_gcs(path):
        raise UsageError(f"--output {path}: write the graph file to a local path (copy it to "
                         "gs:// after); gs:// output is not supported yet")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a folder; give the graph file's path")
    if os.path.exists(path):
        with open(path, "rb") as fh:
            if fh.read(8) not in MAGIC.values():
                raise UsageError(f"{path} exists and is not a graphstore graph or features file: "
                                 "not overwritten; choose another output or move it away")


class _Source:
    """Streams of one shard set's rows, in edge id order (see graphstore.formats.shards.format)."""

    def __init__(self, shards: ShardSet, batch_rows: int) -> None:
        self.shards, self.m, self.batch_rows = shards, shards.manifest, batch_rows

    def edges(self, name: str) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(src, dst, eids)`` batches of edge type ``name``."""
        for p in range(self.m.num_partitions):
            base = self.m.edge_id_base(name, p)
            for batch in self.shards.stream_dir(edge_dir(p, name), ["src", "dst"],
                                                batch_rows=self.batch_rows):
                src = batch.column(0).to_numpy().astype(np.int64, copy=False)
                dst = batch.column(1).to_numpy().astype(np.int64, copy=False)
                yield src, dst, np.arange(base, base + len(src), dtype=np.int64)
                base += len(src)

    def labels(self, name: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``(anchor, label)`` batches of supervision type ``name`` (storage's label rows)."""
        info = self.m.edge_types[name]
        for p in range(self.m.num_partitions):
            if info.labels_from:  # the reverse type's edges, flipped back to (anchor, label)
                for batch in self.shards.stream_dir(edge_dir(p, info.labels_from), ["src", "dst"],
                                                    batch_rows=self.batch_rows):
                    yield (batch.column(1).to_numpy().astype(np.int64, copy=False),
                           batch.column(0).to_numpy().astype(np.int64, copy=False))
                continue
            for batch in self.shards.stream_dir(label_dir(p, name), ["src", "dst"],
                                                batch_rows=self.batch_rows):
                yield (batch.column(0).to_numpy().astype(np.int64, copy=False),
                       batch.column(1).to_numpy().astype(np.int64, copy=False))


def _anchor_col(direction: str) -> int:
    """Which of (src, dst) a CSR row is keyed by: dst for "in" sampling, src for "out"."""
    return 1 if direction == "in" else 0


def _write_edge_type(w: SectionWriter, src: _Source, name: str, split: SplitRules | None) -> EdgeTypeEntry:
    m = src.m
    info = m.edge_types[name]
    et = EdgeType.parse(name)
    a_col = _anchor_col(m.sample_edge_direction)
    anchor_type = (et.src_node_type, et.dst_node_type)[a_col]
    n = m.node_types[anchor_type].count
    views = ["full"] + (["train"] if split is not None and split.base_of(name) else [])
    degree = {v: np.zeros(n, dtype=np.int64) for v in views}
    for s, d, _ in src.edges(name):  # pass 1: degrees
        keys = (s, d)[a_col]
        count_rows(keys, degree["full"])
        if "train" in views:
            count_rows(keys[split.keep(name, s, d)], degree["train"])
    out: dict[str, tuple] = {}
    for v in views:
        indptr = indptr_of(degree[v])
        del degree[v]
        w.put(f"edges/{name}/{v}/indptr", indptr)
        e = int(indptr[-1])
        out[v] = (indptr[:-1].copy(), w.reserve(f"edges/{name}/{v}/indices", "<i8", (e,)),
                  w.reserve(f"edges/{name}/{v}/eids", "<i8", (e,)), e)
        del indptr
    for s, d, eids in src.edges(name):  # pass 2: scatter
        keys, nbrs = ((s, d)[a_col], (s, d)[1 - a_col])
        for v, (cursor, indices, eid_out, _) in out.items():
            sel = split.keep(name, s, d) if v == "train" else None
            k, nb, ei = (keys, nbrs, eids) if sel is None else (keys[sel], nbrs[sel], eids[sel])
            order, pos = scatter_positions(k, cursor)
            indices[pos] = nb[order]
            eid_out[pos] = ei[order]
    result = {}
    for v, (_, indices, eid_out, e) in out.items():
        w.seal(f"edges/{name}/{v}/indices", indices)
        w.seal(f"edges/{name}/{v}/eids", eid_out)
        result[v] = CsrView(count=e, indptr=f"edges/{name}/{v}/indptr",
                            indices=f"edges/{name}/{v}/indices", eids=f"edges/{name}/{v}/eids")
    if "train" not in result:
        result["train"] = result["full"]
    return EdgeTypeEntry(count=info.count, reverse_of=info.reverse_of,
                         is_supervision=info.is_supervision, views=result)


def _write_labels(w: SectionWriter, src: _Source, name: str, split: SplitRules | None) -> LabelEntry:
    et = EdgeType.parse(name)
    n = src.m.node_types[et.src_node_type].count
    degree = np.zeros(n, dtype=np.int64)
    per_split = {k: np.zeros(n, dtype=np.int64) for k in SPLIT_CODE} if split else {}
    for a, lab in src.labels(name):  # pass 1
        count_rows(a, degree)
        if split:
            codes = split.label_codes(name, a, lab)
            for k, code in SPLIT_CODE.items():
                count_rows(a[codes == code], per_split[k])
    prefix = f"labels/{name}"
    anchors = {"all": f"{prefix}/anchors/all"}
    w.put(anchors["all"], np.flatnonzero(degree).astype(np.int64))
    for k, counts in per_split.items():
        anchors[k] = f"{prefix}/anchors/{k}"
        w.put(anchors[k], np.flatnonzero(counts).astype(np.int64))
    per_split.clear()
    indptr = indptr_of(degree)
    del degree
    w.put(f"{prefix}/indptr", indptr)
    total = int(indptr[-1])
    cursor = indptr[:-1].copy()
    del indptr
    labels = w.reserve(f"{prefix}/labels", "<i8", (total,))
    codes_out = w.reserve(f"{prefix}/split", "|i1", (total,)) if split else None
    for a, lab in src.labels(name):  # pass 2
        order, pos = scatter_positions(a, cursor)
        labels[pos] = lab[order]
        if codes_out is not None:
            codes_out[pos] = split.label_codes(name, a, lab)[order]
    w.seal(f"{prefix}/labels", labels)
    if codes_out is not None:
        w.seal(f"{prefix}/split", codes_out)
    return LabelEntry(count=total, indptr=f"{prefix}/indptr", labels=f"{prefix}/labels",
                      split=f"{prefix}/split" if split else None, anchors=anchors)


def _common_header(shards: ShardSet) -> dict:
    m = shards.manifest
    with open(os.path.join(shards.root, MANIFEST), "rb") as fh:
        manifest_sha = hashlib.sha256(fh.read()).hexdigest()
    return dict(
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        sample_edge_direction=m.sample_edge_direction,
        node_types={nt: {"count": i.count, "feature_dim": i.feature_dim}
                    for nt, i in m.node_types.items()},
        source={"uri": shards.source_uri, "config_hash": m.config_hash,
                "manifest_sha256": manifest_sha},
        id_maps={nt: [{"uri": uris.join(shards.source_uri, rel), "bytes": m.files[rel].bytes}
                      for rel in m.id_map_files(nt)] for nt in m.node_types})


def _build(output: str, kind: Kind, fill) -> GraphHeader:
    """Build ``output`` under a temporary name beside it with ``fill(writer) -> header``, then
    rename it into place (a reader sees the old file or the new one)."""
    _check_output(output)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    tmp = f"{output}.tmp{os.getpid()}"
    w = SectionWriter(tmp, kind)
    try:
        header = fill(w)
        w.close(header)
        os.replace(tmp, output)
    except BaseException:
        w.abort()
        raise
    return header


def write_graph_file(shards: ShardSet | str, output: str, *, storage_args: StorageArgs | None = None,
                     batch_rows: int = BATCH_ROWS) -> GraphHeader:
    """Write the graph file of ``shards`` to the local path ``output`` (module docs).

    ``storage_args``: the training stage's storage arguments; its splitter (if any) makes the
    ``train`` view and the label splits, and its ``sample_edge_direction`` must be the shards'.
    Returns the header written."""
    shards = shards if isinstance(shards, ShardSet) else ShardSet.open(shards)
    m = shards.manifest
    if storage_args is not None and storage_args.sample_edge_direction != m.sample_edge_direction:
        raise UsageError(f"shards at {shards.source_uri} were partitioned for sample_edge_direction "
                         f"{m.sample_edge_direction!r} but storageArgs say "
                         f"{storage_args.sample_edge_direction!r}; re-partition")
    splitter = load_splitter(storage_args) if storage_args is not None else None
    split = SplitRules(splitter, m) if splitter is not None else None
    src = _Source(shards, batch_rows)
    t0 = time.perf_counter()

    # hard-negative types (labels only) are left out: replicated mode does not serve them yet
    graph_types = {name: info for name, info in m.edge_types.items() if not info.negative_of}

    def fill(w: SectionWriter) -> GraphHeader:
        edge_types = {}
        for name in graph_types:
            edge_types[name] = _write_edge_type(w, src, name, split)
            log.info("graph file: edge_type=%s edges=%d seconds=%.1f", name,
                     m.edge_types[name].count, time.perf_counter() - t0)
        supervision = {name: _write_labels(w, src, name, split)
                       for name, info in graph_types.items() if info.labels_per_partition is not None}
        spec = None
        if splitter is not None:
            spec = {"cls_path": storage_args.splitter_cls_path,
                    "kwargs": dict(storage_args.splitter_kwargs)}
        return GraphHeader(kind="graph", sections=dict(w.sections), edge_types=edge_types,
                           supervision=supervision, splitter=spec, **_common_header(shards))

    return _build(output, "graph", fill)


def write_features_file(shards: ShardSet | str, output: str, *,
                        batch_rows: int = BATCH_ROWS) -> GraphHeader:
    """Write the node features of ``shards`` (float32 [N, dim] per node type with features, row =
    dense id) to the local path ``output``. Memory: one batch of rows."""
    shards = shards if isinstance(shards, ShardSet) else ShardSet.open(shards)
    m = shards.manifest

    def fill(w: SectionWriter) -> GraphHeader:
        for nt, info in m.node_types.items():
            if not info.feature_dim:
                continue
            x = w.reserve(f"x/{nt}", "<f4", (info.count, info.feature_dim))
            cols = ["int_id"] + [f"f_{i}" for i in range(info.feature_dim)]
            for p in range(m.num_partitions):
                for batch in shards.stream_dir(node_dir(p, nt), cols, batch_rows=batch_rows):
                    ids = batch.column(0).to_numpy().astype(np.int64, copy=False)
                    x[ids] = np.stack([batch.column(i + 1).to_numpy() for i in
                                       range(info.feature_dim)], axis=1).astype(np.float32, copy=False)
            w.seal(f"x/{nt}", x)
        return GraphHeader(kind="features", sections=dict(w.sections), **_common_header(shards))

    return _build(output, "features", fill)


__all__ = ["write_graph_file", "write_features_file", "BATCH_ROWS"]
