"""Refusals before anything is sent to Vertex AI: every config that would fail later, on Vertex.

``pipeline submit`` and ``pipeline schedule create`` call :func:`check_for_vertex` after the
config pair has loaded (each file's own rules have passed) and before compiling or sending
anything. It collects every problem, each naming the key or flag to fix, and raises them together
as one :class:`~graphstore.config.ConfigError` (exit 2, one line per problem). What it refuses,
and why each would fail only after money was spent:

- a local input (a source table, ``inferencerArgs.checkpoint``) or a local ``--run-root`` /
  bucket: every task runs in its own container on Vertex AI and sees only ``gs://`` / ``bq://``;
- ``exportConfig.warehouse: local``: the DuckDB file would live inside the export task's container
  (and the export stage refuses a ``gs://`` run folder without ``localWarehouseUri``), so the
  embeddings would be lost after train and infer had run;
- a graph-store stage with ``local_graph_store_config``, or no project / region / pipeline root;
- an ``--image`` Vertex AI cannot pull, or one that cannot hold this package (an official Docker
  Hub image such as the compile-time default ``python:3.11``, a ``localhost`` registry);
- GPUs that give the compute processes no CUDA device: an accelerator type Vertex AI does not
  know, a TPU, a GPU the machine type cannot carry (e.g. a T4 on ``n2-highmem-32``), a GPU count
  the machine type does not come with, an accelerator-optimized machine without its GPUs, or more
  compute processes per machine than GPUs (each process takes ``cuda:<local_rank>``);
- ``resource_labels`` that use a key the pipeline sets itself, or too many labels for Vertex AI.

A node type with neither a node table nor an edge type is refused by the task config itself
(graphstore.config.schema), so it never reaches this module. Nothing here reads the network: an
image is checked by its name only, not pulled.
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping

from graphstore.io import uris
from graphstore.io.bigquery_source import is_bigquery
from graphstore.config import ConfigError, Problem, ResourceConfig, TaskConfig
from graphstore.config.resource_schema import GPU_UNSPECIFIED, PoolConfig, StageResources
from graphstore.runtime.errors import show
from pipeline.custom_jobs import LAUNCH_LABEL
from pipeline.dag import DEFAULT_IMAGE

COMMAND_LINE = "<command line>"
"""The ``file`` of a problem with a flag (``--image``, ``--run-root``)."""

RESERVED_LABELS = ("graphstore_run_id", "graphstore_stage", "graphstore_pipeline_job",
                   LAUNCH_LABEL)
"""Label keys the pipeline sets on every CustomJob (pipeline.vertex.job_labels,
pipeline.custom_jobs)."""
MAX_LABELS = 64
"""Vertex AI's limit on labels per resource."""

GPU_MACHINES: Mapping[str, tuple[str, ...]] = {
    "NVIDIA_TESLA_T4": ("n1-",), "NVIDIA_TESLA_P4": ("n1-",), "NVIDIA_TESLA_P100": ("n1-",),
    "NVIDIA_TESLA_V100": ("n1-",), "NVIDIA_TESLA_A100": ("a2-highgpu-", "a2-megagpu-"),
    "NVIDIA_A100_80GB": ("a2-ultragpu-",), "NVIDIA_L4": ("g2-",),
    "NVIDIA_H100_80GB": ("a3-highgpu-", "a3-edgegpu-"), "NVIDIA_H100_MEGA_80GB": ("a3-megagpu-",),
    "NVIDIA_H200_141GB": ("a3-ultragpu-",), "NVIDIA_B200": ("a4-highgpu-",),
    "NVIDIA_RTX_PRO_6000": ("g4-",)}
"""CUDA GPUs Vertex AI attaches, and the machine types (prefixes) each attaches to (Compute
Engine's GPU platforms). Accelerator types left out give no CUDA device here: TPUs, the retired
K80, and GB200 (ARM machines, which the amd64 image cannot run)."""
N1_GPU_COUNTS: Mapping[str, tuple[int, ...]] = {
    "NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4), "NVIDIA_TESLA_P100": (1, 2, 4),
    "NVIDIA_TESLA_V100": (1, 2, 4, 8)}
"""GPU counts an ``n1-*`` machine takes, per GPU."""
GPU_FAMILIES = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")
"""Accelerator-optimized machine types: their GPUs are part of the machine type."""
_GPUS_IN_NAME = re.compile(r"-(\d+)g$")  # a2-highgpu-4g: 4 GPUs

_IMAGE_PART = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_HOST = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]+)?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")


