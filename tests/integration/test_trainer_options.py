"""The default trainer's options through the launcher, with real processes: an id-embedding type
over the size limit is one line, exit 2. (The options that train, checkpoint the best validation's
weights and infer run in tests/integration/test_training.py's graph-store run.)"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet
from tests.integration.test_training import REPO, TRAINER_ARGS

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(300)
def test_an_id_embedding_type_over_the_limit_is_one_line_exit_2(tmp_path):
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=1), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    task["trainerConfig"]["trainerArgs"] = {**TRAINER_ARGS, "max_steps": 2, "batch_size": 4,
                                            "num_random_negatives": 4, "baselines": [],
                                            "id_embeddings": ["item", "user"],
                                            "id_embedding_max_nodes": 10}
    tp, rp, run = tmp_path / "task.yaml", tmp_path / "res.yaml", tmp_path / "run"
    tp.write_text(yaml.safe_dump(task))
    one = {"local_graph_store_config": {"num_storage_processes": 0, "num_compute_machines": 1,
                                        "compute_cluster_local_world_size": 1}}
    rp.write_text(yaml.safe_dump({"trainer_resource_config": one, "inferencer_resource_config": one}))
    cfg, _ = load_config_pair(str(tp), str(rp))
    partition_graph(cfg, num_partitions=1, output_uri=str(run / "shards"))
    count = ShardSet.open(str(run / "shards")).manifest.node_types["item"].count
    assert count > 10
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", "train", "--run-dir", str(run), "--timeout-s", "200"],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    lines = [line for line in out.splitlines()
             if f"node type 'item' has {count} nodes" in line and "id_embedding_max_nodes=10" in line]
    assert lines, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    assert not (run / "checkpoint" / "model.pt").exists()
