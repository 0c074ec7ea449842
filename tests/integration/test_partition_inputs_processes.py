"""Partition stage: how input paths are read and how unreadable input is reported: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_partition_inputs.py: unit tests start no process."""

from __future__ import annotations

import gzip
import resource
import subprocess
import sys
from pathlib import Path
from typing import Iterator
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from graphstore.runtime.errors import InputDataError
from graphstore.formats.shards.reader import ShardSet
from tests.unit.test_partition import (
    ITEM_IDS,
    N_ITEMS,
    N_USERS,
    USER_IDS,
    make_raw,
    raw_edges,
    run_partition,
    task_dict,
    write_configs,
)
from tests.unit.test_partition import path
from tests.unit.test_partition_inputs import (  # noqa: F401 (fixtures among them)
    _damage_users,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


def _cli(tmp_path: Path, task: dict, *, address_space_mb: int | None = None
         ) -> subprocess.CompletedProcess:
    """``python -m components.partition`` on ``task``, optionally under an address-space limit
    (a real allocation failure: Arrow's and numpy's MemoryError, DuckDB's OutOfMemoryException)."""
    tp, rp = write_configs(tmp_path, task)

    def limit() -> None:
        size = address_space_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return subprocess.run(
        [sys.executable, "-m", "components.partition", "--task-config", str(tp),
         "--resource-config", str(rp), "--output", str(tmp_path / "shards")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        preexec_fn=limit if address_space_mb else None)


def _long_user_ids(count: int, chars: int) -> Iterator[list[str]]:
    """``count`` distinct user ids of ``chars`` characters each, 50 at a time."""
    for lo in range(0, count, 50):
        yield [f"{i:05d}" + "x" * (chars - 5) for i in range(lo, min(count, lo + 50))]


def test_cli_unreadable_parquet_exits_2_naming_the_file(tmp_path):
    make_raw(tmp_path / "raw")
    _damage_users(tmp_path / "raw")
    done = _cli(tmp_path, task_dict(tmp_path / "raw"))
    assert done.returncode == 2, done.stderr
    assert "users.parquet: cannot read as parquet: Corrupt snappy" in done.stderr
    assert "Traceback" not in done.stderr


def test_out_of_memory_in_duckdb_is_not_blamed_on_the_file(tmp_path):
    """A CSV of 300 ids of 0.9 MB each (a 0.3 MB .csv.gz): DuckDB cannot read it within 128 MB."""
    make_raw(tmp_path / "raw")
    with gzip.open(tmp_path / "raw" / "users.csv.gz", "wt") as fh:
        fh.write("user_id,f_0,f_1,f_2\n")
        for ids in _long_user_ids(300, 900_000):
            fh.writelines(f"{i},1,2,3\n" for i in ids)
    task = task_dict(tmp_path / "raw")
    task["datasetConfig"]["dataSources"]["nodes"][0]["uri"] = "users.csv.gz"
    task["datasetConfig"]["partitionConfig"] = {"memoryLimitMb": 128}
    done = _cli(tmp_path, task)
    assert done.returncode == 1, done.stderr
    assert ("partition ran out of memory while opening " in done.stderr
            and "datasetConfig.partitionConfig.memoryLimitMb is 128 MB" in done.stderr), done.stderr
    assert "cannot read" not in done.stderr and "Traceback" not in done.stderr


def test_memory_error_is_named_as_such(tmp_path):
    """memoryLimitMb far above what the machine has: the in-memory id lookup of item ids that
    span 2**38 values asks for 2 TiB, numpy raises MemoryError (deterministic under a 4 GiB
    address-space limit, whatever the machine's overcommit setting)."""
    make_raw(tmp_path / "raw")
    ids = pa.array([*ITEM_IDS, 1 << 38], pa.int64())
    pq.write_table(pa.table({"item_id": ids, "f_0": np.ones(len(ids)), "f_1": np.ones(len(ids))}),
                   tmp_path / "raw" / "items.parquet")
    task = task_dict(tmp_path / "raw")
    task["datasetConfig"]["partitionConfig"] = {"memoryLimitMb": 1 << 24}
    done = _cli(tmp_path, task, address_space_mb=4096)
    assert done.returncode == 1, done.stderr
    assert ("partition ran out of memory while mapping the ids of 'item' in memory" in done.stderr
            and f"datasetConfig.partitionConfig.memoryLimitMb is {1 << 24} MB" in done.stderr
            ), done.stderr
    assert "Traceback" not in done.stderr
