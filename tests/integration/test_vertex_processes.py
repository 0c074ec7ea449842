"""Vertex AI requests, built offline (anonymous credentials, no network): graph-store CustomJob worker
pools, the PipelineJob of `pipeline submit`, and the Schedule of `pipeline schedule`: the tests
that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_vertex.py: unit tests start no process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
import pytest
from google.auth.credentials import AnonymousCredentials
from graphstore.config import load_config_pair
from pipeline import vertex
from tests.unit.test_vertex import (  # noqa: F401 (fixtures among them)
    IMAGE,
    LOCAL_TASK,
    REPO,
    RES,
    TASK,
)

pytestmark = [pytest.mark.integration]


GCS_DATA = "datasetConfig.dataRootUri=gs://my-bucket/raw/{run_date}"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_compiled_pipeline_requests_cpu_and_memory_for_partition_and_export(tmp_path):
    """The partition and export tasks' resources come from the resource config (PipelineSpec)."""
    import yaml

    out = tmp_path / "p.yaml"
    proc = _cli("compile", "--output", str(out), "--resource-config", str(RES))
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(out.read_text())
    executors = spec["deploymentSpec"]["executors"]

    def resources(component: str) -> list[dict]:  # one executor per branch of the DAG
        return [e["container"].get("resources", {}) for name, e in executors.items()
                if name == f"exec-{component}" or name.startswith(f"exec-{component}-")]
    want = {"partition": ("6", "48G"), "export": ("3", "12G")}  # configs/resource_vertex.yaml
    for component, (cpu, memory) in want.items():
        assert resources(component), component
        for res in resources(component):
            assert (res["resourceCpuRequest"], res["resourceCpuLimit"]) == (cpu, cpu), component
            assert (res["resourceMemoryRequest"], res["resourceMemoryLimit"]) == (memory, memory)
    for component in ("freeze", "train", "infer"):  # Vertex's default machine
        assert resources(component) and all(r == {} for r in resources(component))


def test_submit_dry_run_prints_the_pipeline_job_request():
    proc = _cli("submit", "--task-config", str(TASK), "--resource-config", str(RES), "--image",
                IMAGE, "--set", GCS_DATA, "--start-at", "train", "--display-name", "nightly", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    request = json.loads(proc.stdout)
    assert request["display_name"] == "nightly"
    assert request["service_account"] == "graphstore-runner@my-project.iam.gserviceaccount.com"
    assert request["labels"] == {"team": "graph-ml"}
    runtime = request["runtime_config"]
    assert runtime["gcs_output_directory"] == "gs://my-project-graphstore-temp/pipeline_root"
    params = runtime["parameter_values"]
    assert params["run_root"] == "gs://my-project-graphstore-perm/runs"
    assert (params["start_at"], params["stop_after"], params["run_id"]) == ("train", "export", "")
    assert params["graph_store_image"] == IMAGE
    assert "dataRootUri: gs://my-bucket/raw/{run_date}" in params["task_config"]  # resolved per run
    assert "vertex_ai_graph_store_trainer_config" in params["resource_config"]
    assert request["pipeline_spec"]["pipelineInfo"]["name"] == "graphstore-pipeline"
    # the service account's permissions are asked as that account: not without credentials
    assert "submit: service account permissions not checked (--dry-run)" in proc.stderr


def test_submit_refuses_local_inputs_and_schedule_checks_cron():
    proc = _cli("submit", "--task-config", str(LOCAL_TASK), "--resource-config", str(RES),
                "--image", IMAGE, "--dry-run")
    assert proc.returncode == 2 and "is a local file, which Vertex AI cannot read" in proc.stderr
    bad = _cli("schedule", "create", "--cron", "every day", "--task-config", str(TASK),
               "--resource-config", str(RES), "--image", IMAGE, "--set", GCS_DATA, "--dry-run")
    assert bad.returncode == 2 and "--cron" in bad.stderr


def test_schedule_dry_run_prints_the_schedule_request():
    proc = _cli("schedule", "create", "--cron", "0 3 * * *", "--task-config", str(TASK),
                "--resource-config", str(RES), "--image", IMAGE, "--set", GCS_DATA,
                "--display-name", "nightly-retrain", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    request = json.loads(proc.stdout)
    assert request["cron"] == "0 3 * * *" and request["max_concurrent_run_count"] == "1"
    assert request["display_name"] == "nightly-retrain"
    job = request["create_pipeline_job_request"]["pipeline_job"]
    assert job["service_account"] == "graphstore-runner@my-project.iam.gserviceaccount.com"
    assert job["runtime_config"]["parameter_values"]["run_id"] == ""  # each run derives its own
    assert request["create_pipeline_job_request"]["parent"] == "projects/my-project/locations/us-central1"
