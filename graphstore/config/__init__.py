"""Typed task and resource configs (see docs/configs.md for every key).

    task, res = load_config_pair("configs/task_hetero.yaml", "configs/resource_local.yaml",
                                 overrides=("trainerConfig.trainerArgs.lr=0.1",))

The schema is declared once, as frozen pydantic models (:mod:`graphstore.config.schema`,
:mod:`graphstore.config.resource_schema`); the loader, ``to_dict()``, the JSON Schema and
docs/configs.md all come from it (:mod:`graphstore.config.docs`). Importing this package never
imports torch, PyG or graphlearn-for-pytorch.
"""

from graphstore.config._dataset import (
    DatasetConfig, EdgeSource, NodeSource, PartitionConfig, partition_engine,
)
from graphstore.config._graph import EdgeType, GraphMetadata
from graphstore.config._storage import GraphStoreStorageConfig, StorageArgs
from graphstore.config.errors import ConfigError, Problem
from graphstore.config.loader import load_config_pair, load_resource_config, load_task_config
from graphstore.config.resource_schema import (
    LocalGraphStoreConfig, PoolConfig, ResourceConfig, SharedResourceConfig, StageResources,
    VertexGraphStoreConfig,
)
from graphstore.config.schema import ExportConfig, InferencerConfig, RuntimeConfig, TaskConfig, TrainerConfig

__all__ = [
    "ConfigError", "DatasetConfig", "EdgeSource", "EdgeType", "ExportConfig", "GraphMetadata",
    "GraphStoreStorageConfig", "InferencerConfig", "LocalGraphStoreConfig", "NodeSource",
    "PartitionConfig", "PoolConfig", "Problem", "ResourceConfig", "RuntimeConfig", "SharedResourceConfig",
    "StageResources", "StorageArgs", "TaskConfig", "TrainerConfig", "VertexGraphStoreConfig",
    "load_config_pair", "load_resource_config", "load_task_config", "partition_engine",
]
