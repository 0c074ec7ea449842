"""Raw resource-config YAML -> :class:`~graphstore.config.resource_schema.ResourceConfig` (internal).

Each stage names exactly one of its Vertex AI graph-store config or ``local_graph_store_config``;
both stages must be of the same kind and have the same storage count (one storage process serves one
graph partition, and the inferencer reads the partitions the trainer's storage served).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from graphstore.config import _fields as F
from graphstore.config._fields import Collector, join
from graphstore.config.errors import show
from graphstore.config.resource_schema import (
    GPU_UNSPECIFIED, STAGE_KEYS, LocalGraphStoreConfig, PoolConfig, ResourceConfig,
    SharedResourceConfig, StageResources, VertexGraphStoreConfig,
)
from graphstore.config.schema import freeze_value

RESOURCE_KEYS = ("shared_resource_config", "trainer_resource_config", "inferencer_resource_config")
LOCAL_KEY = "local_graph_store_config"
COMMON_KEYS = ("project", "region", "gcp_service_account_email", "temp_assets_bucket",
               "perm_assets_bucket", "embedding_bq_dataset_name")
POOL_KEYS = ("machine_type", "gpu_type", "gpu_limit", "num_replicas")
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")


def _labels(col: Collector, shared: Mapping[str, Any], path: str) -> Mapping[str, str] | None:
    raw = shared.get("resource_labels")
    p = join(path, "resource_labels")
    if raw is None:
        return freeze_value({})
    if not isinstance(raw, Mapping):
        col.bad(p, raw, "must be a mapping of label -> value")
        return None
    ok = True
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            col.bad(join(p, key), key, f"is not a valid label key (must match {_LABEL_KEY_RE.pattern})")
            ok = False
        if not isinstance(value, str) or not _LABEL_VALUE_RE.match(value):
            col.bad(join(p, key), value,
                    f"is not a valid label value (a string matching {_LABEL_VALUE_RE.pattern})")
            ok = False
    return freeze_value(raw) if ok else None


def _shared(col: Collector, top: Mapping[str, Any]) -> SharedResourceConfig | None:
    path = "shared_resource_config"
    shared = F.take_section(col, top, "", path, ("resource_labels", "common_compute_config"))
    if shared is None:
        return None
    labels = _labels(col, shared, path)
    cpath = join(path, "common_compute_config")
    cc = F.take_section(col, shared, path, "common_compute_config", COMMON_KEYS)
    if cc is None:
        return None
    opt_str = F.optional(F.as_str)
    return SharedResourceConfig(
        resource_labels=labels,
        project=F.take(col, cc, cpath, "project", F.optional(F.as_gcp_project), None),
        region=F.take(col, cc, cpath, "region", opt_str, None),
        gcp_service_account_email=F.take(col, cc, cpath, "gcp_service_account_email",
                                         F.optional(F.as_match(_EMAIL_RE, "email address")), None),
        temp_assets_bucket=F.take(col, cc, cpath, "temp_assets_bucket", opt_str, None),
        perm_assets_bucket=F.take(col, cc, cpath, "perm_assets_bucket", opt_str, None),
        embedding_bq_dataset_name=F.take(col, cc, cpath, "embedding_bq_dataset_name",
                                         F.optional(F.as_sql_name), None))


def _pool(col: Collector, m: Mapping[str, Any], path: str, key: str) -> PoolConfig | None:
    p = join(path, key)
    pool = F.take_section(col, m, path, key, POOL_KEYS, required=True)
    if pool is None:
        return None
    gpu_type = F.take(col, pool, p, "gpu_type", F.as_str, GPU_UNSPECIFIED)
    gpu_limit = F.take(col, pool, p, "gpu_limit", F.as_int(0), 0)
    if gpu_limit and gpu_type == GPU_UNSPECIFIED:
        col.bad(join(p, "gpu_type"), gpu_type, f"must name the GPU type when gpu_limit is {gpu_limit}")
    if gpu_limit == 0 and gpu_type not in (None, GPU_UNSPECIFIED):
        col.bad(join(p, "gpu_limit"), gpu_limit,
                f"must be >= 1 when gpu_type is {show(gpu_type)} (or set gpu_type: {GPU_UNSPECIFIED})")
    return PoolConfig(machine_type=F.take(col, pool, p, "machine_type", F.as_str),
                      gpu_type=gpu_type, gpu_limit=gpu_limit,
                      num_replicas=F.take(col, pool, p, "num_replicas", F.as_int(1), 1))


def _vertex(col: Collector, m: Mapping[str, Any], path: str) -> StageResources | None:
    before = len(col.problems)
    vertex = VertexGraphStoreConfig(
        graph_store_pool=_pool(col, m, path, "graph_store_pool"),
        compute_pool=_pool(col, m, path, "compute_pool"),
        compute_cluster_local_world_size=F.take(col, m, path, "compute_cluster_local_world_size",
                                                F.optional(F.as_int(1)), None))
    if len(col.problems) > before:
        return None
    return StageResources.from_vertex(vertex)


def _local(col: Collector, m: Mapping[str, Any], path: str) -> StageResources:
    return StageResources.from_local(LocalGraphStoreConfig(
        num_storage_processes=F.take(col, m, path, "num_storage_processes", F.as_int(0), 2),
        num_compute_machines=F.take(col, m, path, "num_compute_machines", F.as_int(1), 1),
        compute_cluster_local_world_size=F.take(col, m, path, "compute_cluster_local_world_size",
                                                F.as_int(1), 2)))


def _stage(col: Collector, top: Mapping[str, Any], stage: str) -> tuple[StageResources | None, str]:
    """Read one stage; also return the dotted path of its storage count (for messages)."""
    top_key, vertex_key = STAGE_KEYS[stage]
    sc = F.take_section(col, top, "", top_key, (vertex_key, LOCAL_KEY), required=True)
    given = [k for k in (vertex_key, LOCAL_KEY) if sc is not None and sc.get(k) is not None]
    if sc is not None and len(given) != 1:
        col.add(top_key, None if not given else given,
                f"{'both' if given else 'neither'} of {vertex_key!r} and {LOCAL_KEY!r} "
                "set; set exactly one", missing=not given)
    if sc is None or len(given) != 1:
        return None, top_key
    path = join(top_key, given[0])
    if given[0] == LOCAL_KEY:
        m = F.section(col, path, sc[LOCAL_KEY], ("num_storage_processes", "num_compute_machines",
                                                  "compute_cluster_local_world_size"))
        return (None if m is None else _local(col, m, path)), join(path, "num_storage_processes")
    m = F.section(col, path, sc[vertex_key], ("graph_store_pool", "compute_pool",
                                              "compute_cluster_local_world_size"))
    return (None if m is None else _vertex(col, m, path)), join(path, "graph_store_pool.num_replicas")


def build_resource(col: Collector, raw: Any, source_path: str) -> ResourceConfig | None:
    """Type and check one raw resource config; ``None`` when ``col`` received any problem."""
    top = F.section(col, "", raw, RESOURCE_KEYS)
    if top is None:
        return None
    shared = _shared(col, top)
    trainer, t_count_path = _stage(col, top, "trainer")
    inferencer, i_count_path = _stage(col, top, "inferencer")
    if trainer is not None and inferencer is not None:
        if trainer.kind != inferencer.kind:
            col.bad(STAGE_KEYS["inferencer"][0], inferencer.kind,
                    f"differs from the trainer's kind {trainer.kind!r}; run both stages the same way")
        elif trainer.num_storage != inferencer.num_storage:
            col.bad(i_count_path, inferencer.num_storage,
                    f"differs from {t_count_path} = {trainer.num_storage}; both stages serve the same "
                    "graph partitions, so their storage counts must be equal")
    if col.problems:
        return None
    return ResourceConfig(shared=shared, trainer=trainer, inferencer=inferencer,
                          source_path=source_path)
