"""Replicated mode's configuration and its dataset contract, without Ray: the resource config's
``mode`` key (local and Vertex AI), the CustomJob and the plan of a replicated stage, and
``ReplicatedDataset`` answering every fetch exactly as graph-store storage answers it from the same
shards: the tests that start processes (a command line, a second interpreter, workers). The others
are in tests/unit/test_replicated_mode.py: unit tests start no process."""

from __future__ import annotations

from pathlib import Path
import numpy as np
import pytest
import torch
import yaml
from graphstore.config import ConfigError, EdgeType, load_config_pair, load_resource_config
from graphstore.runtime.ports import PortHold
from graphstore.modes.replicated.dataset import GraphFileService, ReplicatedDataset
from graphstore.planning.sizing import PartitionLoad
from graphstore.dataset import protocol as P
from pipeline import vertex
from pipeline.plan import check, replicated_graph_bytes
from pipeline.vertex_checks import vertex_problems
from tests.replicated_graphs import build
from tests.unit.test_replicated_mode import (  # noqa: F401 (fixtures among them)
    CONFIGS,
    IMAGE,
    REPO,
)

pytestmark = [pytest.mark.integration]


_SHUTDOWN_PROBE = """
import datetime, tempfile, torch.distributed as dist
from graphstore.modes.graph_store.compute import init_compute_process, shutdown_compute_process
from graphstore.config.schema import RuntimeConfig
from graphstore.modes.replicated.cluster import ReplicatedInfo
# the group Ray Train's torch backend builds before it calls the worker function
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
info = ReplicatedInfo(num_compute_nodes=1, num_processes_per_compute=1, runtime=RuntimeConfig(),
                      is_local=True)
init_compute_process(0, info)
shutdown_compute_process()
print("group_after_shutdown", dist.is_initialized())
dist.destroy_process_group()  # Ray Train's shutdown, once every worker returned
"""


def test_the_submitted_pipeline_carries_the_mode_to_every_task(tmp_path):
    """The compiled pipeline is the same in every mode; the run's resource config (a pipeline
    parameter, frozen by the first task, read by every later one) carries ``mode: replicated``."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "submit", "--dry-run", "--task-config",
         str(CONFIGS / "task_vertex.yaml"), "--resource-config",
         str(CONFIGS / "resource_vertex_replicated.yaml"), "--image", IMAGE],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    params = json.loads(out.stdout)["runtime_config"]["parameter_values"]
    frozen = tmp_path / "resource.yaml"
    frozen.write_text(params["resource_config"])
    res = load_resource_config(frozen)
    assert res.trainer.replicated and res.inferencer.replicated and res.num_partitions == 1


def test_replicated_shutdown_leaves_ray_trains_group_to_ray_train():
    """Destroying the gloo group in the worker function, right after its last collective,
    deadlocked a worker in CI (graphstore.modes.graph_store.compute.shutdown_compute_process): the group is Ray
    Train's to destroy after the function returned."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _SHUTDOWN_PROBE], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "group_after_shutdown True" in out.stdout, out.stdout + out.stderr[-2000:]
