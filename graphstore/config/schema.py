"""Typed, frozen config tree for the task config (what to compute).

Every class is a frozen keyword-only dataclass; sequences are tuples and free-form argument maps are
read-only (``types.MappingProxyType``, nested lists frozen to tuples). Instances are built by
:mod:`graphstore.config.loader`, which validates everything first; only :class:`EdgeType` re-checks
its own invariants because code outside the loader builds it too. ``to_dict()`` gives the YAML
spelling (camelCase keys, as written in task files), fully resolved, so that dumping and reloading
gives an equal object. The resource config tree lives in :mod:`graphstore.config.resource_schema`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
"""Node types and relations become file and table names: a letter, then letters, digits, ``_``."""

SQL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""BigQuery dataset names and table prefixes (never interpolate anything else into SQL)."""

EDGE_TYPE_SEP = "__"

SourceFormat = Literal["parquet", "csv", "bigquery"]
EdgeDirection = Literal["in", "out"]


def name_error(name: object) -> str | None:
    """Return why ``name`` is not a valid node type / relation name, or ``None`` if it is valid."""
    if not isinstance(name, str):
        return f"must be a string, got {type(name).__name__}"
    if not NAME_RE.match(name):
        return "must match ^[A-Za-z][A-Za-z0-9_]*$ (it becomes a file and table name)"
    if EDGE_TYPE_SEP in name:
        return f"must not contain {EDGE_TYPE_SEP!r} (it separates the parts of an edge type name)"
    return None


