"""The local launcher against real processes (tests/integration/fake_roles.py), no mocks.

Each test writes a task config whose storage and compute commands run fake_roles.py with a
behaviour (see its docstring) and a local resource config (train: 2 storage, 2 compute machines x 1;
infer: 2 storage, 1 compute machine x 1). Every process a fake role starts is recorded under
``<run-dir>/seen/``; :func:`survivors` checks the process table for each of them afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.runtime.errors import UsageError
from pipeline.launch import LaunchFailed, LaunchResult, launch_stage

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().with_name("fake_roles.py")
TRAIN_C, TRAIN_S, INFER_C = 2, 2, 1

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def write_configs(tmp_path: Path, behave: str, *, compute_command: str | None = None,
                  runtime: dict[str, float] | None = None) -> tuple[Path, Path]:
    task = yaml.safe_load((REPO / "configs" / "task_homo.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(REPO / ".data" / "homo")
    if runtime:
        task["graphStoreRuntimeConfig"] = runtime

    def cmd(tag: str) -> str:
        return f"python {FAKE} --tag {tag} --behave {behave}"
    task["trainerConfig"]["command"] = compute_command or cmd("train-compute")
    task["trainerConfig"]["graphStoreStorageConfig"]["command"] = cmd("train-storage")
    task["inferencerConfig"]["command"] = cmd("infer-compute")
    task["inferencerConfig"]["graphStoreStorageConfig"]["command"] = cmd("infer-storage")
    res = {stage: {"local_graph_store_config": {
        "num_storage_processes": TRAIN_S, "num_compute_machines": c,
        "compute_cluster_local_world_size": 1}}
        for stage, c in (("trainer_resource_config", TRAIN_C),
                         ("inferencer_resource_config", INFER_C))}
    task_path, res_path = tmp_path / "task.yaml", tmp_path / "resource.yaml"
    task_path.write_text(yaml.safe_dump(task))
    res_path.write_text(yaml.safe_dump(res))
    return task_path, res_path


def launch(tmp_path: Path, behave: str, *, stage: str = "train", run: str = "run",
           timeout_s: float = 60, failure_grace_s: float = 5, **kw: Any
           ) -> tuple[LaunchResult | None, list[str], Path]:
    task_path, res_path = write_configs(tmp_path, behave, **kw)
    task, res = load_config_pair(task_path, res_path)
    lines: list[str] = []
    result = launch_stage(task, res, stage=stage, run_dir=tmp_path / run,  # type: ignore[arg-type]
                          task_config_path=task_path, resource_config_path=res_path,
                          timeout_s=timeout_s, failure_grace_s=failure_grace_s, echo=lines.append)
    return result, lines, tmp_path / run


def cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "pipeline", "launch", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def seen(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((run_dir / "seen").glob("*.json"))}


def survivors(run_dir: Path) -> list[str]:
    """Every live process that a fake role recorded (itself and what it spawned), or whose
    command line names ``run_dir`` (the launcher appends ``--run-dir``; grandchildren name it)."""
    alive = [f"pid {p.pid}: {' '.join(p.info['cmdline'])}"
             for p in psutil.process_iter(["cmdline", "status"])
             if p.info["status"] != psutil.STATUS_ZOMBIE
             and any(str(run_dir) in arg for arg in p.info["cmdline"] or ())]
    for name, record in seen(run_dir).items():
        for proc in [record, *record["spawned"]]:
            try:
                p = psutil.Process(proc["pid"])
                if (abs(p.create_time() - proc["create_time"]) < 0.05
                        and p.status() != psutil.STATUS_ZOMBIE):
                    alive.append(f"{name}: pid {proc['pid']}")
            except psutil.NoSuchProcess:
                continue
    return alive


def wait_for(predicate: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@pytest.mark.parametrize("stage,num_compute", [("train", TRAIN_C), ("infer", INFER_C)])
def test_every_process_sees_one_consistent_cluster(tmp_path: Path, stage: str,
                                                   num_compute: int) -> None:
    result, lines, run_dir = launch(tmp_path, "all=ok", stage=stage)
    world = num_compute + TRAIN_S
    records = seen(run_dir)
    assert sorted(records) == sorted([f"compute_{i}" for i in range(num_compute)]
                                     + [f"storage_{j}" for j in range(TRAIN_S)])
    topos = {name: r["topology"] for name, r in records.items()}
    assert sorted(t["rank"] for t in topos.values()) == list(range(world))
    for name, t in topos.items():
        role, index = name.split("_")
        assert (t["role"], t["machine_index"]) == (role, int(index))
        assert t["rank"] == int(index) + (num_compute if role == "storage" else 0)
        assert t["world_size"] == world
        assert records[name]["tag"] == f"{stage}-{role}"  # the stage's own command per role
    assert len({(t["master_addr"], t["master_port"]) for t in topos.values()}) == 1
    assert next(iter(topos.values()))["master_addr"] == "127.0.0.1"
    specs = [r["cluster_spec"] for r in records.values()]
    assert len({json.dumps(s["cluster"]) for s in specs}) == 1
    cluster = specs[0]["cluster"]
    assert list(cluster) == (["workerpool0", "workerpool1", "workerpool2"] if num_compute > 1
                             else ["workerpool0", "workerpool2"])  # an empty pool is omitted
    ports = [a.rsplit(":", 1)[1] for pool in cluster.values() for a in pool]
    assert len(set(ports) | {str(topos["compute_0"]["master_port"])}) == world + 1
    for name, r in records.items():
        assert r["argv"][-8:] == ["--task-config", str(tmp_path / "task.yaml"),
                                  "--resource-config", str(tmp_path / "resource.yaml"),
                                  "--stage", stage, "--run-dir", str(run_dir)]
        assert r["executable"] == sys.executable  # leading `python` replaced
        assert r["local_vars"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS", "1")
        assert r["local_vars"]["GLOO_SOCKET_IFNAME"] == r["local_vars"]["TP_SOCKET_IFNAME"] == "lo"
    assert result is not None and set(result.exit_codes.values()) == {0}
    assert [p.spec.label for p in result.processes] == (  # storage started first
        [f"storage {j}" for j in range(TRAIN_S)] + [f"compute {i}/{num_compute}"
                                                    for i in range(num_compute)])
    for p in (outcome.spec for outcome in result.processes):
        log = (run_dir / "logs" / stage / f"{p.role}_{p.role_index}.log").read_text()
        assert p.log_path == run_dir / "logs" / stage / f"{p.role}_{p.role_index}.log"
        assert f"hello from {p.role} {p.role_index}" in log and "stderr of" in log
        hello = f"hello from {p.role} {p.role_index} ({stage}-{p.role}) action=ok"
        assert f"[{p.label}] {hello}" in lines
        assert f"[{p.label}] stderr of {p.role} {p.role_index}" in lines


def test_first_failure_is_named_with_its_log_tail_and_the_rest_killed(tmp_path: Path) -> None:
    task_path, res_path = write_configs(tmp_path, "storage-1=fail:3,all=hang")
    run_dir = tmp_path / "run"
    proc = cli("--task-config", str(task_path), "--resource-config", str(res_path), "--stage",
               "train", "--run-dir", str(run_dir), "--failure-grace-s", "0.5")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert (f"launch: storage 1 (rank 3) failed first with exit code 3; last 20 lines of "
            f"{run_dir}/logs/train/storage_1.log:") in err
    tail = err.split("storage_1.log:\n", 1)[1].splitlines()
    assert tail[:20] == [f"storage 1 line {i}" for i in range(10, 30)]
    assert "Traceback" not in err
    assert "[storage 1] storage 1 line 0" in out
    assert len(seen(run_dir)) == 4 and survivors(run_dir) == []


def test_exceptions_in_the_other_logs_are_named_after_the_first_failure(tmp_path: Path) -> None:
    with pytest.raises(LaunchFailed) as info:
        launch(tmp_path, "storage-0=traceback,storage-1=fail-on-ready:3,all=hang",
               failure_grace_s=0.2)
    message = str(info.value)
    assert message.startswith("storage 1 (rank 3) failed first with exit code 3;"), message
    other = message.split("exceptions and warnings in the other logs (a cause may be among "
                          "them):\n", 1)[1]
    log = f"  {tmp_path}/run/logs/train/storage_0.log: "
    assert other.splitlines() == [
        log + "12:00:00 storage0 WARNING graphstore.dataset.glt_adapter: a batch fetch has waited 30 s",
        log + "ValueError: worker of storage 0 died"]
    assert survivors(tmp_path / "run") == []


def test_processes_that_exit_within_the_grace_keep_their_own_exit_codes(tmp_path: Path) -> None:
    start = time.monotonic()
    first = r"^storage 1 \(rank 3\) failed first with exit code 1;"
    with pytest.raises(LaunchFailed, match=first) as info:
        launch(tmp_path, "storage-1=fail:1,storage-0=ok,compute=follow:4", failure_grace_s=30)
    assert time.monotonic() - start < 20  # ended when all had exited, not after the grace
    assert info.value.result.exit_codes == {"storage 0": 0, "storage 1": 1, "compute 0/2": 4,
                                            "compute 1/2": 4}
    assert survivors(tmp_path / "run") == []


@pytest.mark.parametrize("code,expected", [(2, 2), (3, 1)])
def test_a_usage_error_of_the_first_failure_is_passed_on(tmp_path: Path, code: int,
                                                         expected: int) -> None:
    """A command that exits 2 (a mistake the user must fix) makes the launch exit 2 too; any
    other failure is a runtime failure (1)."""
    with pytest.raises(LaunchFailed, match=f"failed first with exit code {code}") as info:
        launch(tmp_path, f"compute-0=fail:{code},all=hang", failure_grace_s=0.2)
    assert info.value.exit_code == expected
    assert survivors(tmp_path / "run") == []


def test_overall_timeout_kills_a_hanging_run(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(LaunchFailed) as info:
        launch(tmp_path, "all=hang", timeout_s=2)
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert message.startswith(
        "timed out after 2 s (--timeout-s); still running: storage 0 (rank 2), storage 1 (rank 3), "
        "compute 0/2 (rank 0), compute 1/2 (rank 1)")
    assert info.value.exit_code == 1
    assert all(code is not None and code < 0 for code in info.value.result.exit_codes.values())
    assert survivors(tmp_path / "run") == []


def test_grandchildren_that_ignore_sigterm_are_killed(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.launch")
    with pytest.raises(LaunchFailed, match=r"^storage 1 \(rank 3\) failed first with exit code 2"):
        launch(tmp_path, "compute-0=grandchildren,storage-1=fail-on-ready:2,all=hang",
               failure_grace_s=0.2)
    records = seen(tmp_path / "run")
    assert len(records["compute_0"]["spawned"]) == 2  # one in the session, one that left it
    assert "ignored SIGTERM" in caplog.text  # the SIGKILL path ran
    assert survivors(tmp_path / "run") == []


def test_processes_left_behind_by_a_successful_run_are_ended(tmp_path: Path) -> None:
    result, _, run_dir = launch(tmp_path, "compute-1=orphan,all=ok")
    assert result is not None and set(result.exit_codes.values()) == {0}
    assert len(seen(run_dir)["compute_1"]["spawned"]) == 1
    assert survivors(run_dir) == []


def test_a_daemon_that_left_the_session_and_its_parent_is_ended(tmp_path: Path) -> None:
    """Double fork: the grandchild's parent exits within milliseconds, so no tracking sample sees
    it and it is in no session of the run; the run's id in its environment finds it."""
    result, _, run_dir = launch(tmp_path, "compute-1=daemon,all=ok")
    assert result is not None and set(result.exit_codes.values()) == {0}
    records = seen(run_dir)
    (daemon,) = records["compute_1"]["spawned"]
    sessions = {r["pid"] for r in records.values()}  # each process of the run leads a session
    assert daemon["sid"] not in sessions  # in none of them: killpg of the run misses it
    assert daemon["ppid"] not in sessions  # re-parented away
    assert survivors(run_dir) == []


