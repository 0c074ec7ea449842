"""Shared by the shard-publishing tests (local and GCS): two small graphs to partition in turn,
the partition command line, and a full verification of a published shard set; and the tiny
generated hetero graph with its task config, which several suites partition."""

from __future__ import annotations

from pathlib import Path

import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.formats.shards.reader import ShardSet
from tests.kill_points import REPO

TASK = REPO / "configs" / "task_homo.yaml"
RES = REPO / "configs" / "resource_local.yaml"


def tiny_hetero_task(root: Path, seed: int, resource: str = "resource_local.yaml"):
    """The tiny generated hetero dataset (``seed``) under ``root/data`` and
    configs/task_hetero.yaml pointed at it (written to ``root/task.yaml``): the task config,
    loaded with ``configs/<resource>``."""
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=seed), str(root / "data"))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(root / "data")
    (root / "task.yaml").write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(root / "task.yaml"), str(REPO / "configs" / resource))
    return cfg


def partition_argv(out: str, data: Path) -> list[str]:
    """``python`` arguments that partition ``data`` (a homogeneous dataset) into ``out``."""
    return ["-m", "components.partition", "--task-config", str(TASK), "--resource-config",
            str(RES), "--output", out, "--set", f"datasetConfig.dataRootUri={data}"]


def verified_files(uri: str, workdir: Path | None = None) -> dict[str, str]:
    """Open the shard set at ``uri``, verify every checksum (partitions, id maps), and return
    its manifest's files as {relative path: sha256}."""
    s = ShardSet.open(uri, workdir=str(workdir) if workdir else None)
    for p in range(s.manifest.num_partitions):
        s.load_partition(p, verify=True)
    for nt in s.manifest.node_types:
        s.id_map(nt, verify=True)
    return {rel: entry.sha256 for rel, entry in s.manifest.files.items()}


def old_and_new_graphs(base: Path) -> dict[str, Path]:
    """Two different small homogeneous graphs under ``base``: {"old": folder, "new": folder}."""
    out = {}
    for name, seed in (("old", 0), ("new", 1)):
        out[name] = base / f"data_{name}"
        generate_dataset(DatasetSpec.from_num_edges(3000, kind="homo", seed=seed), str(out[name]))
    return out


def ranks(shards: ShardSet, node_type: str):
    """int64 array: the rank of each dense id of ``node_type``, its raw id's position among the
    type's raw ids in ascending order (strings by code point, which is UTF-8 byte order),
    computed from the id map alone."""
    import numpy as np

    raw = shards.id_map(node_type).column("raw_id").to_pylist()
    order = sorted(range(len(raw)), key=raw.__getitem__)  # dense ids by ascending raw id
    out = np.empty(len(raw), dtype=np.int64)
    out[order] = np.arange(len(raw))
    return out
