"""Typed, frozen config tree for the resource config (where to compute).

Spelling follows the seed (snake_case keys). Each stage (trainer, inferencer) runs either on Vertex AI
(a graph-store pool and a compute pool) or locally (processes on this machine); :class:`StageResources`
flattens both into the counts the launcher needs. Built by :mod:`graphstore.config.loader`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping

GPU_UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolConfig:
    """One Vertex AI worker pool."""

    machine_type: str
    gpu_type: str = GPU_UNSPECIFIED
    gpu_limit: int = 0
    num_replicas: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"machine_type": self.machine_type, "gpu_type": self.gpu_type,
                "gpu_limit": self.gpu_limit, "num_replicas": self.num_replicas}


@dataclass(frozen=True, kw_only=True, slots=True)
class VertexGraphStoreConfig:
    """A graph-store job on Vertex AI: storage machines and compute machines."""

    graph_store_pool: PoolConfig
    compute_pool: PoolConfig
    compute_cluster_local_world_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"graph_store_pool": self.graph_store_pool.to_dict(),
                "compute_pool": self.compute_pool.to_dict(),
                "compute_cluster_local_world_size": self.compute_cluster_local_world_size}


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalGraphStoreConfig:
    """A graph-store job as processes on this machine."""

    num_storage_processes: int = 2
    num_compute_machines: int = 1
    compute_cluster_local_world_size: int = 2

    def to_dict(self) -> dict[str, Any]:
        return {"num_storage_processes": self.num_storage_processes,
                "num_compute_machines": self.num_compute_machines,
                "compute_cluster_local_world_size": self.compute_cluster_local_world_size}


@dataclass(frozen=True, kw_only=True, slots=True)
class StageResources:
    """Resources of one stage; exactly one of ``vertex`` / ``local`` is set, matching ``kind``."""

    kind: Literal["local", "vertex"]
    num_storage: int
    num_compute_machines: int
    procs_per_compute: int
    vertex: VertexGraphStoreConfig | None = None
    local: LocalGraphStoreConfig | None = None

    @classmethod
    def from_vertex(cls, vertex: VertexGraphStoreConfig) -> StageResources:
        """Derive counts; procs per compute = local world size, else the GPU count, else 1."""
        gpus = vertex.compute_pool.gpu_limit
        procs = vertex.compute_cluster_local_world_size or (gpus if gpus > 0 else 1)
        return cls(kind="vertex", num_storage=vertex.graph_store_pool.num_replicas,
                   num_compute_machines=vertex.compute_pool.num_replicas, procs_per_compute=procs,
                   vertex=vertex)

    @classmethod
    def from_local(cls, local: LocalGraphStoreConfig) -> StageResources:
        return cls(kind="local", num_storage=local.num_storage_processes,
                   num_compute_machines=local.num_compute_machines,
                   procs_per_compute=local.compute_cluster_local_world_size, local=local)

    @property
    def colocated(self) -> bool:
        """No storage processes: each compute machine holds one partition itself."""
        return self.num_storage == 0

    @property
    def num_partitions(self) -> int:
        """One partition per storage process, or per compute machine when colocated."""
        return self.num_compute_machines if self.colocated else self.num_storage

    def describe(self) -> str:
        """E.g. ``local 2 storage x 1x2 compute``."""
        return (f"{self.kind} {self.num_storage} storage x "
                f"{self.num_compute_machines}x{self.procs_per_compute} compute")


def _empty_labels() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, kw_only=True, slots=True)
class SharedResourceConfig:
    """``shared_resource_config``: labels and the GCP settings common to every stage."""

    resource_labels: Mapping[str, str] = field(default_factory=_empty_labels)
    project: str | None = None
    region: str | None = None
    gcp_service_account_email: str | None = None
    temp_assets_bucket: str | None = None
    perm_assets_bucket: str | None = None
    embedding_bq_dataset_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"resource_labels": dict(self.resource_labels),
                "common_compute_config": {
                    "project": self.project, "region": self.region,
                    "gcp_service_account_email": self.gcp_service_account_email,
                    "temp_assets_bucket": self.temp_assets_bucket,
                    "perm_assets_bucket": self.perm_assets_bucket,
                    "embedding_bq_dataset_name": self.embedding_bq_dataset_name}}


STAGE_KEYS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "trainer": ("trainer_resource_config", "vertex_ai_graph_store_trainer_config"),
    "inferencer": ("inferencer_resource_config", "vertex_ai_graph_store_inferencer_config"),
})
"""stage -> (top-level key, Vertex sub-key); the local sub-key is ``local_graph_store_config``."""


def _stage_dict(stage: str, res: StageResources) -> dict[str, Any]:
    if res.vertex is not None:
        return {STAGE_KEYS[stage][1]: res.vertex.to_dict()}
    if res.local is None:
        raise ValueError(f"StageResources for {stage} has neither vertex nor local set")
    return {"local_graph_store_config": res.local.to_dict()}


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourceConfig:
    """The whole resource config. ``source_path`` is informational and excluded from equality."""

    shared: SharedResourceConfig = field(default_factory=SharedResourceConfig)
    trainer: StageResources
    inferencer: StageResources
    source_path: str = field(default="", compare=False)

    @property
    def num_partitions(self) -> int:
        """One graph partition per storage process (trainer and inferencer counts are equal), or
        per compute machine in colocated mode (``num_storage_processes: 0``)."""
        return self.trainer.num_partitions

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (snake_case keys, as the seed); loading it back gives an equal config."""
        return {"shared_resource_config": self.shared.to_dict(),
                STAGE_KEYS["trainer"][0]: _stage_dict("trainer", self.trainer),
                STAGE_KEYS["inferencer"][0]: _stage_dict("inferencer", self.inferencer)}
