"""A graph-store stage's Vertex AI CustomJob is never left running behind the pipeline task:
SIGTERM cancels it, failed polls are retried then end in a cancel, a failed create cancels what it
may have created, and the stage record names the job from the moment it exists.

The task is a real process (tests/vertex_stage_driver.py runs pipeline.stages.run_graph_store);
the JobService is a fake on a loopback gRPC port (tests/fake_vertex.py), reached through the real
``aiplatform_v1.JobServiceClient``: the service itself is the only stand-in.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from graphstore.config import load_config_pair
from graphstore.formats.run_paths import RunPaths
from pipeline import stages, vertex
from pipeline.custom_jobs import CustomJobFailed, Polling, run_custom_job
from tests.fake_vertex import FakeJobService, State, client_for

REPO = Path(__file__).resolve().parents[2]
TASK, RES = REPO / "configs" / "task_vertex.yaml", REPO / "configs" / "resource_vertex.yaml"
FAST = {"interval_s": 0.2, "backoff_first_s": 0.1, "backoff_max_s": 0.4, "retries": 3,
        "cancel_wait_s": 5.0, "rpc_timeout_s": 10.0}
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def service():
    fake = FakeJobService()
    fake.address = fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def run_dir(tmp_path: Path) -> str:
    task, res = load_config_pair(TASK, RES)
    run_dir, _, _ = stages.freeze(stages.dump_yaml(task.to_dict()), stages.dump_yaml(res.to_dict()),
                               str(tmp_path / "runs"), "r1")
    return run_dir


def _start(service: FakeJobService, run_dir: str, stage: str, **polling) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.vertex_stage_driver", service.address, run_dir, stage,
         json.dumps({**FAST, **polling})],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the task did not end: {err[-3000:]}")
    return proc.returncode, err


def _record(run_dir: str, stage: str) -> dict:
    return json.loads(Path(RunPaths(run_dir).stage_record(stage)).read_text())


def _wait_for(condition, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sigterm_cancels_the_custom_job_and_waits_for_the_cancel(service, run_dir):
    proc = _start(service, run_dir, "train")
    _wait_for(lambda: ("get", "JOB_STATE_RUNNING") in [(c[0], c[2]) for c in service.calls],
              "the job to be polled while running")
    (name,) = service.jobs
    running = _record(run_dir, "train")  # the record names the job while it runs
    assert (running["status"], running["custom_job"]) == ("running", name)
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert code == 130, err[-3000:]
    assert (f"interrupted by SIGTERM: CustomJob {name}: it was cancelled (state "
            "JOB_STATE_CANCELLED)") in err
    methods = service.methods()
    assert methods[0] == "create" and methods.count("cancel") == 1
    assert methods[methods.index("cancel") + 1:] == ["get"]  # waited for the cancel to register
    assert service.jobs[name].state == State.JOB_STATE_CANCELLED
    record = _record(run_dir, "train")
    assert (record["status"], record["custom_job"], record["display_name"]) == (
        "failed", name, "r1-train")
    assert "it was cancelled" in record["error"]
    # the request: the job name is the display name, on every pool; labels tie it to the run
    (request,) = service.requests
    assert request.display_name == "r1-train"
    assert {k: v for k, v in request.labels.items() if k != "graphstore_launch"} == {
        "team": "graph-ml", "graphstore_run_id": "r1", "graphstore_stage": "train",
        "graphstore_pipeline_job": "graphstore-pipeline-20261129031500"}
    assert len(request.labels["graphstore_launch"]) == 16
    pools = [p for p in request.job_spec.worker_pool_specs if p.replica_count]
    assert len(pools) == 3 and all(
        [(e.name, e.value) for e in p.container_spec.env] == [("GRAPHSTORE_JOB_NAME", "r1-train")]
        for p in pools)


def test_failed_polls_are_retried_with_backoff(service, run_dir):
    service.fail_gets, service.gets_to_end = 3, 1  # 3 failures, within retries=3
    code, err = _finish(_start(service, run_dir, "infer"))
    assert code == 0, err[-3000:]
    assert service.methods() == ["create", "get-failed", "get-failed", "get-failed", "get", "get"]
    assert err.count("poll job=") == 3 and "retry_in_s=0.4" in err  # 0.1, 0.2, 0.4
    record = _record(run_dir, "infer")
    assert (record["status"], record["custom_job"]) == ("ok", next(iter(service.jobs)))


def test_too_many_failed_polls_cancel_the_job_and_fail_naming_it(service, run_dir):
    service.fail_gets = 3  # retries=2: the third failure gives up; the get after the cancel works
    code, err = _finish(_start(service, run_dir, "infer", retries=2))
    (name,) = service.jobs
    assert code == 1, err[-3000:]
    assert (f"CustomJob {name}: 3 polls in a row failed over" in err
            and "so as not to leave it running unwatched, it was cancelled (state "
                "JOB_STATE_CANCELLED)" in err)
    assert service.methods()[-2:] == ["cancel", "get"]
    assert _record(run_dir, "infer")["custom_job"] == name


def test_a_failed_job_fails_the_stage_with_vertex_message(service, run_dir):
    service.gets_to_end, service.end_state = 1, State.JOB_STATE_FAILED
    code, err = _finish(_start(service, run_dir, "infer"))
    (name,) = service.jobs
    assert code == 1
    assert f"CustomJob {name} ended JOB_STATE_FAILED: fake: replica workerpool0-0 exited" in err
    assert "cancel" not in service.methods()


def _job(run_dir: str):
    task, res = stages.load_frozen(run_dir)
    task_uri, res_uri = stages.config_paths(run_dir)
    return vertex.custom_job(task, res, "train", "gcr.io/p/g:1", task_config_uri=task_uri,
                             resource_config_uri=res_uri, run_dir=run_dir, display_name="r1-train",
                             timeout_s=600, labels=vertex.job_labels(res, run_id="r1", stage="train"))


def test_a_failed_create_cancels_the_job_it_may_have_made(service, run_dir):
    service.create_error = grpc.StatusCode.DEADLINE_EXCEEDED  # the job exists nonetheless
    seen: list[str] = []
    with pytest.raises(CustomJobFailed) as exc:
        run_custom_job(client_for(service.address), "projects/my-project/locations/us-central1",
                       _job(run_dir), on_created=seen.append, polling=Polling(**FAST))
    (name,) = service.jobs
    assert not seen and service.jobs[name].state == State.JOB_STATE_CANCELLED
    assert "could not create the CustomJob r1-train" in str(exc.value)
    assert f"it was created anyway, {name}: it was cancelled" in str(exc.value)


def test_a_cancel_that_fails_says_how_to_cancel_by_hand(service, run_dir):
    service.fail_gets, service.cancel_error = 10, grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(CustomJobFailed) as exc:
        run_custom_job(client_for(service.address), "projects/my-project/locations/us-central1",
                       _job(run_dir), on_created=lambda name: None,
                       polling=Polling(**{**FAST, "retries": 1}))
    assert "cancelling it FAILED (PermissionDenied" in str(exc.value)
    assert "gcloud ai custom-jobs cancel 1000 --region=us-central1" in str(exc.value)
    assert service.methods().count("cancel-failed") == 3
