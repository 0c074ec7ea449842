"""``datasetConfig``: where the raw tables are and how they are partitioned (internal module).

URI resolution: ``dataRootUri`` is resolved against the config file's folder when relative; a source
``uri`` is resolved against ``dataRootUri`` when set, else against the config file's folder (the
loader passes the folder as validation context ``base_dir``). Local results are absolute, normalised
paths; anything with a scheme (``gs://...``, ``bq://...``) is left untouched, so a resolved (frozen)
config loads the same from any folder. A ``bq://project.dataset.table`` uri is a BigQuery table
(format ``bigquery``; graphstore.io.bigquery_source).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal, Sequence

from pydantic import Field, ValidationInfo, field_validator, model_validator

from graphstore.io.bigquery_source import TABLE_PATTERN as BQ_TABLE, is_bigquery
from graphstore.config._fields import Bool, Choice, Int, Issues, Model, Name, SqlName, Str
from graphstore.config._graph import EdgeType, GraphMetadata, unique
from graphstore.runtime.errors import show

MIN_MEMORY_LIMIT_MB = 128
"""Least ``memoryLimitMb``: the tiny generated dataset as CSV (the DuckDB path, whose CSV reader
takes ~30 MiB buffers per thread) partitions with 120 MB and fails with 112 MB (2 cores, DuckDB 1.5.5;
Parquet on the in-memory path needs 4 MB)."""

MAX_MEMORY_LIMIT_MB = 16 << 20
"""Most ``memoryLimitMb`` (16 TiB); DuckDB cannot parse a limit of 10**15 MB or more."""

SourceFormat = Literal["parquet", "csv", "bigquery"]
_FORMAT_BY_EXT = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
_URI = ("The table: a file (local or `gs://`), or a BigQuery table `bq://project.dataset.table` (the "
        "partition stage pages the columns it uses into a local Parquet file with the official client).")
_FORMAT = ("Inferred from `.parquet`, `.pq`, `.csv`, `.csv.gz`, and `bq://`; required for any other name "
           "(e.g. a folder). CSV: comma-separated, `\"`-quoted, a header row, column types detected from "
           "the data; a `.gz` file is checked whole (a truncated one is an error, not fewer rows).")


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


def _source_format(uri: str, given: str | None) -> str:
    """The format of a source: checked against a ``bq://`` uri, else given or inferred from the name."""
    issues = Issues()
    if is_bigquery(uri):  # a BigQuery table (graphstore.io.bigquery_source)
        if given not in (None, "bigquery"):
            issues.bad(("format",), given, "must be bigquery (or absent) for a bq:// uri")
        if not BQ_TABLE.match(uri):
            issues.bad(("uri",), uri, "is not a BigQuery table: use bq://project.dataset.table")
        issues.raise_any()
        return "bigquery"
    if given == "bigquery":
        issues.bad(("format",), given, "is only for a bq://project.dataset.table uri")
    elif given is not None:
        return given
    name = uri.rstrip("/").lower()
    ext = os.path.splitext(name[:-3] if name.endswith(".gz") else name)[1]
    if given is None and ext not in _FORMAT_BY_EXT:
        issues.bad(("uri",), uri, "has no .parquet/.pq/.csv(.gz) extension to infer the format from; "
                   "add format: parquet or format: csv")
    issues.raise_any()
    return _FORMAT_BY_EXT[ext]


