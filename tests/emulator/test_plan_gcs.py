"""Sizing from gs:// raw tables (issue 12 item 7) with the real client on the GCS emulator: row
counts come from the Parquet footers by ranged reads, and `pipeline submit --dry-run` refuses
(exit 2, nothing printed as sent) a storage pool that cannot hold its partition, while the same
tables on a pool that holds them go through."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphstore.io import uris
from graphstore.io.table_rows import count_rows
from tests.integration.test_plan_processes import IMAGE, write_huge_tables
from tests.unit.test_plan import IPOOL, POOL, VERTEX_RES, VERTEX_TASK

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]


def _submit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "submit", "--task-config",
                           str(VERTEX_TASK), "--resource-config", str(VERTEX_RES), "--image", IMAGE,
                           "--dry-run", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=240)


def test_submit_sizes_gcs_tables_from_their_footers_and_refuses_what_cannot_fit(bucket, tmp_path):
    local = tmp_path / "raw"
    local.mkdir()
    write_huge_tables(local)
    root = f"gs://{bucket}/raw"
    uris.upload_tree(str(local), root)
    assert count_rows(f"{root}/user_item.parquet", "parquet") == 600_000_000
    with pytest.raises(Exception, match="not found"):
        count_rows(f"{root}/missing.parquet", "parquet")
    data = f"datasetConfig.dataRootUri={root}"
    small = (f"{POOL}.machine_type=n1-highmem-2", f"{IPOOL}.machine_type=n1-highmem-2")
    refused = _submit("--set", data, *(a for s in small for a in ("--set", s)))
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    problems = refused.stderr.strip().splitlines()
    assert problems[0] == "pipeline: error: 2 config problems:", problems
    assert all(".machine_type: n1-highmem-2 has 13.0 GiB of memory but partition" in p
               for p in problems[1:])
    fits = _submit("--set", data)  # n2-highmem-32 (256 GiB) holds the same partitions
    assert fits.returncode == 0, fits.stderr
    assert "submit: storage sizing from the raw tables' row counts (610,000,000 edges" in fits.stderr
    assert json.loads(fits.stdout)["display_name"] == "graphstore-pipeline"
