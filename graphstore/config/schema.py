"""The task config (what to compute), declared once: its keys, types, defaults, docs and rules.

Every section is a frozen pydantic model (:class:`~graphstore.config._fields.Model`) whose aliases
are the YAML keys (camelCase, as in the seed); sequences are tuples and free-form argument maps are
read-only (``types.MappingProxyType``, nested lists frozen to tuples). The same declaration gives
the loader (:mod:`graphstore.config.loader`), ``to_dict()`` (the YAML form, fully resolved, so that
dumping and reloading gives an equal object), the JSON Schema of ``python -m pipeline schema`` and
docs/configs.md. The resource config lives in :mod:`graphstore.config.resource_schema`.

Cross-field rules run in the validator of the later section, against the earlier sections that
were valid, so one pass still reports every problem it can. Derived values are filled in here:
``storageArgs.num_server_sessions`` (1 for the trainer, one per inferred node type for the
inferencer) and ``inferencerConfig.nodeTypes`` (the node types of the supervision edge types).
When ``command`` runs the default trainer / inferencer, its args are checked by the rules of
:mod:`graphstore.config.default_args` (the same the stage applies), so ``validate`` reports them too.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Sequence

from pydantic import Field, ValidationInfo, field_validator, model_validator

from graphstore.config._dataset import DatasetConfig, check_sources, resolve_uri
from graphstore.config._fields import (
    Bad, Choice, FileModel, FreeMap, GcpProject, Int, Issues, Model, Name, Seconds, SqlName, Str, Version,
    did_you_mean, thaw_value,
)
from graphstore.config._graph import EdgeType, GraphMetadata, TaskMetadata, unique
from graphstore.config._storage import GraphStoreStorageConfig
from graphstore.runtime.errors import show
from graphstore.config.default_args import (
    DEFAULT_INFERENCER_MODULE, DEFAULT_TRAINER_MODULE, InferencerArgs, TrainerArgs, arg_problems,
    known_keys, runs_module,
)

_STORAGE = "The storage side of {} (below)."


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def _default_command_args(command: str | None, args: Mapping[str, Any], module: str,
                          args_cls: type) -> Mapping[str, Any]:
    """Check ``args`` by ``args_cls``'s rules when ``command`` runs ``module``."""
    if command is None or not runs_module(command, module):
        return args
    issues, known = Issues(), known_keys(args_cls)
    for p in arg_problems(args_cls, thaw_value(args))[1]:  # lists, as written
        if p.unknown:
            hint = did_you_mean(p.key, known) or f" (known: {', '.join(known)})"
            issues.add((p.key,), p.value,
                       f"unknown key {show(p.value)} of the default {module} arguments{hint}")
        else:
            issues.bad((p.key,), p.value, p.why)
    issues.raise_any()
    return args


def _with_sessions(issues: Issues, storage: GraphStoreStorageConfig, sessions: int,
                   derivation: str) -> GraphStoreStorageConfig:
    """``storage`` with ``num_server_sessions`` derived; a value contradicting it is a problem."""
    args = storage.storage_args
    if args.num_server_sessions not in (None, sessions):
        issues.bad(("graphStoreStorageConfig", "storageArgs", "num_server_sessions"),
                   args.num_server_sessions,
                   f"contradicts the derived value {sessions} ({derivation}); remove the key")
    args = args.model_copy(update={"num_server_sessions": sessions})
    return storage.model_copy(update={"storage_args": args})


class TrainerConfig(Model):
    """The training stage: compute command, its free-form args, and its storage side."""

    command: Str = Field(description="Command each compute machine runs for training.")
    trainer_args: FreeMap = Field(default_factory=_empty, alias="trainerArgs", description=(
        "Free map of str -> scalar / list / map, passed to the trainer (read-only; lists become tuples)."))
    storage: GraphStoreStorageConfig = Field(alias="graphStoreStorageConfig",
                                             description=_STORAGE.format("training"))

    @field_validator("trainer_args")
    @classmethod
    def _args(cls, args: Mapping[str, Any], info: ValidationInfo) -> Mapping[str, Any]:
        return _default_command_args(info.data.get("command"), args, DEFAULT_TRAINER_MODULE, TrainerArgs)


