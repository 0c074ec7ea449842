"""Replicated-topology mode (seed 004): the whole graph as one memory-mapped file on every worker.

Import cost is nothing until a name is used (resolved lazily): torch and Ray
load only with the names that need them. Modules: ``format`` (the graph and features file
format), ``writer`` (written from a shard set), ``graph_file`` (opened without copying),
``sampler`` (neighbour sampling over the mapped CSR), ``kernels`` (its compiled per-hop
kernels, numba), ``arrow_batch`` (a sampled subgraph as
an Arrow row, and ``collate_to_pyg``), ``datasource`` (the Ray Data source and
``create_sampling_dataset``).
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "write_graph_file": "writer", "write_features_file": "writer",
    "GraphFile": "graph_file", "FeatureFile": "graph_file", "GraphFileError": "graph_file",
    "CsrSampler": "sampler", "SampledSubgraph": "sampler",
    "collate_to_pyg": "arrow_batch",
    "GraphSamplingDatasource": "datasource", "create_sampling_dataset": "datasource",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
