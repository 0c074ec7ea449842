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
