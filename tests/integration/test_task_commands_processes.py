"""The compiled tasks' commands exec their Python, so a cancel's SIGTERM reaches it: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_task_commands.py: unit tests start no process."""


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
from tests.unit.test_task_commands import (  # noqa: F401 (fixtures among them)
    _probe_container,
)

pytestmark = [pytest.mark.integration]


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
