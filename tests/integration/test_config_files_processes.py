"""Config files that are broken or hostile: not UTF-8, too large, YAML alias bombs, recursive or deep
values, huge values. Each gives one short problem line (exit 2 from the CLI), fast, never a
traceback (graphstore.config._yaml, graphstore.config._raw, graphstore.runtime.errors.show): the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_config_files.py: unit tests start no process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
import pytest
import yaml
from graphstore.config import ConfigError, load_config_pair, load_task_config
from tests.unit.test_config import BASE_RES, BASE_TASK, fresh, write
from tests.unit.test_config_files import (  # noqa: F401 (fixtures among them)
    LINE_CHARS,
)

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


def _pair(tmp_path: Path, task_bytes: bytes) -> tuple[Path, Path]:
    task = tmp_path / "task.yaml"
    task.write_bytes(task_bytes)
    return task, write(tmp_path / "res.yaml", fresh(BASE_RES))


def _validate(task: Path, res: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline", "validate", "--task-config", str(task),
                           "--resource-config", str(res), *extra], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_config_file_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    text = yaml.safe_dump(fresh(BASE_TASK), sort_keys=False)
    raw = text.replace("users.parquet", "us\u00e9rs.parquet").encode("latin-1")
    offset = raw.index(b"\xe9")
    task, res = _pair(tmp_path, raw)
    out = _validate(task, res)
    assert out.returncode == 2, out.stderr
    line = raw.count(b"\n", 0, offset) + 1
    assert out.stderr.strip() == (f"pipeline: error: {task}:{line}: is not UTF-8 text: byte 0xe9 at "
                                  f"byte offset {offset} cannot be decoded; save the file as UTF-8")


def test_huge_value_and_key_give_short_error_lines(tmp_path: Path) -> None:
    """A 200 KB string in a config key once made a 200 KB one-line error."""
    huge = "x" * 200_000

    def mutate(d: dict) -> None:
        d["exportConfig"] = {"modelVersion": "bad version " + huge, huge: 1}
        d["graphMetadata"]["edgeTypes"][1]["dstNodeType"] = "i" + huge
    data = fresh(BASE_TASK)
    mutate(data)
    task, res = write(tmp_path / "task.yaml", data), write(tmp_path / "res.yaml", fresh(BASE_RES))
    arg = huge[:100_000]  # one command-line argument may have at most 128 KiB
    out = _validate(task, res, "--set", f"trainerConfig.trainerArgs.lr={arg}", "--set", f"{arg}=1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) >= 5, out.stderr
    assert max(map(len, lines)) <= LINE_CHARS, max(lines, key=len)[:500]
    assert "... (200012 chars)" in out.stderr  # a cut value says how long it was
