"""``datasetConfig`` -> :class:`~graphstore.config.schema.DatasetConfig` (internal).

URI resolution: ``dataRootUri`` is resolved against the config file's folder when relative; a source
``uri`` is resolved against ``dataRootUri`` when set, else against the config file's folder. Local
results are absolute, normalised paths; anything with a scheme (``gs://...``, ``bq://...``) is left
untouched, so a resolved (frozen) config loads the same from any folder. A ``bq://project.dataset.table``
uri is a BigQuery table (format ``bigquery``; graphstore.bigquery_source).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from graphstore.bigquery_source import TABLE_PATTERN as BQ_TABLE
from graphstore.config import _fields as F
from graphstore.config._fields import Collector, join
from graphstore.config.errors import show
from graphstore.config.schema import DatasetConfig, EdgeSource, EdgeType, NodeSource, PartitionConfig

NODE_SOURCE_KEYS = ("nodeType", "uri", "format", "idColumn", "featureColumns")
EDGE_SOURCE_KEYS = ("edgeType", "uri", "format", "srcColumn", "dstColumn", "weightColumn",
                    "featureColumns")
PARTITION_KEYS = ("numPartitions", "danglingEdges", "addReverseEdges", "memoryLimitMb",
                  "parquetCompression")
MIN_MEMORY_LIMIT_MB = 128
"""Least ``memoryLimitMb``: the tiny generated dataset as CSV (the DuckDB path, whose CSV reader
takes ~30 MiB buffers per thread) partitions with 120 MB and fails with 112 MB (2 cores, DuckDB 1.5.5;
Parquet on the in-memory path needs 4 MB)."""

MAX_MEMORY_LIMIT_MB = 16 << 20
"""Most ``memoryLimitMb`` (16 TiB); DuckDB cannot parse a limit of 10**15 MB or more."""

_FORMAT_BY_EXT = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def is_remote(uri: str) -> bool:
    """True for ``scheme://...`` uris (``gs://``, ``file://``), which are never rewritten."""
    return "://" in uri


def resolve_uri(uri: str, base: str) -> str:
    """Resolve ``uri`` against ``base`` (a local folder or a remote prefix); see the module doc."""
    if is_remote(uri):
        return uri
    uri = os.path.expanduser(uri)
    if os.path.isabs(uri):
        return os.path.normpath(uri)
    if is_remote(base):
        return base.rstrip("/") + "/" + uri
    return os.path.normpath(os.path.join(base, uri))


def _format(col: Collector, m: Mapping[str, Any], path: str, uri: str | None) -> str | None:
    if uri is not None and uri.startswith("bq://"):  # a BigQuery table (graphstore.bigquery_source)
        if m.get("format") not in (None, "bigquery"):
            col.bad(join(path, "format"), m.get("format"), "must be bigquery (or absent) for a bq:// uri")
        if not BQ_TABLE.match(uri):
            col.bad(join(path, "uri"), uri, "is not a BigQuery table: use bq://project.dataset.table")
        return "bigquery"
    if m.get("format") is not None:
        return F.take(col, m, path, "format", F.as_literal("parquet", "csv"))
    if uri is None:
        return None
    name = uri.rstrip("/").lower()
    name = name[:-3] if name.endswith(".gz") else name
    ext = os.path.splitext(name)[1]
    if ext not in _FORMAT_BY_EXT:
        col.bad(join(path, "uri"), uri, "has no .parquet/.pq/.csv(.gz) extension to infer the "
                "format from; add format: parquet or format: csv")
        return None
    return _FORMAT_BY_EXT[ext]


def _node_source(col: Collector, path: str, raw: Any, base: str,
                 node_types: Sequence[str] | None) -> NodeSource | None:
    m = F.section(col, path, raw, NODE_SOURCE_KEYS)
    if m is None:
        return None
    node_type = F.take(col, m, path, "nodeType", F.as_name)
    F.check_member(col, join(path, "nodeType"), node_type, node_types, "node type")
    uri = F.take(col, m, path, "uri", F.as_str)
    return NodeSource(node_type=node_type, uri=None if uri is None else resolve_uri(uri, base),
                      format=_format(col, m, path, uri), id_column=F.take(col, m, path, "idColumn", F.as_str),
                      feature_columns=F.take_tuple(col, m, path, "featureColumns", F.as_str, ()))


