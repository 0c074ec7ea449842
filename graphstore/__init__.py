"""graphstore: graph-store GNN training on graphlearn-for-pytorch (GLT) and PyG.

User code imports the public API from the package root, e.g.
``from graphstore import RemoteDistDataset, DistABLPLoader``. Names are resolved lazily
(PEP 562) so that light modules, such as the config loader used by ``pipeline/``, never pull in
torch, PyG or GLT.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (filled in as the runtime lands)
_LAZY: dict[str, str] = {
    "load_task_config": "graphstore.config",
    "load_resource_config": "graphstore.config",
    "load_config_pair": "graphstore.config",
    "ShardSet": "graphstore.formats.shards.reader",
    "partition_graph": "graphstore.partition",
    "GraphStoreInfo": "graphstore.modes.graph_store.info",
    "get_graph_store_info": "graphstore.modes.graph_store.info",
    "init_compute_process": "graphstore.modes.graph_store.compute",
    "shutdown_compute_process": "graphstore.modes.graph_store.compute",
    "RemoteDistDataset": "graphstore.modes.graph_store.remote_dataset",
    "DistNeighborLoader": "graphstore.dataset.loaders",
    "DistABLPLoader": "graphstore.dataset.loaders",
    "ABLPInputNodes": "graphstore.dataset.ablp",
    "DistNodeAnchorLinkSplitter": "graphstore.dataset.splitter",
    "DistEdgeLinkSplitter": "graphstore.dataset.splitter",
    "DistDataset": "graphstore.modes.colocated.dataset",
    "DatasetMetadata": "graphstore.dataset.metadata",
    "FeatureInfo": "graphstore.dataset.metadata",
    "GraphDataset": "graphstore.dataset.graph_dataset",
    "StageContext": "graphstore.config.stage",
    "RunPaths": "graphstore.formats.run_paths",
    "finish_epoch": "graphstore.training.batches",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
