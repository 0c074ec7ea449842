"""The dataset contract: ``EdgeType`` parsing at the edge, ``DatasetMetadata`` and its invariants, the
storage protocol's typed requests and replies, and a colocated ``DistDataset`` answering GiGL's
calls in-process on real tiny shards (homogeneous: GiGL's homogeneous shapes): the tests that start
processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_dataset_contract.py: unit tests start no process."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
import torch
import yaml
from graphstore.config import EdgeType, load_config_pair
from graphstore.dataset.metadata import DatasetMetadata, FeatureInfo, as_edge_type
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset import protocol as P
from tests.unit.test_dataset_contract import (  # noqa: F401 (fixtures among them)
    REPO,
)

pytestmark = [pytest.mark.integration]


def test_the_compute_side_does_not_import_the_storage_server():
    code = ("import sys, graphstore.modes.graph_store.remote_dataset, graphstore.dataset.loaders, graphstore.modes.graph_store.compute, "
            "graphstore.modes.colocated.dataset, graphstore.training.trainer, graphstore.inference.inferencer\n"
            "print([m for m in sys.modules if m == 'graphstore.modes.graph_store.server'])")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "[]"
