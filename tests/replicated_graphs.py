"""Shared by the replicated-mode tests: small real shard sets, their graph files, and the raw
edges read back through the shard reader (the reference every check compares against)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from graphstore.config import load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.modes.replicated import write_features_file, write_graph_file
from graphstore.formats.shards.reader import ShardSet
from graphstore.dataset.splitter import SPLIT_CODE

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Built:
    shards: str
    graph: str
    features: str
    storage_args: object
    direction: str


def build(tmp: Path, kind: str = "hetero", *, direction: str = "in",
          splitter: str | None = "graphstore.DistNodeAnchorLinkSplitter", seed: int = 4,
          preset: str = "tiny", batch_rows: int = 97) -> Built:
    """Generate a dataset, partition it in 2, write its graph and features files (small
    ``batch_rows`` so the writer's streaming crosses many batch boundaries)."""
    generate_dataset(DatasetSpec.from_preset(preset, kind=kind, seed=seed), str(tmp / "data"))
    task = yaml.safe_load((REPO / "configs" / f"task_{kind}.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp / "data")
    for section in ("trainerConfig", "inferencerConfig"):
        args = task[section]["graphStoreStorageConfig"]["storageArgs"]
        args["sample_edge_direction"] = direction
        if section == "trainerConfig":
            if splitter is None:
                args.pop("splitter_cls_path", None)
                args.pop("splitter_kwargs", None)
            else:
                args["splitter_cls_path"] = splitter
                args["splitter_kwargs"]["sampling_direction"] = direction
    (tmp / "task.yaml").write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(tmp / "task.yaml"), str(REPO / "configs" / "resource_local.yaml"))
    partition_graph(cfg, num_partitions=2, output_uri=str(tmp / "shards"))
    args = cfg.trainer.storage.storage_args
    write_graph_file(str(tmp / "shards"), str(tmp / "graph.bin"), storage_args=args,
                     batch_rows=batch_rows)
    write_features_file(str(tmp / "shards"), str(tmp / "features.bin"), batch_rows=batch_rows)
    return Built(str(tmp / "shards"), str(tmp / "graph.bin"), str(tmp / "features.bin"), args,
                 direction)


def raw_edges(shards_uri: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{edge type name: (src, dst, eids)}`` of every partition, through the shard reader."""
    s = ShardSet.open(shards_uri)
    out: dict[str, list] = {name: [[], [], []] for name in s.manifest.edge_types}
    for p in range(s.manifest.num_partitions):
        data = s.load_partition(p)
        for name, e in data.edges.items():
            for i, a in enumerate((e.src, e.dst, e.eids)):
                out[name][i].append(a)
    return {k: tuple(np.concatenate(v) for v in vs) for k, vs in out.items()}


def raw_labels(shards_uri: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{supervision type: (anchor, label)}`` as storage reads them, every partition."""
    s = ShardSet.open(shards_uri)
    out: dict[str, list] = {}
    for p in range(s.manifest.num_partitions):
        for name, lab in s.load_partition(p).labels.items():
            out.setdefault(name, [[], []])
            out[name][0].append(lab.src)
            out[name][1].append(lab.dst)
    return {k: (np.concatenate(a), np.concatenate(b)) for k, (a, b) in out.items()}


def held_out_mask(built: Built, name: str, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Edges of ``name`` whose supervision pair is in val/test under the built splitter (the
    edges graph-store storage removes), computed from the splitter's own functions over the
    nodes' ranks (graphstore.dataset.splitter.SplitRules: splits do not depend on the partition count)."""
    from tests.shard_sets import ranks

    from graphstore.config import EdgeType
    from graphstore.dataset.partition_graph import load_splitter

    s = ShardSet.open(built.shards)
    info = s.manifest.edge_types[name]
    splitter = load_splitter(built.storage_args)
    if splitter is None:
        return np.zeros(len(src), dtype=bool)
    if info.is_supervision:
        base, anchors, labels = name, src, dst
    elif info.reverse_of and s.manifest.edge_types[info.reverse_of].is_supervision:
        base, anchors, labels = info.reverse_of, dst, src
    else:
        return np.zeros(len(src), dtype=bool)
    et = EdgeType.parse(base)
    anchors = ranks(s, et.src_node_type)[anchors]
    if splitter.per_edge:
        labels = ranks(s, et.dst_node_type)[labels]
        codes = splitter.assign_edges(base, anchors, labels, s.manifest.edge_types[base].count)
    else:
        codes = splitter.assign(et.src_node_type, anchors, s.manifest.node_types[et.src_node_type].count)
    return codes != SPLIT_CODE["train"]
