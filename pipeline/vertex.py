"""Vertex AI requests: the CustomJob of a graph-store stage, pipeline runs and schedules.

Everything here builds the request objects of the official ``google-cloud-aiplatform`` client;
sending them is a separate call (pipeline.custom_jobs, ``submit``, ``create_schedule``), so the
requests are tested offline (anonymous credentials, no network).

Graph-store CustomJob worker pools follow pipeline.topology (the contract the local launcher
emulates): ``workerPoolSpecs[0]`` = compute leader (1 replica), ``[1]`` = the other compute
machines (C - 1; an empty pool spec when C = 1, as Vertex requires pools to keep their index),
``[2]`` = storage machines (S; none in replicated mode, which has no storage pool). Compute pools
run the stage's ``command``, storage pools its
``graphStoreStorageConfig.command``, each with the four stage arguments appended; Vertex sets
``CLUSTER_SPEC`` and the process group variables itself, and every pool gets
``GRAPHSTORE_JOB_NAME`` (the job's display name: Vertex's ``CLUSTER_SPEC`` "job" is the job spec
as a JSON string, not a name; graphstore.runtime.env reads it).

A CustomJob is an ``aiplatform_v1.CustomJob`` message (the request the ``JobServiceClient``
sends; its fields parse strictly), with the resource config's labels plus :func:`job_labels`
(run id, stage, pipeline job) and its optional VPC ``network``. pipeline.custom_jobs runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from typing import Any, Iterator, Mapping

from graphstore.config import ResourceConfig, StageResources, TaskConfig
from graphstore.runtime.env import JOB_NAME
from graphstore.runtime.errors import UsageError
from graphstore.config.stage import stage_resources
from pipeline import topology

LABEL_CHARS = 63
"""Most characters of a GCP label value."""
_NOT_LABEL = re.compile(r"[^a-z0-9_-]")


def label_value(text: str) -> str:
    """``text`` as a GCP label value: lower-case, every character outside ``[a-z0-9_-]`` replaced
    by ``-``, at most :data:`LABEL_CHARS` characters. A value that had to be cut ends with ``-``
    and 8 hex digits of a hash of the whole text, so two long values that differ stay different."""
    value = _NOT_LABEL.sub("-", text.lower())
    if len(value) <= LABEL_CHARS:
        return value
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{value[:LABEL_CHARS - 9]}-{digest}"


def job_labels(res: ResourceConfig, *, run_id: str, stage: str,
               pipeline_job: str = "") -> dict[str, str]:
    """The labels of a stage's CustomJob: ``resource_labels``, then ``graphstore_run_id``,
    ``graphstore_stage`` and (when known) ``graphstore_pipeline_job``, the KFP pipeline job's
    name; values made valid by :func:`label_value` (pipeline.vertex_checks refuses
    ``resource_labels`` using these keys)."""
    labels = dict(res.shared.resource_labels)
    labels.update({"graphstore_run_id": label_value(run_id), "graphstore_stage": label_value(stage)})
    if pipeline_job:
        labels["graphstore_pipeline_job"] = label_value(pipeline_job)
    return labels


def _pool_spec(machine_type: str, gpu_type: str, gpu_count: int, replicas: int, image: str,
               argv: list[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    machine: dict[str, Any] = {"machine_type": machine_type}
    if gpu_count > 0:
        machine.update(accelerator_type=gpu_type, accelerator_count=gpu_count)
    spec = {"machine_spec": machine, "replica_count": replicas,
            "container_spec": {"image_uri": image, "command": argv[:1], "args": argv[1:]}}
    if env:
        spec["container_spec"]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return spec


def worker_pool_specs(task: TaskConfig, stage_res: StageResources, stage: str, image: str, *,
                      task_config_uri: str, resource_config_uri: str, run_dir: str,
                      job_name: str = "") -> list[dict]:
    """The ``workerPoolSpecs`` of a graph-store stage (module docs); ``job_name`` (when given)
    reaches every process as ``GRAPHSTORE_JOB_NAME``."""
    if stage_res.vertex is None:
        raise UsageError(f"{stage}: the resource config has no Vertex AI pools for this stage")
    vertex = stage_res.vertex
    commands = topology.role_commands(task, stage)
    extra = topology.contract_args(task_config_path=task_config_uri,
                                   resource_config_path=resource_config_uri, stage=stage,
                                   run_dir=run_dir)
    compute = topology.split_command(commands["compute"][1], commands["compute"][0]) + extra
    storage = topology.split_command(commands["storage"][1], commands["storage"][0]) + extra
    cp, sp = vertex.compute_pool, vertex.graph_store_pool
    env = {JOB_NAME: job_name} if job_name else None
    specs = [_pool_spec(cp.machine_type, cp.gpu_type, cp.gpu_limit, 1, image, compute, env)]
    specs.append(_pool_spec(cp.machine_type, cp.gpu_type, cp.gpu_limit, cp.num_replicas - 1,
                            image, compute, env) if cp.num_replicas > 1 else {})
    if sp is not None and sp.num_replicas > 0:  # replicated mode: compute machines only
        specs.append(_pool_spec(sp.machine_type, sp.gpu_type, sp.gpu_limit, sp.num_replicas,
                                image, storage, env))
    for spec, pool in zip(specs, (cp, cp, sp)):  # each pool's boot disk (an empty pool has none)
        if spec:
            spec["disk_spec"] = {"boot_disk_type": pool.boot_disk_type,
                                 "boot_disk_size_gb": pool.boot_disk_size_gb}
    return specs


def _gcp(res: ResourceConfig) -> tuple[str, str]:
    shared = res.shared
    if not shared.project or not shared.region:
        raise UsageError("shared_resource_config.common_compute_config.project and .region are "
                         "required for Vertex AI")
    return shared.project, shared.region


def location_parent(res: ResourceConfig) -> str:
    """``projects/<project>/locations/<region>``: where the stage's CustomJobs are created."""
    project, region = _gcp(res)
    return f"projects/{project}/locations/{region}"


