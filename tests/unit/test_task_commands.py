"""The compiled tasks' commands exec their Python, so a cancel's SIGTERM reaches it.

Runs a real compiled kfp task command (kfp's own executor, a real shell) the way Vertex AI's
container would, and compares the pid the component sees with the pid of the process started.
"""

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kfp import compiler, dsl

from pipeline.dag import compile_pipeline
from pipeline.task_commands import UnexpectedTaskCommand, exec_command, exec_task_commands


@dsl.component(base_image="python:3.11")
def _report_pid(wait_s: float, pid_file: dsl.OutputPath(str)) -> None:
    import os
    import signal
    import time

    def on_term(signum, frame):  # what pipeline/custom_jobs.py does: clean up, then exit 130
        with open(pid_file + ".term", "w") as fh:
            fh.write("SIGTERM")
        raise SystemExit(130)

    signal.signal(signal.SIGTERM, on_term)
    with open(pid_file, "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(0.05)


@dsl.pipeline(name="pid-probe")
def _probe_pipeline(wait_s: float = 0.0):
    _report_pid(wait_s=wait_s)


def _probe_container(tmp_path: Path) -> dict:
    out = tmp_path / "probe.yaml"
    compiler.Compiler().compile(_probe_pipeline, str(out))
    spec = yaml.safe_load(out.read_text())
    (executor,) = spec["deploymentSpec"]["executors"].values()
    return executor["container"]


def _start(container: dict, tmp_path: Path, wait_s: float) -> tuple[subprocess.Popen, Path]:
    """Start the task as Vertex's container would: its command + args, the executor input JSON."""
    pid_file = tmp_path / "outputs" / "pid_file"
    pid_file.parent.mkdir()
    executor_input = {
        "inputs": {"parameterValues": {"wait_s": wait_s}},
        "outputs": {"parameters": {"pid_file": {"outputFile": str(pid_file)}},
                    "outputFile": str(tmp_path / "outputs" / "executor_output.json")},
    }
    args = [json.dumps(executor_input) if a == "{{$}}" else a for a in container["args"]]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return subprocess.Popen(container["command"] + args, env=env, cwd=tmp_path), pid_file


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        assert proc.poll() is None, f"task exited {proc.returncode} before writing {path.name}"
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {path.name} after {timeout_s} s")


def test_kfps_own_command_runs_python_as_a_grandchild(tmp_path):
    """Why the rewrite exists: unchanged, the component's pid is not the process Vertex signals."""
    proc, pid_file = _start(_probe_container(tmp_path), tmp_path, wait_s=0.0)
    assert proc.wait(timeout=120) == 0
    assert int(pid_file.read_text()) != proc.pid


def test_rewritten_command_is_the_signalled_process_and_handles_sigterm(tmp_path):
    container = _probe_container(tmp_path)
    container["command"] = exec_command(container["command"], "probe")
    proc, pid_file = _start(container, tmp_path, wait_s=60.0)
    try:
        assert int(_wait_for(pid_file, proc)) == proc.pid
        proc.send_signal(signal.SIGTERM)  # what a cancelled Vertex task's first process gets
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "outputs" / "pid_file.term").read_text() == "SIGTERM"


def test_every_task_of_the_compiled_pipeline_is_rewritten(tmp_path):
    out = tmp_path / "pipeline.yaml"
    compile_pipeline(str(out), image="europe-docker.pkg.dev/p/r/graphstore:1")
    executors = yaml.safe_load(out.read_text())["deploymentSpec"]["executors"]
    assert {"exec-freeze", "exec-partition", "exec-train", "exec-infer", "exec-export"} <= set(executors)
    for name, executor in executors.items():
        script = "\n".join(executor["container"]["command"])
        assert 'exec "$0" "$@"' in script, name
        assert "exec python3 -m kfp.dsl.executor_main" in script, name


def test_rewrite_is_idempotent_and_refuses_an_unknown_shape(tmp_path):
    container = _probe_container(tmp_path)
    once = exec_command(container["command"])
    assert exec_command(once) == once
    with pytest.raises(UnexpectedTaskCommand, match="task probe"):
        exec_command(["python3", "-m", "something"], "probe")
    spec = {"deploymentSpec": {"executors": {"exec-x": {"container": copy.deepcopy(container)}}}}
    assert exec_task_commands(spec)["deploymentSpec"]["executors"]["exec-x"]["container"][
        "command"] == once
    with pytest.raises(UnexpectedTaskCommand, match="no executors"):
        exec_task_commands({})
