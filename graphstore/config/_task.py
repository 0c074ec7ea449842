"""Raw task-config YAML -> :class:`~graphstore.config.schema.TaskConfig` (internal).

Reads every section, records every problem in the :class:`Collector`, runs the cross-field checks,
and builds the frozen tree only when the file had no problem. Derived values filled in here:
``storageArgs.num_server_sessions`` (1 for the trainer, one per inferred node type for the
inferencer) and ``inferencerConfig.nodeTypes`` (the node types of the supervision edge types).

When ``trainerConfig.command`` / ``inferencerConfig.command`` runs the default trainer / inferencer,
its ``trainerArgs`` / ``inferencerArgs`` are checked here by the rules of
:mod:`graphstore.training.args` (the same the stage applies), so ``validate`` reports them too. Every
declared node type needs a node table or an edge type (the partitioner has nothing to number otherwise).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from graphstore.config import _fields as F
from graphstore.config._dataset import read_dataset, resolve_uri
from graphstore.config._fields import Collector, join, read_edge_types
from graphstore.config._storage import read_storage
from graphstore.config.errors import clip, show
from graphstore.config.schema import (
    EdgeType, ExportConfig, GraphMetadata, InferencerConfig, RuntimeConfig, TaskConfig,
    TrainerConfig,
)
from graphstore.training.args import (
    DEFAULT_INFERENCER_MODULE, DEFAULT_TRAINER_MODULE, InferencerArgs, TrainerArgs, arg_problems,
    known_keys, runs_module,
)

TASK_KEYS = ("graphMetadata", "taskMetadata", "datasetConfig", "trainerConfig", "inferencerConfig",
             "exportConfig", "graphStoreRuntimeConfig")
NAB_KEY = "nodeAnchorBasedLinkPredictionTaskMetadata"


def _graph_metadata(col: Collector, top: Mapping[str, Any]) -> tuple[tuple[str, ...] | None,
                                                                    tuple[EdgeType, ...] | None]:
    gm = F.take_section(col, top, "", "graphMetadata", ("nodeTypes", "edgeTypes"), required=True)
    if gm is None:
        return None, None
    path = "graphMetadata"
    node_types = F.take_tuple(col, gm, path, "nodeTypes", F.as_name)
    if node_types == ():
        col.bad(join(path, "nodeTypes"), [], "must declare at least one node type")
    edges = read_edge_types(col, gm, path, "edgeTypes", node_types, required=True)
    if edges == []:
        col.bad(join(path, "edgeTypes"), [], "must declare at least one edge type")
    return node_types, None if edges is None else tuple(e for _, e in edges)


def _supervision(col: Collector, top: Mapping[str, Any],
                 edge_types: tuple[EdgeType, ...] | None) -> tuple[EdgeType, ...] | None:
    tm = F.take_section(col, top, "", "taskMetadata", (NAB_KEY,))
    path = join("taskMetadata", NAB_KEY)
    nab = None if tm is None else F.take_section(col, tm, "taskMetadata", NAB_KEY, ("supervisionEdgeTypes",))
    if nab is None:
        return None
    items = read_edge_types(col, nab, path, "supervisionEdgeTypes", None, required=False)
    if items is None:
        return None
    declared = None if edge_types is None else [str(e) for e in edge_types]
    for item_path, et in items:
        F.check_member(col, item_path, str(et), declared, "edge type (graphMetadata.edgeTypes)")
    return tuple(e for _, e in items)


def _default_inference_node_types(node_types: Sequence[str],
                                  supervision: Sequence[EdgeType]) -> tuple[str, ...]:
    """Node types touched by a supervision edge type, in declaration order; all when none."""
    used = {t for et in supervision for t in (et.src_node_type, et.dst_node_type)}
    return tuple(t for t in node_types if t in used) if used else tuple(node_types)


def _default_command_args(col: Collector, path: str, command: str | None, args: Mapping[str, Any],
                          module: str, args_cls: type) -> None:
    """Check ``args`` (at ``path``) by ``args_cls``'s rules when ``command`` runs ``module``."""
    if command is None or not runs_module(command, module):
        return
    known = known_keys(args_cls)
    for p in arg_problems(args_cls, args)[1]:
        if p.unknown:
            hint = F.did_you_mean(p.key, known) or f" (known: {', '.join(known)})"
            col.add(join(path, clip(p.key)), p.value,
                    f"unknown key {show(p.value)} of the default {module} arguments{hint}")
        else:
            col.bad(join(path, p.key), p.value, p.why)


