"""Vertex AI requests, built offline (anonymous credentials, no network): graph-store CustomJob
worker pools, the PipelineJob of `pipeline submit`, and the Schedule of `pipeline schedule`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials

from graphstore.config import load_config_pair
from pipeline import vertex

REPO = Path(__file__).resolve().parents[2]
TASK, RES = REPO / "configs" / "task_vertex.yaml", REPO / "configs" / "resource_vertex.yaml"
LOCAL_TASK = REPO / "configs" / "task_hetero.yaml"
IMAGE = "europe-docker.pkg.dev/p/r/graphstore:1"


def test_graph_store_custom_job_pools_follow_the_launcher_contract():
    task, res = load_config_pair(str(TASK), str(RES))
    args = dict(task_config_uri="gs://b/runs/r1/config/task.yaml",
                resource_config_uri="gs://b/runs/r1/config/resource.yaml", run_dir="gs://b/runs/r1")
    specs = vertex.worker_pool_specs(task, res.trainer, "train", IMAGE, **args)
    stage_args = ["--task-config", args["task_config_uri"], "--resource-config",
                  args["resource_config_uri"], "--stage", "train", "--run-dir", "gs://b/runs/r1"]
    disk = {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100}  # Vertex AI's defaults
    compute = {"machine_spec": {"machine_type": "n1-standard-16",
                                "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2},
               "container_spec": {"image_uri": IMAGE, "command": ["python"],
                                  "args": ["-m", "components.train", *stage_args]},
               "disk_spec": disk}
    assert specs == [
        {**compute, "replica_count": 1},  # workerpool0: compute leader
        {**compute, "replica_count": 1},  # workerpool1: the other compute machines (C - 1)
        {"machine_spec": {"machine_type": "n2-highmem-32"}, "replica_count": 4,
         "container_spec": {"image_uri": IMAGE, "command": ["python"],
                            "args": ["-m", "components.storage", *stage_args]},
         "disk_spec": {**disk, "boot_disk_size_gb": 200}}]  # as configs/resource_vertex.yaml says
    # one compute machine: the middle pool is an empty spec, so storage stays workerpool2
    infer = vertex.worker_pool_specs(task, res.inferencer, "infer", IMAGE, **args)
    assert infer[1] == {} and infer[2]["replica_count"] == 4
    assert infer[0]["container_spec"]["args"][:2] == ["-m", "components.infer"]
    labels = vertex.job_labels(res, run_id="r1", stage="train")
    job = vertex.custom_job(task, res, "train", IMAGE, display_name="r1-train", timeout_s=3600,
                            labels=labels, **args)
    request = type(job).to_dict(job)
    pools = request["job_spec"]["worker_pool_specs"]
    assert [p["replica_count"] for p in pools] == ["1", "1", "4"]
    assert pools[2]["container_spec"]["args"][-1] == "gs://b/runs/r1"
    assert request["labels"] == {"team": "graph-ml", "graphstore_run_id": "r1",
                                 "graphstore_stage": "train"}


def test_each_pool_gets_its_machine_type_disk_and_replicas():
    """Issue 12 item 6: per-pool settings reach the CustomJob request (aiplatform_v1 messages)."""
    pool = "trainer_resource_config.vertex_ai_graph_store_trainer_config.graph_store_pool"
    task, res = load_config_pair(str(TASK), str(RES), (
        f"{pool}.machine_type=m1-ultramem-40", f"{pool}.num_replicas=3",
        f"{pool}.boot_disk_type=pd-standard", f"{pool}.boot_disk_size_gb=1500",
        "inferencer_resource_config.vertex_ai_graph_store_inferencer_config.graph_store_pool."
        "num_replicas=3",
        "trainer_resource_config.vertex_ai_graph_store_trainer_config.compute_pool."
        "boot_disk_size_gb=200"))
    job = vertex.custom_job(task, res, "train", IMAGE, display_name="r1-train", timeout_s=60,
                            labels={}, task_config_uri="t", resource_config_uri="r", run_dir="d")
    pools = type(job).to_dict(job)["job_spec"]["worker_pool_specs"]
    assert [(p["machine_spec"]["machine_type"], p["replica_count"], p["disk_spec"]) for p in pools] == [
        ("n1-standard-16", "1", {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200}),
        ("n1-standard-16", "1", {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": 200}),
        ("m1-ultramem-40", "3", {"boot_disk_type": "pd-standard", "boot_disk_size_gb": 1500})]


def test_local_resources_are_refused_for_a_custom_job():
    task, res = load_config_pair(str(LOCAL_TASK), str(REPO / "configs" / "resource_local.yaml"))
    with pytest.raises(Exception, match="no Vertex AI pools"):
        vertex.worker_pool_specs(task, res.trainer, "train", IMAGE, task_config_uri="t",
                                 resource_config_uri="r", run_dir="d")