def freeze_value(value: Any) -> Any:
    """Deep-freeze a YAML value: mappings -> ``MappingProxyType``, lists -> tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze_value(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    return value


def thaw_value(value: Any) -> Any:
    """Inverse of :func:`freeze_value`: plain dicts and lists, ready for ``yaml.safe_dump``."""
    if isinstance(value, Mapping):
        return {k: thaw_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw_value(v) for v in value]
    return value


def _empty_mapping() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class EdgeType:
    """A directed edge type ``src --relation--> dst``, as the user reads it."""

    src_node_type: str
    relation: str
    dst_node_type: str

    def __post_init__(self) -> None:
        for part in ("src_node_type", "relation", "dst_node_type"):
            value = getattr(self, part)
            why = name_error(value)
            if why:
                raise ValueError(f"EdgeType: {part} {value!r} {why}")

    def __str__(self) -> str:
        return EDGE_TYPE_SEP.join(self.as_tuple())

    def as_tuple(self) -> tuple[str, str, str]:
        """``(src_node_type, relation, dst_node_type)``, the PyG / GLT edge type tuple."""
        return (self.src_node_type, self.relation, self.dst_node_type)

    @classmethod
    def parse(cls, text: str) -> EdgeType:
        """Parse ``"src__relation__dst"`` (the ``str()`` form)."""
        parts = text.split(EDGE_TYPE_SEP)
        if len(parts) != 3:
            raise ValueError(f"EdgeType.parse: {text!r} is not of the form 'src__relation__dst'")
        return cls(src_node_type=parts[0], relation=parts[1], dst_node_type=parts[2])

    def reverse(self) -> EdgeType:
        """The reverse edge type, with graphlearn-for-pytorch's convention (``reverse_edge_type``).

        ``user-buys->item`` becomes ``item-rev_buys->user`` and ``rev_`` is stripped again on the way
        back; an edge type whose two ends are the same node type is its own reverse.
        """
        if self.src_node_type == self.dst_node_type:
            return self
        relation = self.relation[4:] if self.relation.startswith("rev_") else "rev_" + self.relation
        return EdgeType(src_node_type=self.dst_node_type, relation=relation,
                        dst_node_type=self.src_node_type)

    def to_dict(self) -> dict[str, str]:
        """YAML spelling: ``{srcNodeType, relation, dstNodeType}``."""
        return {"srcNodeType": self.src_node_type, "relation": self.relation,
                "dstNodeType": self.dst_node_type}


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphMetadata:
    """The declared node and edge types, in file order."""

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]

    @property
    def is_homogeneous(self) -> bool:
        """One node type and one edge type: loaders take plain tensors instead of typed dicts."""
        return len(self.node_types) == 1 and len(self.edge_types) == 1

    def to_dict(self) -> dict[str, Any]:
        return {"nodeTypes": list(self.node_types), "edgeTypes": [e.to_dict() for e in self.edge_types]}


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSource:
    """A node table: one row per node, ``id_column`` holding its raw id."""

    node_type: str
    uri: str
    format: SourceFormat
    id_column: str
    feature_columns: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"nodeType": self.node_type, "uri": self.uri, "format": self.format,
                "idColumn": self.id_column, "featureColumns": list(self.feature_columns)}


@dataclass(frozen=True, kw_only=True, slots=True)
class EdgeSource:
    """An edge table: one row per edge, raw ids of both ends, optional weight and features."""

    edge_type: EdgeType
    uri: str
    format: SourceFormat
    src_column: str = "src"
    dst_column: str = "dst"
    weight_column: str | None = None
    feature_columns: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"edgeType": self.edge_type.to_dict(), "uri": self.uri, "format": self.format,
                "srcColumn": self.src_column, "dstColumn": self.dst_column,
                "weightColumn": self.weight_column, "featureColumns": list(self.feature_columns)}


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionConfig:
    """How the partitioner splits the graph. ``num_partitions=None`` means: the storage count."""

    num_partitions: int | None = None
    dangling_edges: Literal["error", "drop"] = "error"
    add_reverse_edges: bool = True
    memory_limit_mb: int = 2048
    parquet_compression: Literal["uncompressed", "snappy", "zstd"] = "uncompressed"

    def to_dict(self) -> dict[str, Any]:
        return {"numPartitions": self.num_partitions, "danglingEdges": self.dangling_edges,
                "addReverseEdges": self.add_reverse_edges, "memoryLimitMb": self.memory_limit_mb,
                "parquetCompression": self.parquet_compression}


@dataclass(frozen=True, kw_only=True, slots=True)
class DatasetConfig:
    """Where the raw tables are. Every uri is resolved: absolute local path or untouched ``gs://``."""

    data_root_uri: str | None
    node_sources: tuple[NodeSource, ...]
    edge_sources: tuple[EdgeSource, ...]
    partition: PartitionConfig = field(default_factory=PartitionConfig)

    def to_dict(self) -> dict[str, Any]:
        return {"dataRootUri": self.data_root_uri,
                "dataSources": {"nodes": [n.to_dict() for n in self.node_sources],
                                "edges": [e.to_dict() for e in self.edge_sources]},
                "partitionConfig": self.partition.to_dict()}


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageArgs:
    """Arguments of the storage command. ``num_server_sessions`` is always filled in (derived)."""

    sample_edge_direction: EdgeDirection = "in"
    splitter_cls_path: str | None = None
    splitter_kwargs: Mapping[str, Any] = field(default_factory=_empty_mapping)
    num_server_sessions: int

    def to_dict(self) -> dict[str, Any]:
        return {"sample_edge_direction": self.sample_edge_direction,
                "splitter_cls_path": self.splitter_cls_path,
                "splitter_kwargs": thaw_value(self.splitter_kwargs),
                "num_server_sessions": self.num_server_sessions}


@dataclass(frozen=True, kw_only=True, slots=True)
class GraphStoreStorageConfig:
    """The storage side of one stage: the command each storage process runs, and its arguments."""

    command: str
    storage_args: StorageArgs

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "storageArgs": self.storage_args.to_dict()}


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainerConfig:
    """The training stage: compute command, its free-form args, and its storage side."""

    command: str
    trainer_args: Mapping[str, Any] = field(default_factory=_empty_mapping)
    storage: GraphStoreStorageConfig

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "trainerArgs": thaw_value(self.trainer_args),
                "graphStoreStorageConfig": self.storage.to_dict()}


