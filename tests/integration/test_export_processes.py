"""Export to the local warehouse: raw-id join, atomic replace, history, idempotency, faults, top-k:
the tests that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_export.py: unit tests start no process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
import duckdb
import numpy as np
import pytest
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export import export_run
from graphstore.export.local_warehouse import LocalWarehouse
from graphstore.export.names import table_name
from tests.embedding_runs import DIM, REPO, build_graph, make_run
from tests.unit.test_export import (  # noqa: F401 (fixtures among them)
    graph,
)

pytestmark = [pytest.mark.integration]


def test_cli_prints_rows_and_exits_1_without_embeddings(graph, tmp_path):
    run = make_run(graph, tmp_path, "r1")
    tp = graph["root"] / "task.yaml"
    ok = subprocess.run([sys.executable, "-m", "components.export", "--task-config", str(tp),
                         "--run-dir", str(run), "--node-type", "item"], cwd=REPO,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert f"export: item: {len(graph['raw']['item'])} rows -> embeddings_item in " in ok.stdout
    (run / "embeddings" / "user" / "_SUCCESS").unlink()
    bad = subprocess.run([sys.executable, "-m", "components.export", "--task-config", str(tp),
                          "--run-dir", str(run), "--node-type", "user"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "no complete embeddings for node type 'user'" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "components.export", "--task-config", str(tp)],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2