class InferencerConfig(Model):
    """The inference stage. ``node_types`` is always filled in (derived when not given)."""

    doc_defaults: ClassVar[dict[str, str]] = {"node_types": "derived"}

    command: Str = Field(description="Command each compute machine runs for inference.")
    inferencer_args: FreeMap = Field(default_factory=_empty, alias="inferencerArgs", description=(
        "Free map, as `trainerArgs`. The default inferencer (`python -m components.infer`) reads "
        "`num_neighbors` (a non-empty list of ints >= -1, or null; default: the fan-out stored in the "
        "checkpoint), `log_every_batches` (int >= 0, 20) and `checkpoint` (str URI of `model.pt`; default "
        "`<run-dir>/checkpoint/model.pt`; it must be a checkpoint the default trainer wrote, schema 2: "
        "anything else, e.g. a pickle of other objects, is refused with exit 2 and never unpickled, see "
        "`graphstore/training/checkpoint.py`) and `sampling_workers` (int >= 0 or null, as the "
        "trainer's); checked when the config loads, unknown keys are an error."))
    inference_batch_size: Int(1) = Field(4096, alias="inferenceBatchSize", description=(
        "Seed nodes per inference batch (4096: 1.4x the nodes/s of 512 in graph-store mode on 2 "
        "cores, 2026-12-06, docs/performance.md; each storage sampling worker's channel grows with it)."))
    node_types: tuple[Name, ...] | None = Field(None, alias="nodeTypes", description=(
        "Node types to embed; each declared, no duplicates. Default: every node type appearing in a "
        "supervision edge type, in `graphMetadata.nodeTypes` order; with no supervision edge types, all "
        "node types."))
    storage: GraphStoreStorageConfig = Field(alias="graphStoreStorageConfig",
                                             description=_STORAGE.format("inference"))

    @field_validator("inferencer_args")
    @classmethod
    def _args(cls, args: Mapping[str, Any], info: ValidationInfo) -> Mapping[str, Any]:
        return _default_command_args(info.data.get("command"), args, DEFAULT_INFERENCER_MODULE,
                                     InferencerArgs)

    @field_validator("node_types")
    @classmethod
    def _node_types(cls, node_types: tuple[str, ...] | None) -> tuple[str, ...] | None:
        issues = unique(node_types or ())
        if node_types == ():
            issues.bad((), [], "must list at least one node type (or be left out)")
        issues.raise_any()
        return node_types


class ExportConfig(Model):
    """Where embeddings go: a local warehouse folder or BigQuery tables ``{prefix}{node_type}``."""

    warehouse: Choice("local", "bigquery") = Field("local", description=(
        "Where embeddings go: the embedded DuckDB file, or BigQuery through load jobs (docs/pipeline.md, "
        "\"BigQuery\"). `BIGQUERY_EMULATOR_HOST` / `STORAGE_EMULATOR_HOST` point the clients at local "
        "emulators (tests)."))
    local_warehouse_uri: Str | None = Field(None, alias="localWarehouseUri", description=(
        "Local warehouse folder holding `warehouse.duckdb` (relative: to the config file's folder). "
        "Null: `warehouse/` beside the run folder, i.e. `<runRoot>/warehouse`, shared by every run under "
        "that root (the tables keep their history). Must be set when the run folder is on `gs://`."))
    bigquery_project: GcpProject | None = Field(None, alias="bigqueryProject", description=(
        "Project of the BigQuery dataset. With `bigquery`, this or "
        "`shared_resource_config.common_compute_config.project` must be set (checked with a pair)."))
    bigquery_dataset: SqlName | None = Field(None, alias="bigqueryDataset", description=(
        "Dataset of the embedding tables. With `bigquery`, this or "
        "`shared_resource_config.common_compute_config.embedding_bq_dataset_name` (the default) must be "
        "set (checked with a pair; the frozen config of a run holds the dataset used)."))
    table_prefix: SqlName = Field("embeddings_", alias="tablePrefix",
                                  description="Table name = prefix + node type.")
    model_version: Version = Field("v1", alias="modelVersion",
                                   description="Version tag written with the embeddings.")

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> ExportConfig:
        # bigqueryDataset may come from the resource config: checked by loader.check_pair
        base = (info.context or {}).get("base_dir")
        if base is None or self.local_warehouse_uri is None:
            return self
        return self.model_copy(update={"local_warehouse_uri": resolve_uri(self.local_warehouse_uri, base)})


