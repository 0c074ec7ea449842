"""Replicated mode through the default trainer and inferencer, on the local launcher: two
"machines" on 127.0.0.1 form one Ray cluster (a head node and a joining node, ``ray start`` on
free ports) and Ray Train runs one DDP worker on each; one machine runs an embedded Ray. Every
launch's exit codes are checked, every run has a timeout, and no Ray process of a run is left
(the launcher would end and report one)."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import UsageError
from graphstore.partition import partition_graph
from graphstore.modes.replicated.run_files import write_run_graph_files
from pipeline.launch import LaunchFailed, launch_stage

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]
TRAINER_ARGS = {"num_neighbors": [5, 3], "batch_size": 32, "num_random_negatives": 32,
                "max_steps": 6, "val_every_steps": 3, "log_every_steps": 2, "eval_candidates": 50,
                "hidden_dim": 16, "out_dim": 16, "baselines": ["popularity"]}


def _run_folder(tmp: Path, machines: int, procs: int, **trainer_args) -> dict:
    """A hand-made run folder: tiny hetero data, its shards and graph files, the configs."""
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=5), str(tmp / "data"))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp / "data")
    task["trainerConfig"]["trainerArgs"] = {**TRAINER_ARGS, **trainer_args}
    # a worker still running at sessionTimeoutS prints its threads' stacks (workers.py), well
    # before Ray Train's health check (600 s) would end a hung worker
    task["graphStoreRuntimeConfig"] = {"clusterInitTimeoutS": 240, "sessionTimeoutS": 300}
    res = yaml.safe_load((REPO / "configs" / "resource_local_replicated.yaml").read_text())
    for key in ("trainer_resource_config", "inferencer_resource_config"):
        res[key]["local_graph_store_config"].update(num_compute_machines=machines,
                                                    compute_cluster_local_world_size=procs)
    tp, rp = tmp / "task.yaml", tmp / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text(yaml.safe_dump(res))
    cfg, resources = load_config_pair(str(tp), str(rp))
    run = tmp / "run"
    partition_graph(cfg, num_partitions=2, output_uri=str(run / "shards"))
    write_run_graph_files(cfg, str(run))
    return {"task": cfg, "res": resources, "tp": tp, "rp": rp, "run": run}


def _launch(f: dict, stage: str, lines: list[str]):
    try:
        return launch_stage(f["task"], f["res"], stage=stage, run_dir=f["run"],
                            task_config_path=f["tp"], resource_config_path=f["rp"], timeout_s=900,
                            failure_grace_s=60, echo=lines.append)
    except LaunchFailed as exc:  # a hung worker's stacks (workers.py) are in the leader's log
        dumps = [line for line in lines
                 if any(k in line for k in ("Timeout (", "hread 0x", '  File "'))]
        if dumps:
            exc.args = (f"{exc.args[0]}\nstacks the workers printed:\n" + "\n".join(dumps[-80:]),)
        raise


def _our_ray_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("graphstore-ray-*")}


@pytest.mark.timeout(1500)
def test_two_ray_nodes_on_loopback_train_and_embed_every_node(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pipeline.launch")
    f = _run_folder(tmp_path, machines=2, procs=1)
    before = _our_ray_dirs()
    lines: list[str] = []
    train = _launch(f, "train", lines)
    assert list(train.exit_codes.values()) == [0, 0]
    # one worker per machine, on two different Ray nodes
    workers = {m.group(1): m.group(2) for m in (
        re.search(r"ray worker rank=(\d) machine=\d local_rank=0 ray_node=(\w+)", line)
        for line in lines) if m}
    assert set(workers) == {"0", "1"} and workers["0"] != workers["1"], lines[-40:]
    metrics = json.loads((f["run"] / "checkpoint" / "metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["test"]["model"]["mrr"] > 0
    assert (f["run"] / "checkpoint" / "model.pt").exists()
    infer = _launch(f, "infer", lines)
    assert list(infer.exit_codes.values()) == [0, 0]
    for nt in ("user", "item"):
        folder = f["run"] / "embeddings" / nt
        marker = json.loads((folder / "_SUCCESS").read_text())
        ids = [i for name in marker["files"]
               for i in pq.read_table(folder / name).column("int_id").to_pylist()]
        assert sorted(ids) == list(range(marker["count"])) and marker["dim"] == 16
        assert marker["count"] == {"user": 200, "item": 100}[nt]  # the tiny preset's counts
    assert not [r for r in caplog.records if "left behind" in r.getMessage()]
    assert _our_ray_dirs() <= before  # every node's folder removed: nothing of ours left


@pytest.mark.timeout(900)
def test_a_users_mistake_in_a_ray_worker_exits_2_naming_the_worker(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="pipeline.launch")
    f = _run_folder(tmp_path, machines=1, procs=2, batch_size=100_000)
    with pytest.raises(LaunchFailed) as exc:
        _launch(f, "train", [])
    assert exc.value.exit_code == 2
    assert re.search(r"compute process rank \d: trainerConfig.trainerArgs.batch_size 100000",
                     str(exc.value)), str(exc.value)[-2000:]
    assert list(exc.value.result.exit_codes.values()) == [2]
    assert not [r for r in caplog.records if "left behind" in r.getMessage()]


def test_a_run_without_a_graph_file_is_one_line_exit_2(tmp_path):
    f = _run_folder(tmp_path, machines=1, procs=1)
    (f["run"] / "graph" / "graph.bin").unlink()
    with pytest.raises(LaunchFailed) as exc:
        _launch(f, "train", [])
    assert exc.value.exit_code == UsageError.exit_code
    assert f"no graph file at {f['run'] / 'graph' / 'graph.bin'}" in str(exc.value)