def custom_job(task: TaskConfig, res: ResourceConfig, stage: str, image: str, *,
               task_config_uri: str, resource_config_uri: str, run_dir: str, display_name: str,
               timeout_s: float, labels: Mapping[str, str]):
    """The ``aiplatform_v1.CustomJob`` of one graph-store stage (not created): the pools of
    :func:`worker_pool_specs` with ``GRAPHSTORE_JOB_NAME=display_name``, the resource config's
    service account and optional network, Vertex's own timeout, and ``labels``."""
    from google.cloud import aiplatform_v1
    from google.protobuf import duration_pb2

    stage_res = stage_resources(res, stage)
    specs = worker_pool_specs(task, stage_res, stage, image, task_config_uri=task_config_uri,
                              resource_config_uri=resource_config_uri, run_dir=run_dir,
                              job_name=display_name)
    spec = aiplatform_v1.CustomJobSpec(
        worker_pool_specs=specs, service_account=res.shared.gcp_service_account_email or "",
        network=res.shared.network or "",
        scheduling=aiplatform_v1.Scheduling(timeout=duration_pb2.Duration(seconds=int(timeout_s))))
    if res.shared.temp_assets_bucket:
        spec.base_output_directory = aiplatform_v1.GcsDestination(
            output_uri_prefix=f"{res.shared.temp_assets_bucket.rstrip('/')}/custom_jobs/"
                              f"{display_name}")
    return aiplatform_v1.CustomJob(display_name=display_name, job_spec=spec, labels=dict(labels))


def job_client(res: ResourceConfig, credentials=None):
    """A ``JobServiceClient`` of the resource config's region (Application Default Credentials
    unless ``credentials`` are given)."""
    from google.cloud import aiplatform_v1

    _, region = _gcp(res)
    return aiplatform_v1.JobServiceClient(
        credentials=credentials, client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})


NO_CREDENTIALS = ("no Google Cloud credentials found: run `gcloud auth application-default login` "
                  "(or set GOOGLE_APPLICATION_CREDENTIALS to a key file), then rerun; "
                  "--dry-run needs none (docs/vertex.md)")


@contextlib.contextmanager
def credentials_needed() -> Iterator[None]:
    """Inside, missing Application Default Credentials are one UsageError line (exit 2), not a
    traceback: the user must log in first."""
    from google.auth.exceptions import DefaultCredentialsError

    try:
        yield
    except DefaultCredentialsError:
        raise UsageError(NO_CREDENTIALS) from None


def pipeline_job(res: ResourceConfig, *, template_path: str, parameter_values: dict[str, str],
                 display_name: str, enable_caching: bool = False, credentials=None):
    """An ``aiplatform.PipelineJob`` of the compiled pipeline (not submitted). Its pipeline root
    is ``<temp_assets_bucket>/pipeline_root``. Without ``credentials``, Application Default
    Credentials are needed (UsageError naming the login command when there are none)."""
    from google.cloud import aiplatform

    project, region = _gcp(res)
    if not res.shared.temp_assets_bucket:
        raise UsageError("shared_resource_config.common_compute_config.temp_assets_bucket is "
                         "required (the pipeline root)")
    with credentials_needed():
        return aiplatform.PipelineJob(
            display_name=display_name, template_path=template_path,
            pipeline_root=f"{res.shared.temp_assets_bucket.rstrip('/')}/pipeline_root",
            parameter_values=parameter_values, enable_caching=enable_caching,
            labels=dict(res.shared.resource_labels), project=project, location=region,
            credentials=credentials)


def pipeline_job_request(job, res: ResourceConfig) -> dict[str, Any]:
    """The PipelineJob request ``submit`` sends (service account included)."""
    resource = job._gca_resource  # the client keeps the whole request here
    request = type(resource).to_dict(resource)
    request["service_account"] = res.shared.gcp_service_account_email or ""
    return request


def submit(job, res: ResourceConfig) -> str:
    """Submit the run; returns its resource name."""
    with credentials_needed():
        job.submit(service_account=res.shared.gcp_service_account_email)
    return job.resource_name


def schedule(job, display_name: str, credentials=None):
    """An ``aiplatform.PipelineJobSchedule`` of ``job`` (not created)."""
    from google.cloud import aiplatform

    return aiplatform.PipelineJobSchedule(pipeline_job=job, display_name=display_name,
                                          credentials=credentials, project=job.project,
                                          location=job.location)


def schedule_request(sched, res: ResourceConfig, cron: str, max_concurrent_runs: int = 1) -> dict:
    """The Schedule request ``create_schedule`` sends (cron, concurrency, service account)."""
    resource = sched._gca_resource
    request = type(resource).to_dict(resource)
    request.update(cron=cron, max_concurrent_run_count=str(max_concurrent_runs))
    request["create_pipeline_job_request"]["pipeline_job"]["service_account"] = (
        res.shared.gcp_service_account_email or "")
    return request


def create_schedule(sched, res: ResourceConfig, cron: str, max_concurrent_runs: int = 1) -> str:
    with credentials_needed():
        sched.create(cron=cron, max_concurrent_run_count=max_concurrent_runs,
                     service_account=res.shared.gcp_service_account_email)
    return sched.resource_name