class _Source(Model):
    @field_validator("feature_columns", check_fields=False)
    @classmethod
    def _unique_columns(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
        unique(columns).raise_any()
        return columns


class NodeSource(_Source):
    """A node table: one row per node, ``id_column`` holding its raw id."""

    doc_name: ClassVar[str] = "node source"

    node_type: Name = Field(alias="nodeType", description="A declared node type.")
    uri: Str = Field(description=_URI)
    format: Choice("parquet", "csv", "bigquery") | None = Field(None, description=_FORMAT)
    id_column: Str = Field(alias="idColumn", description="Column of raw node ids (string or int).")
    feature_columns: tuple[Str, ...] = Field((), alias="featureColumns",
                                             description="Float feature columns, in feature order.")

    doc_defaults: ClassVar[dict[str, str]] = {"format": "from the uri"}

    @model_validator(mode="after")
    def _format(self) -> NodeSource:
        return self.model_copy(update={"format": _source_format(self.uri, self.format)})


class EdgeSource(_Source):
    """An edge table: one row per edge, raw ids of both ends, optional weight and features."""

    doc_name: ClassVar[str] = "edge source"

    edge_type: EdgeType = Field(alias="edgeType", description="A declared edge type.")
    uri: Str = Field(description="The table: a file or `bq://project.dataset.table`, as for node sources.")
    format: Choice("parquet", "csv", "bigquery") | None = Field(None, description="As for node sources.")
    src_column: Str = Field("src", alias="srcColumn", description="Column of raw ids of the source node.")
    dst_column: Str = Field("dst", alias="dstColumn", description=(
        "Column of raw ids of the destination node; must differ from `srcColumn`."))
    weight_column: Str | None = Field(None, alias="weightColumn", description="Optional edge weight column.")
    feature_columns: tuple[Str, ...] = Field((), alias="featureColumns",
                                             description="Float edge feature columns.")

    doc_defaults: ClassVar[dict[str, str]] = {"format": "from the uri"}

    @model_validator(mode="after")
    def _checks(self) -> EdgeSource:
        if self.src_column == self.dst_column:
            issues = Issues()
            issues.bad(("dstColumn",), self.dst_column,
                       "is also the srcColumn; the two ends need two columns")
            issues.raise_any()
        return self.model_copy(update={"format": _source_format(self.uri, self.format)})


class DataSources(Model):
    """``dataSources``: the raw tables."""

    doc_inline: ClassVar[bool] = True

    nodes: tuple[NodeSource, ...] = Field((), description=(
        "Node tables; at most one per node type. A node type without a table gets its ids from the "
        "edges and has no features."))
    edges: tuple[EdgeSource, ...] = Field(description=(
        "Edge tables; **exactly one per declared edge type**, and each one's type must be declared."))


class BigQueryEngineConfig(Model):
    """``partitionConfig.bigquery``: where the BigQuery engine runs its jobs."""

    doc_name: ClassVar[str] = "BigQuery engine config"

    project: Str | None = Field(None, description=(
        "Project the SQL jobs run (and are billed) in and the scratch dataset belongs to. Null: the "
        "project of the first `bq://` source table."))
    dataset: SqlName = Field("graphstore_scratch", description=(
        "Dataset of the scratch tables (created when missing). Each run's tables are named "
        "`gsp_<version tag>_<what>`, expire after 24 hours and are dropped when the run ends."))
    location: Str | None = Field(None, description=(
        "Location of the jobs and of a scratch dataset the engine creates (e.g. `US`, `EU`, "
        "`europe-west4`); it must be the source tables' location. Null: the first source table's "
        "dataset's location."))


class PartitionConfig(Model):
    """How the partitioner splits the graph. ``num_partitions=None`` means: the storage count."""

    num_partitions: Int(1) | None = Field(None, alias="numPartitions", description=(
        "Number of partitions. Null: the resource config's storage count (one partition per storage "
        "process). When set with a resource config, it must equal that count; so must "
        "`--num-partitions` of `python -m components.partition` (the same check)."))
    dangling_edges: Choice("error", "drop") = Field("error", alias="danglingEdges", description=(
        "An edge whose end is missing from its node table: fail, or drop and count it."))
    add_reverse_edges: Bool = Field(True, alias="addReverseEdges", description=(
        "Also write the reverse of every edge type whose two node types differ (`item__rev_buys__user` "
        "for `user__buys__item`), placed by its own anchor, so every node type receives messages in a "
        "heterogeneous GNN."))
    memory_limit_mb: Int(MIN_MEMORY_LIMIT_MB, MAX_MEMORY_LIMIT_MB, " (MB)") = Field(
        2048, alias="memoryLimitMb", description=(
            "Memory budget of the partitioner, in MB (128 MB to 16 TiB). The least is measured: the tiny "
            "generated dataset (`--size tiny`) as CSV, which goes through DuckDB's CSV reader (~30 MiB "
            "buffers per thread), partitions with 120 MB and runs out of memory with 112 MB on 2 cores "
            "(as Parquet on the in-memory path it needs 4 MB); more cores may need more. DuckDB cannot "
            "parse a limit of 10^15 MB or more. A node type whose table (ids and features) and id map fit "
            "a quarter of it is numbered in memory and its edge types are mapped in chunks in memory "
            "(fastest); otherwise DuckDB joins within this limit and spills to disk."))
    engine: Choice("auto", "local", "bigquery") = Field("auto", description=(
        "Who does the work. `local`: this task's machine reads every row (files, or `bq://` tables "
        "paged through the client) and numbers, joins and writes with DuckDB and numpy "
        "(graphstore/partition/engine.py). `bigquery`: SQL jobs in BigQuery number the nodes, map "
        "the edges and EXPORT the shard files straight to the gs:// output; no row passes through "
        "this machine (graphstore/partition/bigquery_engine.py; every source must be `bq://`, the "
        "output `gs://`). `auto`: `bigquery` when every source is `bq://` and the output is "
        "`gs://` (a Vertex AI run on BigQuery tables), else `local`. See docs/vertex.md."))
    bigquery: BigQueryEngineConfig = Field(default_factory=BigQueryEngineConfig, description=(
        "Where the BigQuery engine runs (used only by it)."))

    doc_defaults: ClassVar[dict[str, str]] = {"bigquery": "see below"}
    parquet_compression: Choice("uncompressed", "snappy", "zstd") = Field(
        "uncompressed", alias="parquetCompression", description=(
            "Compression of every shard file. Dense int64 ids and float features barely compress: "
            "`uncompressed` partitions fastest (10 M edges: 5.8 s against 7.2–7.6 s with `snappy`, files "
            "471 MB against 338 MB, measured here); `zstd` writes the smallest files (254 MB), for shards "
            "that travel over the network."))


class DatasetConfig(Model):
    """Where the raw tables are. Every uri is resolved: absolute local path or untouched ``gs://``."""

    data_root_uri: Str | None = Field(None, alias="dataRootUri",
                                      description="Base for relative source uris (see URIs).")
    data_sources: DataSources = Field(alias="dataSources")
    partition: PartitionConfig = Field(default_factory=PartitionConfig, alias="partitionConfig",
                                       description="How the partitioner splits the graph.")

    doc_defaults: ClassVar[dict[str, str]] = {"partition": "see below"}

    @property
    def node_sources(self) -> tuple[NodeSource, ...]:
        return self.data_sources.nodes

    @property
    def edge_sources(self) -> tuple[EdgeSource, ...]:
        return self.data_sources.edges

    @model_validator(mode="after")
    def _resolve_uris(self, info: ValidationInfo) -> DatasetConfig:
        base = (info.context or {}).get("base_dir")
        if base is None:
            return self
        root = None if self.data_root_uri is None else resolve_uri(self.data_root_uri, base)
        nodes, edges = ((s.model_copy(update={"uri": resolve_uri(s.uri, root or base)}) for s in sources)
                        for sources in (self.node_sources, self.edge_sources))
        sources = DataSources(nodes=tuple(nodes), edges=tuple(edges))
        return self.model_copy(update={"data_root_uri": root, "data_sources": sources})


def _one_source_each(issues: Issues, kind: str, key: str, types: Sequence[Any]) -> None:
    seen: dict[str, int] = {}
    for i, typ in enumerate(map(str, types)):
        if typ in seen:
            issues.bad(("dataSources", kind, i, key), typ,
                       f"already has a source at datasetConfig.dataSources.{kind}[{seen[typ]}]; "
                       "give each type exactly one source")
        seen.setdefault(typ, i)


def check_sources(dataset: DatasetConfig, graph: GraphMetadata | None) -> None:
    """Each source's type is declared, at most one source per type, one per declared edge type."""
    issues = Issues()
    _one_source_each(issues, "nodes", "nodeType", [n.node_type for n in dataset.node_sources])
    _one_source_each(issues, "edges", "edgeType", [e.edge_type for e in dataset.edge_sources])
    if graph is not None:
        for i, n in enumerate(dataset.node_sources):
            issues.member(("dataSources", "nodes", i, "nodeType"), n.node_type, graph.node_types,
                          "node type")
        for i, e in enumerate(dataset.edge_sources):
            loc = ("dataSources", "edges", i, "edgeType")
            ends = [issues.member((*loc, key), end, graph.node_types, "node type") for key, end in
                    (("srcNodeType", e.edge_type.src_node_type), ("dstNodeType", e.edge_type.dst_node_type))]
            if all(ends):
                issues.member(loc, e.edge_type, graph.edge_types, "edge type (graphMetadata.edgeTypes)")
        covered = {e.edge_type for e in dataset.edge_sources}
        for et in graph.edge_types:
            if et not in covered:
                issues.add(("dataSources", "edges"), None, f"declared edge type {show(str(et))} has no edge "
                           "source; add one (every declared edge type needs exactly one)", missing=True)
    if dataset.partition.engine == "bigquery":
        for kind, sources in (("nodes", dataset.node_sources), ("edges", dataset.edge_sources)):
            for i, src in enumerate(sources):
                if not is_bigquery(src.uri):
                    issues.bad(("dataSources", kind, i, "uri"), src.uri,
                               "is not a bq:// table, and partitionConfig.engine is bigquery (it "
                               "reads BigQuery tables only); load it into BigQuery or use the "
                               "local engine")
    issues.raise_any()


def partition_engine(dataset: DatasetConfig, output_uri: str) -> Literal["local", "bigquery"]:
    """The engine ``partitionConfig.engine`` picks for a shard set written to ``output_uri``
    (``auto``: BigQuery when every source is ``bq://`` and the output ``gs://``)."""
    engine = dataset.partition.engine
    if engine != "auto":
        return engine
    sources = (*dataset.node_sources, *dataset.edge_sources)
    if output_uri.startswith("gs://") and all(is_bigquery(s.uri) for s in sources):
        return "bigquery"
    return "local"
