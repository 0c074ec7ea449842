"""The resource config (where to compute), declared once, like :mod:`graphstore.config.schema`.

Spelling follows the seed (snake_case keys). Each stage (trainer, inferencer) runs either on Vertex AI
(a graph-store pool and a compute pool) or locally (processes on this machine); :class:`StageResources`
derives from either the counts the launcher needs. Both stages must be of the same kind and have the
same storage count (one storage process serves one graph partition, and the inferencer reads the
partitions the trainer's storage served).
"""

from __future__ import annotations

import logging

import re
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, Mapping

from pydantic import (
    Field, PlainSerializer, PlainValidator, SerializerFunctionWrapHandler, ValidationInfo, WithJsonSchema,
    field_validator, model_serializer, model_validator,
)

from graphstore.config._fields import (
    Bad, Choice, Email, FileModel, Float, GcpProject, Int, Issues, Label, Model, Pattern, SqlName, Str,
    as_str, freeze_value, thaw_value, typed,
)
from graphstore.config._problems import loc_path
from graphstore.runtime.errors import show
from graphstore.config.machine_types import MACHINE_TYPES, unknown_reason

GPU_UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"
LOCAL_KEY = "local_graph_store_config"
_LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
VPC_NETWORK_RE = re.compile(r"^projects/[0-9]+/global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
VpcNetwork = Pattern(VPC_NETWORK_RE, "VPC network (projects/<project number>/global/networks/<name>)",
                     "VPC network")


def as_labels(raw: Any) -> Mapping[str, str]:
    """GCP labels: keys and values checked by GCP's rules."""
    if not isinstance(raw, Mapping):
        raise Bad("must be a mapping of label -> value")
    issues = Issues()
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
            issues.bad((str(key),), key, f"is not a valid label key (must match {_LABEL_KEY_RE.pattern})")
        if not isinstance(value, str) or not _LABEL_VALUE_RE.match(value):
            issues.bad((str(key),), value,
                       f"is not a valid label value (a string matching {_LABEL_VALUE_RE.pattern})")
    issues.raise_any()
    return freeze_value(raw)


Labels = Annotated[Mapping[str, str], PlainValidator(as_labels), PlainSerializer(thaw_value),
                   WithJsonSchema({"type": "object", "propertyNames": {"pattern": _LABEL_KEY_RE.pattern},
                                   "additionalProperties": {"type": "string",
                                                            "pattern": _LABEL_VALUE_RE.pattern}}),
                   Label("map str -> str")]


BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
MIN_BOOT_DISK_GB, MAX_BOOT_DISK_GB = 100, 64000
"""Vertex AI's bounds for a worker's boot disk (its default is 100 GB, `pd-ssd`)."""


def as_machine_type(v: Any) -> str:
    """A machine type of :mod:`graphstore.config.machine_types` (a did-you-mean otherwise)."""
    v = as_str(v)
    if v not in MACHINE_TYPES:
        raise Bad(unknown_reason(v))
    return v


MachineTypeName = typed(str, as_machine_type, {"enum": list(MACHINE_TYPES)},
                        "machine type ([list](#machine-types))")


class PoolConfig(Model):
    """One Vertex AI worker pool."""

    doc_name: ClassVar[str] = "pool"

    machine_type: MachineTypeName = Field(description=(
        "e.g. `n2-highmem-32`; one of the [machine types](#machine-types) (their memory is what "
        "`python -m pipeline plan` checks a storage partition against)."))
    gpu_type: Str = Field(GPU_UNSPECIFIED,
                          description="e.g. `NVIDIA_TESLA_T4`; must be set when `gpu_limit` > 0.")
    gpu_limit: Int(0) = Field(0, description="GPUs per machine; must be > 0 when `gpu_type` names a GPU.")
    num_replicas: Int(1) = Field(1, description="Machines in the pool.")
    boot_disk_type: Choice(*BOOT_DISK_TYPES) = Field("pd-ssd", description=(
        "Boot disk of each machine (Vertex AI's `diskSpec.bootDiskType`)."))
    boot_disk_size_gb: Int(MIN_BOOT_DISK_GB, MAX_BOOT_DISK_GB, " (GB)") = Field(100, description=(
        "Boot disk size of each machine, in GB (Vertex AI's `diskSpec.bootDiskSizeGb`, 100 to "
        "64000). A storage machine downloads its partition onto it: `python -m pipeline plan` "
        "says how much it needs."))

    @model_validator(mode="after")
    def _gpus(self) -> PoolConfig:
        issues = Issues()
        if self.gpu_limit and self.gpu_type == GPU_UNSPECIFIED:
            issues.bad(("gpu_type",), self.gpu_type,
                       f"must name the GPU type when gpu_limit is {self.gpu_limit}")
        if self.gpu_limit == 0 and self.gpu_type != GPU_UNSPECIFIED:
            issues.bad(("gpu_limit",), self.gpu_limit, f"must be >= 1 when gpu_type is "
                       f"{show(self.gpu_type)} (or set gpu_type: {GPU_UNSPECIFIED})")
        issues.raise_any()
        return self


DatasetMode = Literal["graph_store", "colocated", "replicated"]
DATASET_MODES: tuple[str, ...] = ("graph_store", "colocated", "replicated")
VERTEX_MODES: tuple[str, ...] = ("graph_store", "replicated")
"""Colocated runs on this machine only: a Vertex AI job has a storage pool or the graph file."""
MODE_DESCRIPTION = (
    "Where the graph lives while the stage runs. `graph_store`: storage machines hold the "
    "partitions and serve sampling over RPC. `colocated` (this machine only): no storage "
    "processes; each compute machine holds one partition and samples it in-process (partitions = "
    "`num_compute_machines`; written `num_storage_processes: 0` before, which still loads, with a "
    "note). `replicated`: every compute machine holds the whole graph as one "
    "memory-mapped file on its local disk (written after partitioning, `<run>/graph/graph.bin`) and "
    "samples locally (in each worker, or in Ray Data read tasks: `trainerArgs.sampling_workers`); the "
    "compute machines form one Ray cluster and train with Ray "
    "Train's `TorchTrainer` (DDP); only gradients cross the network. Pick `replicated` when the graph "
    "file fits a compute machine's disk (`python -m pipeline plan` says). Both stages use the same mode.")


def _mode_field() -> Any:
    return Field("graph_store", description=MODE_DESCRIPTION)


_log = logging.getLogger(__name__)


class VertexGraphStoreConfig(Model):
    """A graph-store job on Vertex AI: storage machines and compute machines (or, replicated, compute
    machines only)."""

    mode: Choice(*VERTEX_MODES) = _mode_field()
    graph_store_pool: PoolConfig | None = Field(None, description=(
        "Storage machines (memory-heavy); `num_replicas` is the storage count. Required in "
        "`graph_store` mode; not set in `replicated` mode (no storage machines)."))
    compute_pool: PoolConfig = Field(description=(
        "Compute machines (usually GPUs); `num_replicas` is the compute machine count."))
    compute_cluster_local_world_size: Int(1) | None = Field(None, description=(
        "Compute processes per compute machine. Null: `compute_pool.gpu_limit` if > 0, else 1."))

    @model_validator(mode="after")
    def _storage_pool_by_mode(self) -> VertexGraphStoreConfig:
        issues = Issues()
        if self.mode == "graph_store" and self.graph_store_pool is None:
            issues.add(("graph_store_pool",), None, "missing: mode 'graph_store' needs the storage "
                       "machines' pool (or set mode: replicated)", missing=True)
        if self.mode == "replicated" and self.graph_store_pool is not None:
            issues.bad(("graph_store_pool",), "set", "must not be set in mode 'replicated' (no storage "
                       "machines: every compute machine holds the graph file); remove it")
        issues.raise_any()
        return self


class LocalGraphStoreConfig(Model):
    """A graph-store job as processes on this machine."""

    doc_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({
        "num_storage_processes": "2 (`graph_store`), 0 (`colocated`, `replicated`)"})

    mode: Choice(*DATASET_MODES) = _mode_field()
    num_storage_processes: Int(0) | None = Field(None, description=(
        "Storage processes = partitions, in `graph_store` mode (null: 2). `colocated` and "
        "`replicated` modes have none (only 0 may be given). `0` in `graph_store` mode is the old "
        "way of writing `mode: colocated`: it still runs colocated, with a note."))
    num_compute_machines: Int(1) = Field(1, description=(
        "Simulated compute machines (one parent process each; in `replicated` mode, one Ray node each: "
        "1 runs an embedded `ray.init()`, more form a Ray cluster on 127.0.0.1)."))
    compute_cluster_local_world_size: Int(1) = Field(2, description="Compute processes per compute machine.")

    @property
    def storage_processes(self) -> int:
        """``num_storage_processes``, or its default for the mode."""
        if self.num_storage_processes is not None:
            return self.num_storage_processes
        return 2 if self.mode == "graph_store" else 0

    @property
    def effective_mode(self) -> DatasetMode:
        """``mode``, with the old form of colocated (``graph_store`` and no storage processes)
        read as ``colocated``."""
        return "colocated" if self.mode == "graph_store" and self.storage_processes == 0 else self.mode

    @model_validator(mode="after")
    def _storage_by_mode(self) -> LocalGraphStoreConfig:
        if self.mode != "graph_store" and self.num_storage_processes:
            issues = Issues()
            why = ("every compute machine holds one partition" if self.mode == "colocated"
                   else "every compute machine holds the graph file")
            issues.bad(("num_storage_processes",), self.num_storage_processes,
                       f"must be 0 (or unset) in mode {self.mode!r}: no storage processes, {why}")
            issues.raise_any()
        if self.mode == "graph_store" and self.num_storage_processes == 0:
            _log.warning("note: num_storage_processes: 0 under mode graph_store runs colocated; "
                         "write mode: colocated instead (and drop num_storage_processes)")
        return self


class StageResources(Model):
    """Resources of one stage: exactly one of ``vertex`` / ``local`` is set; the counts derive from it."""

    vertex: VertexGraphStoreConfig | None = None
    local: LocalGraphStoreConfig | None = Field(None, alias=LOCAL_KEY, description=(
        "Processes on this machine."))

    @property
    def kind(self) -> Literal["local", "vertex"]:
        return "vertex" if self.vertex is not None else "local"

    @property
    def mode(self) -> DatasetMode:
        """``graph_store``, ``colocated`` or ``replicated``: the ``mode`` key of the one that is
        set (the old form of colocated, ``num_storage_processes: 0``, reads as ``colocated``)."""
        return self.vertex.mode if self.vertex is not None else self.local.effective_mode

    @property
    def replicated(self) -> bool:
        """Replicated-topology mode: every compute machine holds the whole graph file."""
        return self.mode == "replicated"

    @property
    def num_storage(self) -> int:
        if self.replicated:
            return 0
        return self.vertex.graph_store_pool.num_replicas if self.vertex else self.local.storage_processes

    @property
    def num_compute_machines(self) -> int:
        return self.vertex.compute_pool.num_replicas if self.vertex else self.local.num_compute_machines

    @property
    def procs_per_compute(self) -> int:
        """Vertex: the local world size, else the GPU count, else 1."""
        if self.vertex is None:
            return self.local.compute_cluster_local_world_size
        gpus = self.vertex.compute_pool.gpu_limit
        return self.vertex.compute_cluster_local_world_size or (gpus if gpus > 0 else 1)

    @property
    def gpus_per_compute_machine(self) -> int:
        """GPUs of each compute machine: Vertex ``compute_pool.gpu_limit``; local: 0 (the CPU).
        Above 0, each compute process computes on ``cuda:<local_rank>`` (graphstore.runtime.devices)."""
        return self.vertex.compute_pool.gpu_limit if self.vertex else 0

    @property
    def colocated(self) -> bool:
        """No storage processes: each compute machine holds one partition itself."""
        return self.mode == "colocated"

    @property
    def num_partitions(self) -> int:
        """One partition per storage process, or per compute machine when colocated; replicated
        mode reads the graph file, written from shards of any partition count: 1."""
        if self.replicated:
            return 1
        return self.num_compute_machines if self.colocated else self.num_storage

    @property
    def config_key(self) -> str:
        """The YAML key of the one that is set (``local_graph_store_config`` or the Vertex key)."""
        return LOCAL_KEY if self.vertex is None else type(self).model_fields["vertex"].alias

    @property
    def count_loc(self) -> tuple[str, ...]:
        """Where the storage count is set, below the stage's key."""
        if self.vertex is None:
            return (LOCAL_KEY, "num_storage_processes")
        return (type(self).model_fields["vertex"].alias, "graph_store_pool", "num_replicas")

    def describe(self) -> str:
        """E.g. ``local 2 storage x 1x2 compute``, ``local replicated 2x1 compute``."""
        if self.replicated:
            return f"{self.kind} replicated {self.num_compute_machines}x{self.procs_per_compute} compute"
        return (f"{self.kind} {self.num_storage} storage x "
                f"{self.num_compute_machines}x{self.procs_per_compute} compute")

    @model_serializer(mode="wrap")
    def _only_the_one_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

    @model_validator(mode="after")
    def _exactly_one(self) -> StageResources:
        given = [k for k, v in self.yaml_keys().items() if getattr(self, v) is not None]
        if len(given) != 1:
            vertex_key = type(self).model_fields["vertex"].alias
            issues = Issues()
            issues.add((), given or None, f"{'both' if given else 'neither'} of {vertex_key!r} and "
                       f"{LOCAL_KEY!r} set; set exactly one", missing=not given)
            issues.raise_any()
        return self


class TrainerResources(StageResources):
    """``trainer_resource_config``."""

    vertex: VertexGraphStoreConfig | None = Field(None, alias="vertex_ai_graph_store_trainer_config",
                                                  description="Vertex AI graph-store config.")


class InferencerResources(StageResources):
    """``inferencer_resource_config``."""

    vertex: VertexGraphStoreConfig | None = Field(None, alias="vertex_ai_graph_store_inferencer_config",
                                                  description="Vertex AI graph-store config.")


class CommonComputeConfig(Model):
    """``shared_resource_config.common_compute_config``."""

    doc_inline: ClassVar[bool] = True

    project: GcpProject | None = Field(None, description="GCP project.")
    region: Str | None = Field(None, description="GCP region, e.g. `us-central1`.")
    gcp_service_account_email: Email | None = Field(None, description="Service account the jobs run as.")
    temp_assets_bucket: Str | None = Field(None, description="`gs://` prefix for temporary files.")
    perm_assets_bucket: Str | None = Field(None, description="`gs://` prefix for kept outputs.")
    embedding_bq_dataset_name: SqlName | None = Field(None, description=(
        "BigQuery dataset for embeddings: the default of the task config's `exportConfig.bigqueryDataset` "
        "(a value set there wins)."))
    network: VpcNetwork | None = Field(None, description=(
        "VPC network the graph-store CustomJobs are peered with, `projects/<project number>/global/networks/"
        "<name>` (Vertex AI's format; VPC Network Peering for Vertex AI must already be set up). Null: no "
        "peering. The pipeline's own tasks (freeze, partition, export) run without it."))


class TaskResources(Model):
    """CPU and memory of one pipeline task (a KFP container on Vertex AI Pipelines): requested and
    limited to the same values, so the task gets a machine that has them."""

    cpu: Float = Field(description="vCPUs, > 0 (e.g. `4`, or `0.5`).")
    memory_gb: Int(1, 624, " (GB)") = Field(description=(
        "Memory in GB (1 to 624, Vertex AI Pipelines' largest task)."))

    @field_validator("cpu")
    @classmethod
    def _positive(cls, cpu: float) -> float:
        if not 0 < cpu <= 96:
            issues = Issues()
            issues.bad((), cpu, "must be > 0 and <= 96 vCPUs (Vertex AI Pipelines' largest task)")
            issues.raise_any()
        return cpu


class PartitionTaskResources(TaskResources):
    """``partition_resource_config``: the partition task (DuckDB, in one process)."""

    cpu: Float = Field(4.0, description="vCPUs, > 0 and <= 96 (DuckDB uses them all).")
    memory_gb: Int(1, 624, " (GB)") = Field(16, description=(
        "Memory in GB (1 to 624); must hold `datasetConfig.partitionConfig.memoryLimitMb` "
        "(`pipeline plan` and `submit` check it)."))


class ExportTaskResources(TaskResources):
    """``export_resource_config``: each export task (one node type: an id map and its embeddings)."""

    cpu: Float = Field(2.0, description="vCPUs, > 0 and <= 96.")
    memory_gb: Int(1, 624, " (GB)") = Field(8, description="Memory in GB (1 to 624).")


class SharedResourceConfig(Model):
    """``shared_resource_config``: labels and the GCP settings common to every stage."""

    resource_labels: Labels = Field(default_factory=lambda: MappingProxyType({}), description=(
        "Labels on cloud jobs. Keys `^[a-z][a-z0-9_-]{0,62}$`, values `^[a-z0-9_-]{0,63}$` (GCP label "
        "rules)."))
    common_compute_config: CommonComputeConfig = Field(default_factory=CommonComputeConfig)

    @property
    def project(self) -> str | None:
        return self.common_compute_config.project

    @property
    def region(self) -> str | None:
        return self.common_compute_config.region

    @property
    def gcp_service_account_email(self) -> str | None:
        return self.common_compute_config.gcp_service_account_email

    @property
    def temp_assets_bucket(self) -> str | None:
        return self.common_compute_config.temp_assets_bucket

    @property
    def perm_assets_bucket(self) -> str | None:
        return self.common_compute_config.perm_assets_bucket

    @property
    def embedding_bq_dataset_name(self) -> str | None:
        return self.common_compute_config.embedding_bq_dataset_name

    @property
    def network(self) -> str | None:
        return self.common_compute_config.network


class ResourceConfig(FileModel):
    """The whole resource config. ``source_path`` is informational and excluded from equality."""

    shared: SharedResourceConfig = Field(default_factory=SharedResourceConfig,
                                         alias="shared_resource_config")
    trainer: TrainerResources = Field(alias="trainer_resource_config")
    inferencer: InferencerResources = Field(alias="inferencer_resource_config")
    partition_task: PartitionTaskResources = Field(
        default_factory=PartitionTaskResources, alias="partition_resource_config", description=(
            "CPU and memory of the pipeline's partition task."))
    export_task: ExportTaskResources = Field(
        default_factory=ExportTaskResources, alias="export_resource_config", description=(
            "CPU and memory of each of the pipeline's export tasks."))

    @property
    def num_partitions(self) -> int:
        """One graph partition per storage process (trainer and inferencer counts are equal), or
        per compute machine in colocated mode (``num_storage_processes: 0``)."""
        return self.trainer.num_partitions

    @field_validator("inferencer")
    @classmethod
    def _like_the_trainer(cls, inferencer: InferencerResources, info: ValidationInfo) -> InferencerResources:
        trainer, issues = info.data.get("trainer"), Issues()
        if trainer is not None and trainer.kind != inferencer.kind:
            issues.bad((), inferencer.kind,
                       f"differs from the trainer's kind {trainer.kind!r}; run both stages the same way")
        elif trainer is not None and trainer.mode != inferencer.mode:
            issues.bad((inferencer.config_key, "mode"), inferencer.mode,
                       f"differs from the trainer's mode {trainer.mode!r}; both stages read the graph "
                       "the same way")
        elif trainer is not None and trainer.num_storage != inferencer.num_storage:
            issues.bad(inferencer.count_loc, inferencer.num_storage,
                       f"differs from trainer_resource_config.{loc_path(trainer.count_loc)} = "
                       f"{trainer.num_storage}; both stages serve the same graph partitions, so their "
                       "storage counts must be equal")
        issues.raise_any()
        return inferencer
