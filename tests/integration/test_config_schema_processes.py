"""The files generated from the config models (docs/configs.md, docs/schema/*.schema.json) are
current, and the JSON Schema accepts what the loader accepts (configs/*.yaml, the seed's string
forms) and refuses what it refuses (unknown keys, wrong types, bad names): the tests that start
processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_config_schema.py: unit tests start no process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
import pytest
import yaml
from graphstore.config import docs
from tests.unit.test_config import BASE_RES, BASE_TASK, VERTEX_RES, fresh
from tests.unit.test_config_schema import (  # noqa: F401 (fixtures among them)
    REPO,
    _schema,
)

pytestmark = [pytest.mark.integration]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", "schema", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_schema_command_prints_or_writes_each_kind(tmp_path: Path) -> None:
    out = _cli("--kind", "resource")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == _schema("resource")
    target = tmp_path / "sub" / "task.json"
    assert _cli("--output", str(target)).returncode == 0
    assert json.loads(target.read_text()) == _schema("task")
    markdown = _cli("--markdown")
    assert markdown.stdout == (REPO / "docs" / "configs.md").read_text()


def test_schema_command_user_errors_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = _cli("--output", str(tmp_path / "file" / "x.json"))
    assert out.returncode == 2 and out.stderr.startswith("pipeline: error: cannot write ")
    assert len(out.stderr.splitlines()) == 1
    assert _cli("--kind", "other").returncode == 2
    assert _cli("--update-docs", "--output", "x").returncode == 2
