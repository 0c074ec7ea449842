"""Partition stage: raw tables -> shard set, read back through the shard reader: the tests that start
processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_partition.py: unit tests start no process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import yaml
from graphstore.config import ConfigError, load_config_pair
from graphstore.runtime.errors import InputDataError, UsageError
from graphstore.partition import PartitionTuning, edge_stream, partition_graph
from graphstore.formats.shards.format import MANIFEST
from graphstore.formats.shards.reader import ShardFormatError, ShardSet, current_version_uri
from tests.unit.test_partition import (  # noqa: F401 (fixtures among them)
    make_raw,
    task_dict,
    write_configs,
)

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


def _cli(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    tp, rp = tmp_path / "task.yaml", tmp_path / "resources.yaml"
    return subprocess.run(
        [sys.executable, "-m", "components.partition", "--task-config", str(tp),
         "--resource-config", str(rp), "--output", str(tmp_path / "shards"), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_success_summary_and_exit_codes(tmp_path):
    make_raw(tmp_path / "raw")
    write_configs(tmp_path, task_dict(tmp_path / "raw"))
    ok = _cli(tmp_path)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout.strip().splitlines()[-1])
    assert summary["partitions"] == 2 and summary["edges"]["user__buys__item"] == 200
    assert "rows_per_s=" in ok.stderr  # progress lines
    (tmp_path / "raw" / "users.parquet").unlink()
    bad = _cli(tmp_path)
    assert bad.returncode == 2
    assert "input file not found" in bad.stderr and "Traceback" not in bad.stderr
    unknown = _cli(tmp_path, "--set", "datasetConfig.partitionConfig.danglingEdgez=drop")
    assert unknown.returncode == 2 and "danglingEdgez" in unknown.stderr
