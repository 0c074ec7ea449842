"""Sizing before spending (issue 12 item 7): graphstore.planning.sizing's counts, pipeline.plan's check, and
the `pipeline plan` / `pipeline submit` commands, on real partitioned shard sets and real Parquet
tables (a "huge" table is real too: billions of null rows, which only its footer counts): the tests
that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_plan.py: unit tests start no process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.planning.sizing import (
    GIB, MEASURED, MIB, PartitionLoad, TableCounts, disk_needed_bytes, loads_from_manifest,
    loads_from_tables, memory_needed_bytes,
)
from graphstore.io.table_rows import count_rows
from pipeline.plan import check
from tests.unit.test_plan import (  # noqa: F401 (fixtures among them)
    POOL,
    REPO,
    VERTEX_RES,
    VERTEX_TASK,
    tiny,
)

pytestmark = [pytest.mark.integration]


def _null_table(path: Path, columns: dict[str, pa.DataType], rows: int) -> None:
    """A real Parquet file of ``rows`` all-null rows (row groups of 50 M: tiny on disk)."""
    schema = pa.schema(columns)
    with pq.ParquetWriter(path, schema) as writer:
        chunk = pa.table({k: pa.nulls(min(rows, 50_000_000), t) for k, t in columns.items()},
                         schema=schema)
        left = rows
        while left > 0:
            writer.write_table(chunk.slice(0, min(left, chunk.num_rows)))
            left -= chunk.num_rows


def write_huge_tables(data: Path) -> None:
    feats = {f"f_{i}": pa.float32() for i in range(16)}
    _null_table(data / "users.parquet", {"user_id": pa.string(), **feats}, 10_000_000)
    _null_table(data / "items.parquet", {"item_id": pa.int64(), **feats}, 5_000_000)
    _null_table(data / "user_item.parquet", {"user_id": pa.string(), "item_id": pa.int64(),
                                            "weight": pa.float32()}, 600_000_000)
    _null_table(data / "item_item.parquet", {"src_item_id": pa.int64(),
                                            "dst_item_id": pa.int64()}, 10_000_000)


IMAGE = "europe-docker.pkg.dev/p/r/graphstore:1"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def huge_tables(tmp_path_factory) -> Path:
    """The hetero tables with 600 M user->item rows: 4 partitions of ~305 M stored edges, which
    no n1-highmem-2 (13 GiB) holds and an n2-highmem-32 does."""
    data = tmp_path_factory.mktemp("huge")
    write_huge_tables(data)
    return data


def test_plan_command_states_the_model_and_refuses_a_pool_that_cannot_hold_it(huge_tables, tiny):
    proc = _cli("plan", "--task-config", str(VERTEX_TASK), "--resource-config", str(VERTEX_RES),
                "--set", f"datasetConfig.dataRootUri={huge_tables}",
                "--set", f"{POOL}.machine_type=n1-highmem-2")
    assert proc.returncode == 2, proc.stderr
    out = proc.stdout
    assert "plan: sizes from the raw tables' row counts (610,000,000 edges; estimated" in out
    assert f"{MEASURED.bytes_per_edge:.1f} B/edge" in out and MEASURED.measured in out
    assert "train: storage pool n1-highmem-2 (13 GiB, pd-ssd 200 GB) x4: DOES NOT FIT" in out
    assert "infer: storage pool n2-highmem-32 (256 GiB" in out
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, lines
    assert lines[0].startswith(f"{VERTEX_RES}: {POOL}.machine_type: n1-highmem-2 has 13.0 GiB")
    assert "Traceback" not in proc.stderr
    fits = _cli("plan", "--task-config", str(tiny["task"]), "--resource-config",
                str(REPO / "configs" / "resource_local.yaml"), "--shards", tiny["shards"])
    assert fits.returncode == 0, fits.stderr
    assert "(exact counts)" in fits.stdout and fits.stdout.strip().endswith("plan: fits")


def test_submit_refuses_what_plan_refuses_and_names_the_key(tiny):
    base = ("submit", "--task-config", str(VERTEX_TASK), "--resource-config", str(VERTEX_RES),
            "--image", IMAGE, "--set", "datasetConfig.dataRootUri=gs://my-bucket/raw/{run_date}",
            "--dry-run")
    refused = _cli(*base, "--shards", tiny["shards"], "--set",
                   "partition_resource_config.memory_gb=1")
    assert refused.returncode == 2, refused.stderr
    assert "partition_resource_config.memory_gb: 1 GB cannot hold" in refused.stderr
    assert "num_replicas: the shard set has 2 partitions" in refused.stderr
    assert refused.stdout == ""  # nothing printed as if it were sent
    unknown = _cli(*base)  # raw tables resolved per run: said, not refused
    assert unknown.returncode == 0, unknown.stderr
    assert "submit: storage sizing not checked: gs://my-bucket/raw/{run_date}" in unknown.stderr
