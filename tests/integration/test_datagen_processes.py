"""Unit tests for graphstore.tools.datagen: schema, counts, ids, determinism, planted structure, CLI
contract: the tests that start processes (a command line, a second interpreter, workers). The
others are in tests/unit/test_datagen.py: unit tests start no process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from graphstore.tools import datagen
from graphstore.tools.datagen import SIZE_PRESETS, DatasetSpec, generate_dataset
from graphstore.runtime.errors import UsageError

pytestmark = [pytest.mark.integration]


REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "graphstore.tools.datagen", *args], capture_output=True, text=True,
                          env=env, cwd=REPO_ROOT, timeout=60)


def test_cli_refuses_to_overwrite_without_flag(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    first = run_cli("--output", str(out), "--size", "tiny", "--seed", "5")
    assert first.returncode == 0, first.stderr
    assert "user__buys__item=1600" in first.stdout and "seconds=" in first.stdout
    assert "rows_per_s=" in first.stderr
    before = (out / "user_item.parquet").read_bytes()
    refused = run_cli("--output", str(out), "--size", "tiny", "--seed", "6")
    assert refused.returncode == 2 and "already exists" in refused.stderr and "--overwrite" in refused.stderr
    assert (out / "user_item.parquet").read_bytes() == before
    replaced = run_cli("--output", str(out), "--size", "tiny", "--seed", "6", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert (out / "user_item.parquet").read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


@pytest.mark.parametrize("args", [["--num-users", "0"], ["--num-edges", "-5"], ["--kind", "homo", "--num-users", "9"]])
def test_cli_invalid_sizes_exit_2(tmp_path: Path, args: list[str]) -> None:
    result = run_cli("--output", str(tmp_path / "ds"), "--size", "tiny", *args)
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "ds").exists()
