"""Vertex AI requests: the CustomJob of a graph-store stage, pipeline runs and schedules.

Everything here builds the request objects of the official ``google-cloud-aiplatform`` client;
sending them is a separate call (``run_custom_job``, ``submit``, ``create_schedule``), so the
requests are tested offline (anonymous credentials, no network).

Graph-store CustomJob worker pools follow pipeline.topology (the contract the local launcher
emulates): ``workerPoolSpecs[0]`` = compute leader (1 replica), ``[1]`` = the other compute
machines (C - 1; an empty pool spec when C = 1, as Vertex requires pools to keep their index),
``[2]`` = storage machines (S). Compute pools run the stage's ``command``, storage pools its
``graphStoreStorageConfig.command``, each with the four stage arguments appended; Vertex sets
``CLUSTER_SPEC`` and the process group variables itself.
"""

from __future__ import annotations

from typing import Any

from graphstore.config import ResourceConfig, StageResources, TaskConfig
from graphstore.errors import UsageError
from graphstore.stage import stage_resources
from pipeline import topology


def _pool_spec(machine_type: str, gpu_type: str, gpu_count: int, replicas: int, image: str,
               argv: list[str], labels_env: dict[str, str] | None = None) -> dict[str, Any]:
    machine: dict[str, Any] = {"machine_type": machine_type}
    if gpu_count > 0:
        machine.update(accelerator_type=gpu_type, accelerator_count=gpu_count)
    spec = {"machine_spec": machine, "replica_count": replicas,
            "container_spec": {"image_uri": image, "command": argv[:1], "args": argv[1:]}}
    if labels_env:
        spec["container_spec"]["env"] = [{"name": k, "value": v} for k, v in labels_env.items()]
    return spec


def worker_pool_specs(task: TaskConfig, stage_res: StageResources, stage: str, image: str, *,
                      task_config_uri: str, resource_config_uri: str, run_dir: str) -> list[dict]:
    """The ``workerPoolSpecs`` of a graph-store stage (module docs)."""
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
    specs = [_pool_spec(cp.machine_type, cp.gpu_type, cp.gpu_limit, 1, image, compute)]
    specs.append(_pool_spec(cp.machine_type, cp.gpu_type, cp.gpu_limit, cp.num_replicas - 1,
                            image, compute) if cp.num_replicas > 1 else {})
    if sp.num_replicas > 0:
        specs.append(_pool_spec(sp.machine_type, sp.gpu_type, sp.gpu_limit, sp.num_replicas,
                                image, storage))
    return specs


def _gcp(res: ResourceConfig) -> tuple[str, str]:
    shared = res.shared
    if not shared.project or not shared.region:
        raise UsageError("shared_resource_config.common_compute_config.project and .region are "
                         "required for Vertex AI")
    return shared.project, shared.region


def custom_job(task: TaskConfig, res: ResourceConfig, stage: str, image: str, *,
               task_config_uri: str, resource_config_uri: str, run_dir: str, display_name: str,
               credentials=None):
    """An ``aiplatform.CustomJob`` for one graph-store stage (not started)."""
    from google.cloud import aiplatform

    project, region = _gcp(res)
    stage_res = stage_resources(res, stage)
    specs = worker_pool_specs(task, stage_res, stage, image, task_config_uri=task_config_uri,
                              resource_config_uri=resource_config_uri, run_dir=run_dir)
    return aiplatform.CustomJob(
        display_name=display_name, worker_pool_specs=specs, project=project, location=region,
        labels=dict(res.shared.resource_labels), credentials=credentials,
        staging_bucket=res.shared.temp_assets_bucket)


def run_custom_job(job, res: ResourceConfig, timeout_s: float) -> None:
    """Start the CustomJob and wait for it (raises when it fails)."""
    job.run(service_account=res.shared.gcp_service_account_email, sync=True,
            timeout=int(timeout_s))


def pipeline_job(res: ResourceConfig, *, template_path: str, parameter_values: dict[str, str],
                 display_name: str, enable_caching: bool = False, credentials=None):
    """An ``aiplatform.PipelineJob`` of the compiled pipeline (not submitted). Its pipeline root
    is ``<temp_assets_bucket>/pipeline_root``."""
    from google.cloud import aiplatform

    project, region = _gcp(res)
    if not res.shared.temp_assets_bucket:
        raise UsageError("shared_resource_config.common_compute_config.temp_assets_bucket is "
                         "required (the pipeline root)")
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
    sched.create(cron=cron, max_concurrent_run_count=max_concurrent_runs,
                 service_account=res.shared.gcp_service_account_email)
    return sched.resource_name
