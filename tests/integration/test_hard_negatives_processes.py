"""Hard negatives when supervision gives them (issue 13 item 3), piece by piece: the config key and
its refusals, the partitioner (labels only, placed by source, on both paths), storage (split with
their anchors' positives, served with each split's anchors), the draw rules of a batch, the ABLP
loader's input (what GLT's producers call), the loss mask, and the generator's dislikes. The whole
path through the launcher: tests/integration/test_hard_negatives.py: the tests that start processes
(a command line, a second interpreter, workers). The others are in
tests/unit/test_hard_negatives.py: unit tests start no process."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from graphstore.config import ConfigError, EdgeType, load_config_pair, load_task_config
from graphstore.config.default_args import TrainerArgs
from graphstore.dataset.metadata import DatasetMetadata
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import UsageError
from graphstore.dataset.hard_negatives import NEGATIVE, POSITIVE, AnchorNegatives, batch_rows
from graphstore.formats.shards.reader import ShardSet
from graphstore.training.losses import (
    accidental_hit_mask, candidate_scores, hard_negative_mask, retrieval_loss,
)
from tests.unit.test_partition import SQL_ONLY, make_raw, run_partition, task_dict, write_configs
from tests.unit.test_hard_negatives import (  # noqa: F401 (fixtures among them)
    KEY,
    NEG,
    SUP,
    with_dislikes,
)

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


def test_a_good_entry_loads_and_replicated_training_refuses_it_in_one_line_exit_2(tmp_path):
    make_raw(tmp_path / "raw")
    task = task_dict(tmp_path / "raw")
    with_dislikes(task, tmp_path / "raw")
    tp, rp = write_configs(tmp_path, task)
    cfg, _ = load_config_pair(str(tp), str(rp))
    assert cfg.hard_negative_edge_types == {SUP: NEG}
    assert load_task_config(str(tp)).to_dict()["taskMetadata"] == task["taskMetadata"]
    rp.write_text((REPO / "configs" / "resource_local_replicated.yaml").read_text())
    proc = subprocess.run([sys.executable, "-m", "pipeline", "validate", "--task-config", str(tp),
                           "--resource-config", str(rp)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stderr.splitlines() if KEY in line]
    assert proc.returncode == 2 and len(lines) == 1 and "replicated mode" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
