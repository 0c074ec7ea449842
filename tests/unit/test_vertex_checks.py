"""Refusals before anything is sent to Vertex AI (pipeline.vertex_checks), each naming the key or
flag to fix; and the shipped Vertex pair passes, its CustomJob requests parsed by the real
``aiplatform_v1`` messages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import aiplatform_v1

from graphstore.config import ConfigError, load_config_pair
from pipeline import stages, vertex
from pipeline.vertex_checks import check_for_vertex, image_problem, vertex_problems

REPO = Path(__file__).resolve().parents[2]
TASK, RES = REPO / "configs" / "task_vertex.yaml", REPO / "configs" / "resource_vertex.yaml"
IMAGE = "us-central1-docker.pkg.dev/my-project/graphstore/graphstore:1"
RUN_ROOT = "gs://my-project-graphstore-perm/runs"
COMMON = "shared_resource_config.common_compute_config"
TRAINER = "trainer_resource_config.vertex_ai_graph_store_trainer_config"
INFERENCER = "inferencer_resource_config.vertex_ai_graph_store_inferencer_config"


def problems(*overrides: str, image: str = IMAGE, run_root: str = RUN_ROOT,
             res_path: Path = RES) -> dict[str, str]:
    """dotted key or flag -> message, for the pair with ``overrides``."""
    task, res = load_config_pair(TASK, res_path, overrides)
    found = vertex_problems(task, res, image=image, run_root=run_root, task_file="t.yaml",
                            resource_file="r.yaml")
    assert len({p.path for p in found}) == len(found), found  # one problem per key
    return {p.path: p.message for p in found}


def test_the_shipped_vertex_pair_passes():
    assert problems() == {}


def test_local_inputs_warehouse_checkpoint_and_run_root_are_refused():
    found = problems("datasetConfig.dataRootUri=/data/raw", "exportConfig.warehouse=local",
                     "inferencerConfig.inferencerArgs.checkpoint=/models/model.pt",
                     run_root="/tmp/runs")
    assert set(found) == {"--run-root", "exportConfig.warehouse",
                          "inferencerConfig.inferencerArgs.checkpoint",
                          *(f"datasetConfig.dataSources.{kind}[{i}].uri" for kind in ("nodes", "edges")
                            for i in range(2))}
    assert "cannot read" in found["datasetConfig.dataSources.edges[1].uri"]
    assert "use warehouse: bigquery" in found["exportConfig.warehouse"]
    assert "gs:// prefix" in found["--run-root"]
    # a BigQuery table is fine as an input
    assert problems("datasetConfig.dataSources.edges[1].uri=bq://my-project.shop.item_item") == {}


def test_missing_gcp_settings_local_buckets_and_local_resources_are_refused():
    found = problems(f"{COMMON}.project=null", f"{COMMON}.region=null",
                     f"{COMMON}.perm_assets_bucket=/srv/perm", "exportConfig.bigqueryProject=my-project")
    assert set(found) == {f"{COMMON}.project", f"{COMMON}.region", f"{COMMON}.perm_assets_bucket"}
    assert "missing: required for Vertex AI" in found[f"{COMMON}.region"]
    assert "pipeline root" in problems(f"{COMMON}.temp_assets_bucket=null")[
        f"{COMMON}.temp_assets_bucket"]
    found = problems("exportConfig.bigqueryProject=my-project", "exportConfig.bigqueryDataset=emb",
                     res_path=REPO / "configs" / "resource_local.yaml")
    assert "local_graph_store_config" in found["trainer_resource_config"]
    assert "vertex_ai_graph_store_inferencer_config" in found["inferencer_resource_config"]


@pytest.mark.parametrize("image,why", [
    ("", "is empty"), ("  ", "is empty"),
    ("python:3.11", "the compile-time default"), ("graphstore", "official Docker Hub image"),
    ("localhost:5000/graphstore:1", "registry on this machine"),
    ("127.0.0.1:5000/g/graphstore", "registry on this machine"),
    ("us-docker.pkg.dev/p/r/GraphStore:1", "not an image reference"),
    ("gcr.io/p/graphstore:bad tag", "not a valid tag"),
    ("gcr.io/p/graphstore@sha256:xyz", "sha256:<64 hex digits>")])
def test_images_vertex_cannot_run_are_refused(image: str, why: str):
    assert why in (image_problem(image) or ""), image
    assert "--image" in problems(image=image)


@pytest.mark.parametrize("image", [IMAGE, "gcr.io/my-project/graphstore", "myteam/graphstore:2",
                                   "europe-docker.pkg.dev/p/r/g@sha256:" + "a" * 64])
def test_pullable_images_pass(image: str):
    assert image_problem(image) is None


@pytest.mark.parametrize("overrides,key,why", [
    ((f"{TRAINER}.compute_pool.gpu_type=TPU_V3",), f"{TRAINER}.compute_pool.gpu_type",
     "no CUDA device"),
    ((f"{TRAINER}.compute_pool.gpu_type=NVIDIA_TESLA_K80",), f"{TRAINER}.compute_pool.gpu_type",
     "no CUDA device"),
    ((f"{TRAINER}.compute_pool.gpu_type=NVIDIA_TESLA_T5",), f"{TRAINER}.compute_pool.gpu_type",
     "not a Vertex AI accelerator type"),
    ((f"{TRAINER}.compute_pool.machine_type=n2-highmem-32",), f"{TRAINER}.compute_pool.machine_type",
     "cannot carry NVIDIA_TESLA_T4"),
    ((f"{TRAINER}.compute_pool.gpu_limit=3", f"{TRAINER}.compute_cluster_local_world_size=3"),
     f"{TRAINER}.compute_pool.gpu_limit", "counts of 1, 2, 4"),
    ((f"{INFERENCER}.compute_pool.machine_type=a2-highgpu-2g",
      f"{INFERENCER}.compute_pool.gpu_type=NVIDIA_TESLA_A100", f"{INFERENCER}.compute_pool.gpu_limit=1"),
     f"{INFERENCER}.compute_pool.gpu_limit", "comes with 2 GPUs"),
    ((f"{INFERENCER}.graph_store_pool.machine_type=g2-standard-8",),
     f"{INFERENCER}.graph_store_pool.gpu_limit", "comes with GPUs"),
    ((f"{TRAINER}.compute_cluster_local_world_size=4",),
     f"{TRAINER}.compute_cluster_local_world_size", "each process takes one GPU"),
])
def test_gpus_without_a_cuda_device_are_refused(overrides: tuple[str, ...], key: str, why: str):
    found = problems(*overrides)
    assert list(found) == [key] and why in found[key], found


def test_matching_gpu_machines_pass():
    assert problems(f"{TRAINER}.compute_pool.machine_type=a2-highgpu-2g",
                    f"{TRAINER}.compute_pool.gpu_type=NVIDIA_TESLA_A100",
                    f"{INFERENCER}.compute_pool.machine_type=g2-standard-24",
                    f"{INFERENCER}.compute_pool.gpu_type=NVIDIA_L4") == {}


def test_labels_the_pipeline_sets_are_reserved_and_counted():
    found = problems("shared_resource_config.resource_labels={graphstore_run_id: x, team: a}")
    assert list(found) == ["shared_resource_config.resource_labels.graphstore_run_id"]
    many = "{" + ", ".join(f"k{i}: v" for i in range(61)) + "}"
    found = problems(f"shared_resource_config.resource_labels={many}")
    assert "keep at most 60" in found["shared_resource_config.resource_labels"]


def test_check_for_vertex_raises_one_config_error_listing_all():
    task, res = load_config_pair(TASK, RES, ("exportConfig.warehouse=local",))
    with pytest.raises(ConfigError) as exc:
        check_for_vertex(task, res, image="python:3.11", run_root=RUN_ROOT, task_file="t.yaml",
                         resource_file="r.yaml")
    lines = str(exc.value).splitlines()
    assert lines[0] == "2 config problems:"
    assert lines[1].startswith("<command line>: --image: ")
    assert lines[2].startswith("t.yaml: exportConfig.warehouse: ")
    assert exc.value.exit_code == 2


def test_vertex_pair_custom_jobs_parse_as_the_real_protos(tmp_path: Path):
    """The frozen task_vertex + resource_vertex pair, as the train and infer tasks build their
    CustomJobs: strict aiplatform_v1 round trip, job name = display name on every pool, labels
    tying the job to the run, the network, Vertex's timeout, BigQuery export with the default
    dataset."""
    network = "projects/123456789/global/networks/graph-vpc"
    task, res = load_config_pair(TASK, RES, (f"{COMMON}.network={network}",))
    assert (task.export.warehouse, task.export.bigquery_dataset) == ("bigquery", "embeddings")
    run_dir, run_id, node_types = stages.freeze(stages.dump_yaml(task.to_dict()),
                                                stages.dump_yaml(res.to_dict()), str(tmp_path),
                                                "R1.nightly")
    assert run_id == "R1.nightly"
    assert node_types == ["user", "item"]
    task, res = stages.load_frozen(run_dir)
    pipeline_job = "graphstore-pipeline-20261129031500-" + "x" * 40
    for stage, pools in (("train", 3), ("infer", 3)):
        task_uri, res_uri = stages.config_paths(run_dir)
        labels = vertex.job_labels(res, run_id="R1.nightly", stage=stage, pipeline_job=pipeline_job)
        job = vertex.custom_job(task, res, stage, IMAGE, task_config_uri=task_uri,
                                resource_config_uri=res_uri, run_dir=run_dir,
                                display_name=f"R1.nightly-{stage}", timeout_s=86400, labels=labels)
        parsed = aiplatform_v1.CustomJob.from_json(aiplatform_v1.CustomJob.to_json(job))
        assert parsed == job and parsed.display_name == f"R1.nightly-{stage}"
        spec = parsed.job_spec
        assert spec.network == network and spec.scheduling.timeout.total_seconds() == 86400
        assert spec.service_account == "graphstore-runner@my-project.iam.gserviceaccount.com"
        used = [p for p in spec.worker_pool_specs if p.replica_count]
        assert len(spec.worker_pool_specs) == pools
        for pool in used:
            assert [(e.name, e.value) for e in pool.container_spec.env] == [
                ("GRAPHSTORE_JOB_NAME", f"R1.nightly-{stage}")]
        assert dict(parsed.labels) == {
            "team": "graph-ml", "graphstore_run_id": "r1-nightly", "graphstore_stage": stage,
            "graphstore_pipeline_job": vertex.label_value(pipeline_job)}
        assert len(parsed.labels["graphstore_pipeline_job"]) == 63


def test_label_values_follow_gcp_rules_and_long_ones_stay_distinct():
    assert vertex.label_value("20261129T031500Z-3f9a") == "20261129t031500z-3f9a"
    assert vertex.label_value("a.b/c") == "a-b-c"
    a, b = vertex.label_value("p" * 70 + "1"), vertex.label_value("p" * 70 + "2")
    assert a != b and len(a) == len(b) == 63
    assert all(re.fullmatch(r"[a-z0-9_-]{0,63}", v) for v in (a, b))