class RuntimeConfig(Model):
    """Timeouts and heartbeats of the graph-store runtime (docs/architecture.md, Runtime contract: every wait is bounded)."""

    cluster_init_timeout_s: Seconds = Field(600.0, alias="clusterInitTimeoutS", description=(
        "The temporary global process group that exchanges addresses and ports (`get_graph_store_info`)."))
    readiness_timeout_s: Seconds = Field(1800.0, alias="readinessTimeoutS", description=(
        "How long compute waits for every storage process to load its shards and open a session."))
    rpc_timeout_s: Seconds = Field(300.0, alias="rpcTimeoutS",
                                   description="One RPC request (sampling messages, fetches).")
    session_timeout_s: Seconds = Field(86400.0, alias="sessionTimeoutS",
                                       description="The longest one storage server session may run; "
                                       "a replicated-mode worker still running then prints every "
                                       "thread's stack to its log.")
    heartbeat_interval_s: Seconds = Field(5.0, alias="heartbeatIntervalS",
                                          description="Compute and storage ping each other this often.")
    heartbeat_timeout_s: Seconds = Field(20.0, alias="heartbeatTimeoutS", description=(
        "A peer silent this long is dead: the process exits 1 naming it (no hang). The local launcher "
        "also fails a run one of whose processes has been stopped (SIGSTOP) this long. Must be greater "
        "than `heartbeatIntervalS`."))
    shutdown_timeout_s: Seconds = Field(120.0, alias="shutdownTimeoutS",
                                        description="Joining spawned processes and shutting RPC down.")
    random_seed: Int(0) = Field(42, alias="randomSeed", description=(
        "Base seed of the GLT samplers (each loader adds its rank); unseeded sampling measured ~1.8x "
        "slower."))

    @field_validator("heartbeat_timeout_s")
    @classmethod
    def _heartbeat(cls, timeout_s: float, info: ValidationInfo) -> float:
        interval_s = info.data.get("heartbeat_interval_s")
        if interval_s is not None and timeout_s <= interval_s:
            raise Bad(f"must be greater than heartbeatIntervalS ({interval_s}), or every peer looks dead")
        return timeout_s


def default_inference_node_types(node_types: Sequence[str],
                                 supervision: Sequence[EdgeType]) -> tuple[str, ...]:
    """Node types touched by a supervision edge type, in declaration order; all when none."""
    used = {t for et in supervision for t in (et.src_node_type, et.dst_node_type)}
    return tuple(t for t in node_types if t in used) if used else tuple(node_types)


