"""Refusals before anything is sent to Vertex AI (pipeline.vertex_checks), each naming the key or flag
to fix; and the shipped Vertex pair passes, its CustomJob requests parsed by the real
``aiplatform_v1`` messages: the tests that start processes (a command line, a second interpreter,
workers). The others are in tests/unit/test_vertex_checks.py: unit tests start no process."""

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
from tests.unit.test_vertex_checks import (  # noqa: F401 (fixtures among them)
    IMAGE,
    REPO,
    RES,
    TASK,
    TRAINER,
)

pytestmark = [pytest.mark.integration]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_submit_and_schedule_refuse_before_sending(tmp_path: Path):
    """No --dry-run and no credentials: a refusal is exit 2 with one line per problem; had the
    command got as far as sending, it would have failed looking for credentials instead."""
    no_creds = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "none.json"),
                "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}
    bad = ("--set", "exportConfig.warehouse=local", "--set", f"{TRAINER}.compute_pool.gpu_type=TPU_V3",
           "--run-root", "/tmp/runs", "--image", "localhost/graphstore:dev")
    for command in (("submit",), ("schedule", "create", "--cron", "0 3 * * *")):
        proc = _cli(*command, "--task-config", str(TASK), "--resource-config", str(RES), *bad,
                    **no_creds)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[0] == "pipeline: error: 4 config problems:", proc.stderr
        assert [line.split(": ")[1] for line in lines[1:]] == [
            "--image", "--run-root", "exportConfig.warehouse", f"{TRAINER}.compute_pool.gpu_type"]
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    # a node type with neither a node table nor an edge type: refused by the config itself
    proc = _cli("submit", "--task-config", str(TASK), "--resource-config", str(RES), "--image",
                IMAGE, "--set", "graphMetadata.nodeTypes=[user, item, shop]", **no_creds)
    assert proc.returncode == 2 and "graphMetadata.nodeTypes[2]: 'shop' has no node table" in proc.stderr


def test_without_credentials_a_good_submit_stops_with_one_line(tmp_path: Path):
    """The shipped pair passes every check and gets as far as the credentials: one line naming
    the login command (exit 2), no traceback; `schedule list` the same."""
    no_creds = {"GOOGLE_APPLICATION_CREDENTIALS": "", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
                "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}
    for args in (("submit", "--task-config", str(TASK), "--resource-config", str(RES),
                  "--image", IMAGE), ("schedule", "list", "--resource-config", str(RES))):
        proc = _cli(*args, **no_creds)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "pipeline: error: no Google Cloud credentials found: run `gcloud auth "
            "application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a key file), "
            "then rerun; --dry-run needs none (docs/vertex.md)"]