def image_problem(image: str) -> str | None:
    """Why Vertex AI could not run ``image`` for this pipeline, or None. Checks the name only:
    a reference ``[host[:port]/]path[:tag][@sha256:...]`` (lower-case path), not a local-only
    registry, and not an official Docker Hub image (one path part, e.g. ``python:3.11``), which
    cannot hold this package."""
    if not image.strip():
        return "is empty; give the image built from the Containerfile (docs/vertex.md)"
    rest, _, digest = image.partition("@")
    if digest and not _DIGEST.match(digest):
        return f"{show(image)}: the digest after '@' must be sha256:<64 hex digits>"
    name, tag = rest, ""
    if ":" in rest.rsplit("/", 1)[-1]:
        name, tag = rest.rsplit(":", 1)
        if not _TAG.match(tag):
            return f"{show(image)}: {show(tag)} is not a valid tag"
    parts = name.split("/")
    host = parts[0] if len(parts) > 1 and ("." in parts[0] or ":" in parts[0]
                                           or parts[0] == "localhost") else ""
    path = parts[1:] if host else parts
    if (host and not _HOST.match(host)) or not path or not all(_IMAGE_PART.match(p) for p in path):
        return (f"{show(image)} is not an image reference (registry/path[:tag], lower-case path), "
                "e.g. us-central1-docker.pkg.dev/my-project/graphstore/graphstore:1")
    if host.split(":")[0] in _LOCAL_HOSTS or host.startswith("127."):
        return (f"{show(image)} is in a registry on this machine, which Vertex AI cannot pull from; "
                "push it to Artifact Registry (docs/vertex.md)")
    if not host and len(path) == 1:
        default = " (the compile-time default)" if image == DEFAULT_IMAGE else ""
        return (f"{show(image)}{default} is an official Docker Hub image, which holds no graphstore "
                "package; give the image built from the Containerfile (docs/vertex.md)")
    return None


def _local(uri: str | None) -> bool:
    return bool(uri) and not uris.is_gcs(uri) and not is_bigquery(uri)


def _input_problems(task: TaskConfig, task_file: str) -> Iterator[Problem]:
    for kind, sources in (("nodes", task.dataset.node_sources), ("edges", task.dataset.edge_sources)):
        for i, src in enumerate(sources):
            if _local(src.uri):
                yield Problem(file=task_file, path=f"datasetConfig.dataSources.{kind}[{i}].uri",
                              value=show(src.uri), message=(
                                  f"{show(src.uri)} is a local file, which Vertex AI cannot read; put "
                                  "the table on gs:// (or use a bq:// table) and set "
                                  "datasetConfig.dataRootUri"))
    checkpoint = task.inferencer.inferencer_args.get("checkpoint")
    if isinstance(checkpoint, str) and _local(checkpoint):
        yield Problem(file=task_file, path="inferencerConfig.inferencerArgs.checkpoint",
                      value=show(checkpoint), message=(
                          f"{show(checkpoint)} is a local file, which Vertex AI cannot read; give a "
                          "gs:// URI or leave it out (the run's own checkpoint)"))
    if task.export.warehouse == "local":
        yield Problem(file=task_file, path="exportConfig.warehouse", value=show("local"), message=(
            "'local' keeps the embeddings in a DuckDB file inside the export task's container on "
            "Vertex AI, lost when the task ends (and export refuses a gs:// run folder without "
            "localWarehouseUri); use warehouse: bigquery"))


def _where(res: ResourceConfig, stage: str) -> tuple[StageResources, str]:
    """A stage's resources and the dotted key of its Vertex section."""
    attr = "trainer" if stage == "train" else "inferencer"
    stage_res: StageResources = getattr(res, attr)
    key = type(res).model_fields[attr].alias
    return stage_res, f"{key}.{type(stage_res).model_fields['vertex'].alias}"


def gpu_problems(pool: PoolConfig) -> Iterator[tuple[str, str]]:
    """``(key below the pool, message)`` for each way ``pool``'s GPUs would give no CUDA device
    or be refused by Vertex AI (see the module docs)."""
    from google.cloud.aiplatform_v1 import AcceleratorType

    gpu, count, machine = pool.gpu_type, pool.gpu_limit, pool.machine_type
    if gpu not in AcceleratorType.__members__:
        yield "gpu_type", (f"{show(gpu)} is not a Vertex AI accelerator type (e.g. NVIDIA_TESLA_T4, "
                           "NVIDIA_L4, NVIDIA_TESLA_A100)")
        return
    in_name = _GPUS_IN_NAME.search(machine)
    if count == 0:
        if machine.startswith(GPU_FAMILIES):
            yield "gpu_limit", (f"0, but machine type {show(machine)} comes with GPUs; set gpu_type "
                                "and gpu_limit to its GPUs")
        return
    if gpu not in GPU_MACHINES:
        yield "gpu_type", (f"{show(gpu)} gives the compute processes no CUDA device (a TPU, a retired "
                           "GPU, or ARM machines the amd64 image cannot run); use an NVIDIA GPU of "
                           f"{', '.join(sorted(GPU_MACHINES))}")
        return
    prefixes = GPU_MACHINES[gpu]
    if not machine.startswith(prefixes):
        yield "machine_type", (f"{show(machine)} cannot carry {gpu}, which Vertex AI attaches only "
                               f"to {' / '.join(p + '*' for p in prefixes)} machine types")
    elif in_name and int(in_name.group(1)) != count:
        yield "gpu_limit", (f"{count}, but machine type {show(machine)} comes with "
                            f"{in_name.group(1)} GPUs; set gpu_limit: {in_name.group(1)}")
    elif machine.startswith("n1-") and count not in N1_GPU_COUNTS.get(gpu, (count,)):
        yield "gpu_limit", (f"{count}: an n1 machine takes {gpu} in counts of "
                            f"{', '.join(map(str, N1_GPU_COUNTS[gpu]))}")