def _trainer(col: Collector, top: Mapping[str, Any]) -> TrainerConfig | None:
    path = "trainerConfig"
    tc = F.take_section(col, top, "", path, ("command", "trainerArgs", "graphStoreStorageConfig"),
                        required=True)
    if tc is None:
        return None
    command = F.take(col, tc, path, "command", F.as_str)
    args = F.free_mapping(col, join(path, "trainerArgs"), tc.get("trainerArgs"))
    if args is not None:  # raw values: lists read as lists in messages
        _default_command_args(col, join(path, "trainerArgs"), command, tc.get("trainerArgs") or {},
                              DEFAULT_TRAINER_MODULE, TrainerArgs)
    storage = read_storage(col, tc, path, derived_sessions=1,
                           derivation="the trainer connects one compute process group")
    return TrainerConfig(command=command, trainer_args=args, storage=storage)


def _inferencer(col: Collector, top: Mapping[str, Any], node_types: tuple[str, ...] | None,
                supervision: tuple[EdgeType, ...] | None) -> InferencerConfig | None:
    path = "inferencerConfig"
    keys = ("command", "inferencerArgs", "inferenceBatchSize", "nodeTypes", "graphStoreStorageConfig")
    ic = F.take_section(col, top, "", path, keys, required=True)
    if ic is None:
        return None
    command = F.take(col, ic, path, "command", F.as_str)
    args = F.free_mapping(col, join(path, "inferencerArgs"), ic.get("inferencerArgs"))
    if args is not None:
        _default_command_args(col, join(path, "inferencerArgs"), command, ic.get("inferencerArgs") or {},
                              DEFAULT_INFERENCER_MODULE, InferencerArgs)
    batch = F.take(col, ic, path, "inferenceBatchSize", F.as_int(1), 512)
    default = None
    if node_types is not None and supervision is not None:
        default = _default_inference_node_types(node_types, supervision)
    infer_types = F.take_tuple(col, ic, path, "nodeTypes", F.as_name, default)
    if ic.get("nodeTypes") is not None and infer_types is not None:
        if not infer_types:
            col.bad(join(path, "nodeTypes"), [], "must list at least one node type (or be left out)")
        for i, t in enumerate(infer_types):
            F.check_member(col, f"{path}.nodeTypes[{i}]", t, node_types, "node type")
    sessions = len(infer_types) if infer_types else None
    storage = read_storage(col, ic, path, derived_sessions=sessions,
                           derivation="one server session per inferred node type")
    return InferencerConfig(command=command, inferencer_args=args, inference_batch_size=batch,
                            node_types=infer_types, storage=storage)


def _export(col: Collector, top: Mapping[str, Any], base_dir: str) -> ExportConfig | None:
    path = "exportConfig"
    keys = ("warehouse", "localWarehouseUri", "bigqueryProject", "bigqueryDataset", "tablePrefix",
            "modelVersion")
    ec = F.take_section(col, top, "", path, keys)
    if ec is None:
        return None
    warehouse = F.take(col, ec, path, "warehouse", F.as_literal("local", "bigquery"), "local")
    local_uri = F.take(col, ec, path, "localWarehouseUri", F.optional(F.as_str), None)
    project = F.take(col, ec, path, "bigqueryProject", F.optional(F.as_gcp_project), None)
    dataset = F.take(col, ec, path, "bigqueryDataset", F.optional(F.as_sql_name), None)
    if warehouse == "bigquery" and ec.get("bigqueryDataset") is None:
        col.add(join(path, "bigqueryDataset"), None,
                "missing: required when warehouse is 'bigquery'", missing=True)
    return ExportConfig(
        warehouse=warehouse,
        local_warehouse_uri=None if local_uri is None else resolve_uri(local_uri, base_dir),
        bigquery_project=project, bigquery_dataset=dataset,
        table_prefix=F.take(col, ec, path, "tablePrefix", F.as_sql_name, "embeddings_"),
        model_version=F.take(col, ec, path, "modelVersion", F.as_version, "v1"))