@dataclass(frozen=True, kw_only=True, slots=True)
class InferencerConfig:
    """The inference stage. ``node_types`` is always filled in (derived when not given)."""

    command: str
    inferencer_args: Mapping[str, Any] = field(default_factory=_empty_mapping)
    inference_batch_size: int = 512
    node_types: tuple[str, ...]
    storage: GraphStoreStorageConfig

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "inferencerArgs": thaw_value(self.inferencer_args),
                "inferenceBatchSize": self.inference_batch_size, "nodeTypes": list(self.node_types),
                "graphStoreStorageConfig": self.storage.to_dict()}


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportConfig:
    """Where embeddings go: a local warehouse folder or BigQuery tables ``{prefix}{node_type}``."""

    warehouse: Literal["local", "bigquery"] = "local"
    local_warehouse_uri: str | None = None
    bigquery_project: str | None = None
    bigquery_dataset: str | None = None
    table_prefix: str = "embeddings_"
    model_version: str = "v1"

    def to_dict(self) -> dict[str, Any]:
        return {"warehouse": self.warehouse, "localWarehouseUri": self.local_warehouse_uri,
                "bigqueryProject": self.bigquery_project, "bigqueryDataset": self.bigquery_dataset,
                "tablePrefix": self.table_prefix, "modelVersion": self.model_version}


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeConfig:
    """Timeouts and heartbeats of the graph-store runtime (DESIGN §5: every wait is bounded)."""

    cluster_init_timeout_s: float = 600.0  # temporary global group + get_graph_store_info
    readiness_timeout_s: float = 1800.0  # compute waits for storage to load its shards
    rpc_timeout_s: float = 300.0  # one RPC request (sampling, fetches)
    session_timeout_s: float = 86400.0  # longest a storage server session may run
    heartbeat_interval_s: float = 5.0  # peers are pinged this often
    heartbeat_timeout_s: float = 20.0  # a peer that does not answer for this long is dead
    shutdown_timeout_s: float = 120.0  # joining spawned processes, shutting RPC down
    random_seed: int = 42  # base seed for GLT samplers (unseeded sampling is ~1.8x slower)

    def to_dict(self) -> dict[str, Any]:
        return {"clusterInitTimeoutS": self.cluster_init_timeout_s,
                "readinessTimeoutS": self.readiness_timeout_s,
                "rpcTimeoutS": self.rpc_timeout_s, "sessionTimeoutS": self.session_timeout_s,
                "heartbeatIntervalS": self.heartbeat_interval_s,
                "heartbeatTimeoutS": self.heartbeat_timeout_s,
                "shutdownTimeoutS": self.shutdown_timeout_s, "randomSeed": self.random_seed}


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskConfig:
    """The whole task config. ``source_path`` is informational and excluded from equality."""

    graph_metadata: GraphMetadata
    supervision_edge_types: tuple[EdgeType, ...] = ()
    dataset: DatasetConfig
    trainer: TrainerConfig
    inferencer: InferencerConfig
    export: ExportConfig = field(default_factory=ExportConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    source_path: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (camelCase keys), fully resolved; loading it back gives an equal config."""
        return {
            "graphMetadata": self.graph_metadata.to_dict(),
            "taskMetadata": {"nodeAnchorBasedLinkPredictionTaskMetadata": {
                "supervisionEdgeTypes": [e.to_dict() for e in self.supervision_edge_types]}},
            "datasetConfig": self.dataset.to_dict(),
            "trainerConfig": self.trainer.to_dict(),
            "inferencerConfig": self.inferencer.to_dict(),
            "exportConfig": self.export.to_dict(),
            "graphStoreRuntimeConfig": self.runtime.to_dict(),
        }