class TaskConfig(FileModel):
    """The whole task config. ``source_path`` (the file it was loaded from) is excluded from equality."""

    graph_metadata: GraphMetadata = Field(alias="graphMetadata")
    task_metadata: TaskMetadata = Field(default_factory=TaskMetadata, alias="taskMetadata")
    dataset: DatasetConfig = Field(alias="datasetConfig")
    trainer: TrainerConfig = Field(alias="trainerConfig")
    inferencer: InferencerConfig = Field(alias="inferencerConfig")
    export: ExportConfig = Field(default_factory=ExportConfig, alias="exportConfig")
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, alias="graphStoreRuntimeConfig")

    @property
    def supervision_edge_types(self) -> tuple[EdgeType, ...]:
        """``taskMetadata.nodeAnchorBasedLinkPredictionTaskMetadata.supervisionEdgeTypes``."""
        return self.task_metadata.link_prediction.supervision_edge_types

    @property
    def hard_negative_edge_types(self) -> dict[EdgeType, EdgeType]:
        """``{supervision edge type: its negative edge type}`` (``hardNegativeEdgeTypes``)."""
        return self.task_metadata.link_prediction.negative_types

    @field_validator("task_metadata")
    @classmethod
    def _supervision(cls, meta: TaskMetadata, info: ValidationInfo) -> TaskMetadata:
        graph, issues = info.data.get("graph_metadata"), Issues()
        lp = "nodeAnchorBasedLinkPredictionTaskMetadata"
        for i, et in enumerate(meta.link_prediction.supervision_edge_types):
            issues.member((lp, "supervisionEdgeTypes", i), et,
                          graph and graph.edge_types, "edge type (graphMetadata.edgeTypes)")
        for i, entry in enumerate(meta.link_prediction.hard_negatives):
            issues.member((lp, "hardNegativeEdgeTypes", i, "negativeEdgeType"),
                          entry.negative_edge_type, graph and graph.edge_types,
                          "edge type (graphMetadata.edgeTypes)")
        issues.raise_any()
        return meta

    @field_validator("dataset")
    @classmethod
    def _sources(cls, dataset: DatasetConfig, info: ValidationInfo) -> DatasetConfig:
        check_sources(dataset, info.data.get("graph_metadata"))
        meta = info.data.get("task_metadata")
        negatives = set(meta.link_prediction.negative_types.values()) if meta is not None else set()
        issues = Issues()
        for i, src in enumerate(dataset.edge_sources):
            if src.edge_type in negatives and (src.weight_column or src.feature_columns):
                key = "weightColumn" if src.weight_column else "featureColumns"
                issues.bad(("dataSources", "edges", i, key),
                           src.weight_column or list(src.feature_columns),
                           f"is not read: {src.edge_type} holds hard negatives (taskMetadata."
                           "nodeAnchorBasedLinkPredictionTaskMetadata.hardNegativeEdgeTypes), which "
                           "carry no weights or features; remove it")
        issues.raise_any()
        return dataset

    @field_validator("trainer")
    @classmethod
    def _trainer(cls, trainer: TrainerConfig) -> TrainerConfig:
        issues = Issues()
        storage = _with_sessions(issues, trainer.storage, 1, "the trainer connects one compute process group")
        issues.raise_any()
        return trainer.model_copy(update={"storage": storage})

    @field_validator("inferencer")
    @classmethod
    def _inferencer(cls, inferencer: InferencerConfig, info: ValidationInfo) -> InferencerConfig:
        graph, meta, trainer = (info.data.get(k) for k in ("graph_metadata", "task_metadata", "trainer"))
        issues, node_types, storage = Issues(), inferencer.node_types, inferencer.storage
        if node_types is None and graph is not None and meta is not None:
            node_types = default_inference_node_types(graph.node_types,
                                                      meta.link_prediction.supervision_edge_types)
        for i, t in enumerate(inferencer.node_types or ()):
            issues.member(("nodeTypes", i), t, graph and graph.node_types, "node type")
        if node_types:
            storage = _with_sessions(issues, storage, len(node_types),
                                     "one server session per inferred node type")
        t_dir = trainer and trainer.storage.storage_args.sample_edge_direction
        i_dir = storage.storage_args.sample_edge_direction
        if t_dir is not None and t_dir != i_dir:
            issues.bad(("graphStoreStorageConfig", "storageArgs", "sample_edge_direction"), i_dir,
                       f"differs from trainerConfig's sample_edge_direction {t_dir!r}; the model is trained "
                       "and applied on the same edge direction, so they must be equal")
        issues.raise_any()
        return inferencer.model_copy(update={"node_types": node_types, "storage": storage})

    @model_validator(mode="after")
    def _node_types_used(self) -> TaskConfig:
        """Every declared node type has a node table or is an end of a declared edge type."""
        used = {t for et in self.graph_metadata.edge_types for t in (et.src_node_type, et.dst_node_type)}
        used |= {n.node_type for n in self.dataset.node_sources}
        issues = Issues()
        for i, t in enumerate(self.graph_metadata.node_types):
            if t not in used:
                issues.bad(("graphMetadata", "nodeTypes", i), t,
                           "has no node table (datasetConfig.dataSources.nodes) and is an end of no edge "
                           "type (graphMetadata.edgeTypes); give it a node table or remove it")
        issues.raise_any()
        return self