def _edge_source(col: Collector, path: str, raw: Any, base: str,
                 node_types: Sequence[str] | None) -> EdgeSource | None:
    m = F.section(col, path, raw, EDGE_SOURCE_KEYS)
    if m is None:
        return None
    if "edgeType" not in m:
        col.add(join(path, "edgeType"), None, "missing required key 'edgeType'", missing=True)
        edge_type = None
    else:
        edge_type = F.read_edge_type(col, join(path, "edgeType"), m["edgeType"], node_types)
    uri = F.take(col, m, path, "uri", F.as_str)
    src = F.take(col, m, path, "srcColumn", F.as_str, "src")
    dst = F.take(col, m, path, "dstColumn", F.as_str, "dst")
    if src is not None and src == dst:
        col.bad(join(path, "dstColumn"), dst, "is also the srcColumn; the two ends need two columns")
    return EdgeSource(edge_type=edge_type, uri=None if uri is None else resolve_uri(uri, base),
                      format=_format(col, m, path, uri), src_column=src, dst_column=dst,
                      weight_column=F.take(col, m, path, "weightColumn", F.optional(F.as_str), None),
                      feature_columns=F.take_tuple(col, m, path, "featureColumns", F.as_str, ()))


def _check_coverage(col: Collector, path: str, sources: list[tuple[str, Any]], key: str,
                    declared: Sequence[Any] | None, *, every: bool) -> None:
    """At most one source per type; with ``every``, each declared type needs exactly one."""
    seen: dict[Any, str] = {}
    for item_path, typ in sources:
        if typ is None:
            continue
        if typ in seen:
            col.bad(join(item_path, key), str(typ), f"already has a source at {seen[typ]}; "
                    "give each type exactly one source")
        seen.setdefault(typ, item_path)
        if every and declared is not None:
            F.check_member(col, join(item_path, key), str(typ), [str(t) for t in declared],
                           "edge type (graphMetadata.edgeTypes)")
    if every and declared is not None:
        for typ in declared:
            if typ not in seen:
                col.add(path, None, f"declared edge type {show(str(typ))} has no edge source; add one "
                        "(every declared edge type needs exactly one)", missing=True)


def _partition(col: Collector, ds: Mapping[str, Any]) -> PartitionConfig | None:
    path = "datasetConfig.partitionConfig"
    pc = F.take_section(col, ds, "datasetConfig", "partitionConfig", PARTITION_KEYS)
    if pc is None:
        return None
    return PartitionConfig(
        num_partitions=F.take(col, pc, path, "numPartitions", F.optional(F.as_int(1)), None),
        dangling_edges=F.take(col, pc, path, "danglingEdges", F.as_literal("error", "drop"), "error"),
        add_reverse_edges=F.take(col, pc, path, "addReverseEdges", F.as_bool, True),
        memory_limit_mb=F.take(col, pc, path, "memoryLimitMb",
                               F.as_int(MIN_MEMORY_LIMIT_MB, MAX_MEMORY_LIMIT_MB, " (MB)"), 2048),
        parquet_compression=F.take(col, pc, path, "parquetCompression",
                                   F.as_literal("uncompressed", "snappy", "zstd"), "uncompressed"))


def read_dataset(col: Collector, top: Mapping[str, Any], base_dir: str,
                 node_types: Sequence[str] | None,
                 edge_types: Sequence[EdgeType] | None) -> DatasetConfig | None:
    """Read ``datasetConfig``: resolve uris, check every source's type and the coverage rules."""
    path = "datasetConfig"
    ds = F.take_section(col, top, "", path, ("dataRootUri", "dataSources", "partitionConfig"),
                        required=True)
    if ds is None:
        return None
    root = F.take(col, ds, path, "dataRootUri", F.optional(F.as_str), None)
    root = None if root is None else resolve_uri(root, base_dir)
    src_path = join(path, "dataSources")
    src = F.take_section(col, ds, path, "dataSources", ("nodes", "edges"), required=True)
    nodes = edges = None
    if src is not None:
        base = root or base_dir
        node_items = F.take_items(col, src, src_path, "nodes") or []
        nodes = [(p, _node_source(col, p, raw, base, node_types)) for p, raw in node_items]
        edge_items = F.take_items(col, src, src_path, "edges", required=True) or []
        edges = [(p, _edge_source(col, p, raw, base, node_types)) for p, raw in edge_items]
        _check_coverage(col, join(src_path, "nodes"), [(p, n and n.node_type) for p, n in nodes],
                        "nodeType", None, every=False)
        _check_coverage(col, join(src_path, "edges"), [(p, e and e.edge_type) for p, e in edges],
                        "edgeType", edge_types, every=True)
    return DatasetConfig(data_root_uri=root,
                         node_sources=tuple(n for _, n in nodes or ()),
                         edge_sources=tuple(e for _, e in edges or ()),
                         partition=_partition(col, ds))