def test_a_stopped_process_fails_the_run_and_gets_to_handle_sigterm(tmp_path: Path) -> None:
    """SIGSTOP for longer than heartbeatTimeoutS is a failure naming the process (else a frozen
    process that serves nobody holds the run until --timeout-s); SIGCONT after SIGTERM lets it
    run its SIGTERM handler instead of waiting for SIGKILL."""
    start = time.monotonic()
    with pytest.raises(LaunchFailed) as info:
        launch(tmp_path, "storage-0=stop-self,all=hang", failure_grace_s=0.5,
               runtime={"heartbeatIntervalS": 0.5, "heartbeatTimeoutS": 2})
    elapsed = time.monotonic() - start
    pid = seen(tmp_path / "run")["storage_0"]["pid"]
    assert re.match(
        rf"storage 0 \(rank 2, pid {pid}\) was stopped \(SIGSTOP or another stop signal\) for "
        r"(\d+\.\d) s, graphStoreRuntimeConfig.heartbeatTimeoutS is 2 s; ended with exit code 0; "
        "last ", str(info.value)), info.value
    assert (tmp_path / "run" / "seen" / "storage_0.term").exists()  # its handler ran
    assert elapsed < 15, elapsed  # not the 60 s --timeout-s, nor SIGTERM's grace
    assert survivors(tmp_path / "run") == []