def _resource_problems(res: ResourceConfig, res_file: str) -> Iterator[Problem]:
    common = "shared_resource_config.common_compute_config"
    for key in ("project", "region", "temp_assets_bucket"):
        if not getattr(res.shared, key):
            why = " (the pipeline root is <temp_assets_bucket>/pipeline_root)" if key.startswith(
                "temp") else ""
            yield Problem(file=res_file, path=f"{common}.{key}", value=None,
                          message=f"missing: required for Vertex AI{why}")
    for key in ("temp_assets_bucket", "perm_assets_bucket"):
        value = getattr(res.shared, key)
        if value and not uris.is_gcs(value):
            yield Problem(file=res_file, path=f"{common}.{key}", value=show(value),
                          message=f"{show(value)} must be a gs:// prefix on Vertex AI")
    for stage in ("train", "infer"):
        stage_res, where = _where(res, stage)
        if stage_res.vertex is None:
            yield Problem(file=res_file, path=where.split(".")[0], value=None, message=(
                f"runs the {stage} stage on this machine (local_graph_store_config); on Vertex AI it "
                f"needs {where.split('.')[1]} (configs/resource_vertex.yaml)"))
            continue
        vertex = stage_res.vertex
        for pool_key in ("graph_store_pool", "compute_pool"):
            if getattr(vertex, pool_key) is None:  # replicated mode has no storage pool
                continue
            for key, message in gpu_problems(getattr(vertex, pool_key)):
                yield Problem(file=res_file, path=f"{where}.{pool_key}.{key}", value=None,
                              message=message)
        gpus = vertex.compute_pool.gpu_limit
        if gpus > 0 and vertex.compute_pool.gpu_type != GPU_UNSPECIFIED \
                and stage_res.procs_per_compute > gpus:
            yield Problem(file=res_file, path=f"{where}.compute_cluster_local_world_size",
                          value=str(stage_res.procs_per_compute), message=(
                              f"{stage_res.procs_per_compute} compute processes per machine but "
                              f"compute_pool.gpu_limit is {gpus}: each process takes one GPU "
                              f"(cuda:<local_rank>); set it to at most {gpus}"))
    labels = res.shared.resource_labels
    for key in RESERVED_LABELS:
        if key in labels:
            yield Problem(file=res_file, path=f"shared_resource_config.resource_labels.{key}",
                          value=show(labels[key]), message=(
                              "is a label the pipeline sets on its CustomJobs itself; use another key"))
    if len(labels) + len(RESERVED_LABELS) > MAX_LABELS:
        yield Problem(file=res_file, path="shared_resource_config.resource_labels",
                      value=str(len(labels)), message=(
                          f"{len(labels)} labels; Vertex AI allows {MAX_LABELS} per job and the "
                          f"pipeline adds {len(RESERVED_LABELS)}: keep at most "
                          f"{MAX_LABELS - len(RESERVED_LABELS)}"))


def vertex_problems(task: TaskConfig, res: ResourceConfig, *, image: str, run_root: str,
                    task_file: str, resource_file: str) -> list[Problem]:
    """Every problem that would make the pipeline fail on Vertex AI (module docs), in this order:
    flags, task config, resource config. Empty when there is none."""
    problems = []
    why = image_problem(image)
    if why:
        problems.append(Problem(file=COMMAND_LINE, path="--image", value=show(image), message=why))
    if not uris.is_gcs(run_root):
        problems.append(Problem(file=COMMAND_LINE, path="--run-root", value=show(run_root), message=(
            f"{show(run_root)} must be a gs:// prefix on Vertex AI (every task reads and writes the "
            "run folder)")))
    problems += _input_problems(task, task_file)
    problems += _resource_problems(res, resource_file)
    return problems


def check_for_vertex(task: TaskConfig, res: ResourceConfig, *, image: str, run_root: str,
                     task_file: str, resource_file: str) -> None:
    """Raise one ConfigError (exit 2) listing every :func:`vertex_problems`; return when none."""
    problems = vertex_problems(task, res, image=image, run_root=run_root, task_file=task_file,
                               resource_file=resource_file)
    if problems:
        raise ConfigError(problems)