RUNTIME_KEYS = {  # YAML key -> (field, default)
    "clusterInitTimeoutS": "cluster_init_timeout_s", "readinessTimeoutS": "readiness_timeout_s",
    "rpcTimeoutS": "rpc_timeout_s", "sessionTimeoutS": "session_timeout_s",
    "heartbeatIntervalS": "heartbeat_interval_s", "heartbeatTimeoutS": "heartbeat_timeout_s",
    "shutdownTimeoutS": "shutdown_timeout_s",
}


def _runtime(col: Collector, top: Mapping[str, Any]) -> RuntimeConfig | None:
    path = "graphStoreRuntimeConfig"
    rc = F.take_section(col, top, "", path, (*RUNTIME_KEYS, "randomSeed"))
    if rc is None:
        return RuntimeConfig()
    defaults = RuntimeConfig()
    values: dict[str, Any] = {}
    for key, name in RUNTIME_KEYS.items():
        value = F.take(col, rc, path, key, F.as_float, getattr(defaults, name))
        if isinstance(value, float) and value <= 0:
            col.bad(join(path, key), value, "must be > 0 seconds")
        values[name] = value
    values["random_seed"] = F.take(col, rc, path, "randomSeed", F.as_int(0), defaults.random_seed)
    if (isinstance(values["heartbeat_timeout_s"], float) and isinstance(values["heartbeat_interval_s"], float)
            and values["heartbeat_timeout_s"] <= values["heartbeat_interval_s"]):
        col.bad(join(path, "heartbeatTimeoutS"), values["heartbeat_timeout_s"],
                "must be greater than heartbeatIntervalS "
                f"({values['heartbeat_interval_s']}), or every peer looks dead")
    return RuntimeConfig(**{k: float(v) if k != "random_seed" else v for k, v in values.items()})


def _same_direction(col: Collector, trainer: TrainerConfig | None,
                    inferencer: InferencerConfig | None) -> None:
    if trainer is None or inferencer is None or trainer.storage is None or inferencer.storage is None:
        return
    t_dir = trainer.storage.storage_args.sample_edge_direction
    i_dir = inferencer.storage.storage_args.sample_edge_direction
    if t_dir is not None and i_dir is not None and t_dir != i_dir:
        col.bad("inferencerConfig.graphStoreStorageConfig.storageArgs.sample_edge_direction", i_dir,
                f"differs from trainerConfig's sample_edge_direction {t_dir!r}; the model is trained "
                "and applied on the same edge direction, so they must be equal")


def _node_types_used(col: Collector, node_types: Sequence[str] | None,
                     edge_types: Sequence[EdgeType] | None, dataset: Any) -> None:
    """Every declared node type has a node table or is an end of a declared edge type."""
    if node_types is None or edge_types is None or dataset is None or None in dataset.node_sources:
        return  # a malformed node source is reported already
    used = {t for et in edge_types for t in (et.src_node_type, et.dst_node_type)}
    used |= {n.node_type for n in dataset.node_sources if n is not None}
    for i, t in enumerate(node_types):
        if t not in used:
            col.bad(f"graphMetadata.nodeTypes[{i}]", t,
                    "has no node table (datasetConfig.dataSources.nodes) and is an end of no edge "
                    "type (graphMetadata.edgeTypes); give it a node table or remove it")


def build_task(col: Collector, raw: Any, source_path: str) -> TaskConfig | None:
    """Type and check one raw task config; ``None`` when ``col`` received any problem."""
    top = F.section(col, "", raw, TASK_KEYS)
    if top is None:
        return None
    base_dir = os.path.dirname(os.path.abspath(source_path))
    node_types, edge_types = _graph_metadata(col, top)
    supervision = _supervision(col, top, edge_types)
    dataset = read_dataset(col, top, base_dir, node_types, edge_types)
    _node_types_used(col, node_types, edge_types, dataset)
    trainer = _trainer(col, top)
    inferencer = _inferencer(col, top, node_types, supervision)
    _same_direction(col, trainer, inferencer)
    export = _export(col, top, base_dir)
    runtime = _runtime(col, top)
    if col.problems:
        return None
    return TaskConfig(graph_metadata=GraphMetadata(node_types=node_types, edge_types=edge_types),
                      supervision_edge_types=supervision, dataset=dataset, trainer=trainer,
                      inferencer=inferencer, export=export, runtime=runtime, source_path=os.path.abspath(source_path))