@pytest.mark.parametrize("sig,name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_signal_to_the_launcher_ends_everything_with_130(tmp_path: Path, sig: int,
                                                         name: str) -> None:
    task_path, res_path = write_configs(tmp_path, "all=hang")
    run_dir = tmp_path / "run"
    proc = cli("--task-config", str(task_path), "--resource-config", str(res_path), "--stage",
               "train", "--run-dir", str(run_dir))
    try:
        wait_for(lambda: len(seen(run_dir)) == 4)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert f"launch: interrupted by {name}; ended 4 running processes of 4" in err
    assert survivors(run_dir) == []


def test_two_launches_at_once_do_not_collide(tmp_path: Path) -> None:
    task_path, res_path = write_configs(tmp_path, "all=serve:1.5")
    runs = [tmp_path / "run_a", tmp_path / "run_b"]
    procs = [cli("--task-config", str(task_path), "--resource-config", str(res_path), "--stage",
                 "train", "--run-dir", str(run)) for run in runs]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "launch: stage train ok: 4 processes (2 storage, 2 compute)" in out
    ports = []
    for run in runs:
        records = seen(run)
        spec = records["compute_0"]["cluster_spec"]["cluster"]
        ports.append({a.rsplit(":", 1)[1] for pool in spec.values() for a in pool}
                     | {str(records["compute_0"]["topology"]["master_port"])})
    assert not ports[0] & ports[1]
    assert seen(runs[0])["compute_0"]["topology"]["job_name"] == "run_a-train"


def test_overrides_reach_the_commands_as_frozen_configs(tmp_path: Path) -> None:
    task_path, res_path = write_configs(tmp_path, "all=ok")
    run_dir = tmp_path / "run"
    proc = cli("--task-config", str(task_path), "--resource-config", str(res_path), "--stage",
               "train", "--run-dir", str(run_dir), "--set",
               "trainer_resource_config.local_graph_store_config.num_compute_machines=3", "--set",
               "trainerConfig.trainerArgs.batch_size=7")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "launch: stage train ok: 5 processes (2 storage, 3 compute)" in out
    records = seen(run_dir)
    frozen = run_dir / "launch" / "train"
    assert {r["task_config"] for r in records.values()} == {str(frozen / "task.yaml")}
    task, res = load_config_pair(frozen / "task.yaml", frozen / "resource.yaml")
    assert task.trainer.trainer_args["batch_size"] == 7 and res.trainer.num_compute_machines == 3
    assert records["compute_2"]["topology"]["rank"] == 2


def test_vertex_resource_config_is_a_usage_error(tmp_path: Path) -> None:
    task_path, _ = write_configs(tmp_path, "all=ok")
    proc = cli("--task-config", str(task_path), "--resource-config",
               str(REPO / "configs" / "resource_vertex.yaml"), "--stage", "train", "--run-dir",
               str(tmp_path / "run"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "use `python -m pipeline submit` for Vertex AI" in err
    assert not (tmp_path / "run").exists()


def test_a_command_that_cannot_start_is_a_usage_error_and_ends_the_others(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=re.escape(
            "trainerConfig.command: cannot start 'no-such-program-xyz' for compute 0/2")):
        launch(tmp_path, "all=hang", compute_command="no-such-program-xyz --flag")
    assert not seen(tmp_path / "run").get("compute_0")
    assert survivors(tmp_path / "run") == []
