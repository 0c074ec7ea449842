"""Ray Data over a graph file, with an embedded Ray (``ray.init(num_cpus=2)``, no fixed ports,
no dashboard): every seed sampled exactly once across the read tasks, features of the sampled
nodes, link batches in the trainer's shape, ``collate_to_pyg`` without copies; Ray is shut down
at the end and no Ray process is left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
import torch

from graphstore.config import EdgeType
from graphstore.runtime.errors import UsageError
from graphstore.modes.replicated import (
    FeatureFile, GraphFile, collate_to_pyg, create_sampling_dataset,
)
from tests.replicated_graphs import build

REPO = Path(__file__).resolve().parents[2]
BUYS = EdgeType(src_node_type="user", relation="buys", dst_node_type="item")


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    # processes of ours that are not Ray's (a session-scoped emulator of another test module)
    earlier = {p.pid for p in psutil.Process().children(recursive=True)}
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    session = ctx.address_info["session_dir"].rstrip("/").rsplit("/", 1)[-1]
    yield ray
    started = [p for p in psutil.Process().children(recursive=True)  # workers included, as of now
               if p.pid not in earlier]
    assert started, "ray.init started no process"
    ray.shutdown()

    def left() -> list[str]:
        found = {p.pid: p for p in started if p.is_running() and p.status() != "zombie"}
        for p in psutil.process_iter(["pid", "cmdline"]):  # anything of this Ray session
            if session in " ".join(p.info["cmdline"] or []) and p.status() != "zombie":
                found[p.pid] = p
        return [f"{pid} {p.name()}" for pid, p in found.items()]

    deadline = time.monotonic() + 60
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left(), f"Ray processes left after ray.shutdown(): {left()}"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return {kind: build(tmp_path_factory.mktemp(kind), kind=kind) for kind in ("hetero", "homo")}


def _processes_carrying(marker: str, wait_s: float) -> list[str]:
    """Live processes whose environment holds ``marker``, after waiting up to ``wait_s`` for
    them to end (Ray's agents notice their raylet is gone within about 30 s)."""
    needle = marker.encode()
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                env = Path(f"/proc/{proc.pid}/environ").read_bytes()
            except OSError:
                continue
            if needle in env and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(f"pid {proc.pid}: {' '.join(proc.info['cmdline'] or [])[:120]}")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(1)


def _one_row_batches(ds):
    return list(ds.iter_batches(batch_size=1, batch_format="pyarrow"))


def test_every_seed_once_with_its_features_zero_copy(ray_cluster, graphs):
    built = graphs["hetero"]
    n_users = GraphFile.open(built.graph).metadata.node_counts["user"]
    x_user = FeatureFile.open(built.features).x("user")
    ds = create_sampling_dataset(built.graph, [4, 2], input_nodes="user", batch_size=32,
                                 features_path=built.features, parallelism=2)
    seen = []
    for batch in _one_row_batches(ds):
        data = collate_to_pyg(batch)
        user = data["user"]
        seen.append(user.n_id[:user.batch_size])
        assert user.batch_size <= 32 and torch.equal(user.x, x_user[user.n_id])
        # zero copy: the tensors view the Arrow buffers of the batch
        (chunk,) = batch.column("n_id/user").chunks
        buf = chunk.flatten().buffers()[1]
        assert buf.address <= user.n_id.data_ptr() < buf.address + buf.size
    seeds = torch.cat(seen)
    assert len(seeds) == n_users and torch.equal(torch.sort(seeds).values, torch.arange(n_users))


def test_link_batches_in_the_trainers_shape(ray_cluster, graphs):
    from graphstore.training.batches import view, without_pair_edges
    from graphstore.training.model import LinkPredictionEncoder, ModelConfig

    built = graphs["hetero"]
    g = GraphFile.open(built.graph)
    want = g.positives(BUYS, g.anchors(BUYS, "train"), "train")
    ds = create_sampling_dataset(built.graph, [4, 2], batch_size=64, features_path=built.features,
                                 parallelism=2, supervision_edge_type=BUYS, split="train",
                                 num_negatives=8)
    meta = g.metadata
    cfg = ModelConfig(node_feature_dims=dict(meta.node_feature_dims),
                      edge_types=tuple({t for et in meta.edge_types
                                        for t in (et.as_tuple(), et.reverse().as_tuple())}),
                      hidden_dim=8, out_dim=8)
    model = LinkPredictionEncoder(cfg)
    pairs = []
    for batch in _one_row_batches(ds):
        data = collate_to_pyg(batch)
        y = data.y_positive
        assert data.supervision_edge_type == BUYS.as_tuple() and y.shape[0] == 2
        assert y.shape[1] <= 64 and data.y_negative.shape == (8,)
        pairs.append(torch.stack([data["user"].node[y[0]], data["item"].node[y[1]]]))
        v = view(data, None)  # the trainer's view of a GLT batch reads this one too
        edges = without_pair_edges(v.edge_index, "user", "item", y, v.num_nodes)
        h = model(v.x, edges, v.num_nodes)
        assert h["user"].shape == (v.num_nodes["user"], 8)
    got = torch.cat(pairs, dim=1)
    assert sorted(zip(*got.tolist())) == sorted(zip(*want.tolist()))  # every pair exactly once


def test_homogeneous_dataset_and_multi_row_batches(ray_cluster, graphs):
    built = graphs["homo"]
    ds = create_sampling_dataset(built.graph, [3, 3], batch_size=50, parallelism=2,
                                 features_path=built.features, view="full")
    table = pa.concat_tables(_one_row_batches(ds))
    single = [collate_to_pyg(table.slice(i, 1)) for i in range(3)]
    merged = collate_to_pyg(table.slice(0, 3))
    assert merged.batch_size == sum(d.batch_size for d in single)
    assert torch.equal(merged.n_id[:merged.batch_size], torch.cat([d.n_id[:d.batch_size] for d in single]))
    # the same edges, as (global src, global dst, edge id)
    def triples(d):
        return sorted(zip(d.n_id[d.edge_index[0]].tolist(), d.n_id[d.edge_index[1]].tolist(),
                          d.e_id.tolist()))
    assert triples(merged) == sorted(t for d in single for t in triples(d))
    assert torch.equal(merged.x, FeatureFile.open(built.features).x("item")[merged.n_id])


def test_bad_arguments_are_one_line_usage_errors(ray_cluster, graphs):
    built = graphs["hetero"]
    with pytest.raises(UsageError, match="name the node type"):
        create_sampling_dataset(built.graph, [2], parallelism=1)
    with pytest.raises(UsageError, match="duplicate"):
        create_sampling_dataset(built.graph, [2], input_nodes=("user", [1, 1]), parallelism=1)
    with pytest.raises(UsageError, match="batch_size"):
        create_sampling_dataset(built.graph, [2], input_nodes="user", batch_size=0)
    with pytest.raises(UsageError, match="not found"):
        create_sampling_dataset(built.graph + ".missing", [2], input_nodes="user")
    with pytest.raises(UsageError, match="iter_batches"):
        collate_to_pyg({"n_id": [1]})


def test_several_rows_per_block_give_the_same_batches_without_copies(ray_cluster, graphs):
    """Blocks of several rows (what the trainer's loaders read, graphstore.modes.replicated.loading)
    hold the same batches as one-row blocks, and one row still converts without a copy."""
    import ray.data

    from graphstore.modes.replicated import GraphSamplingDatasource

    built = graphs["hetero"]
    g = GraphFile.open(built.graph)
    pairs = g.positives(BUYS, g.anchors(BUYS, "train"), "train")[:, ::-1].copy()  # any order
    by_rows = {}
    for rows in (1, 5):
        source = GraphSamplingDatasource(built.graph, [3, 2], batch_size=16,
                                         features_path=built.features,
                                         supervision_edge_type=BUYS, positive_pairs=pairs,
                                         random_seed=7, rows_per_block=rows)
        first_block = next(iter(source.get_read_tasks(2)[0]()))  # what a read task yields
        assert first_block.num_rows == rows
        ds = ray.data.read_datasource(source, override_num_blocks=2)
        got = []
        for batch in _one_row_batches(ds):
            data = collate_to_pyg(batch)
            y = data.y_positive
            got.append(tuple(sorted(zip(data["user"].node[y[0]].tolist(),
                                        data["item"].node[y[1]].tolist()))))
            (chunk,) = [c for c in batch.column("n_id/user").chunks if len(c)]
            buf = chunk.flatten().buffers()[1]
            assert buf.address <= data["user"].n_id.data_ptr() < buf.address + buf.size
        by_rows[rows] = sorted(got)
    assert by_rows[1] == by_rows[5]  # the same batches (each a fixed slice of the pairs)
    assert sum(len(b) for b in by_rows[5]) == pairs.shape[1]
    with pytest.raises(UsageError, match="rows_per_block"):
        GraphSamplingDatasource(built.graph, [2], input_nodes="user", rows_per_block=0)


def test_the_loaders_inline_sampling_gives_the_read_tasks_batches(ray_cluster, graphs):
    """``num_workers=0`` samples in the loader's own process: the same batches (ids, edges, edge
    ids, features, positives), in the same order, as one Ray Data read task with the same seed (every seed once per epoch, the epoch's
    shuffle and the sampler's draws alike), and graph-store loaders refuse 0 by name."""
    from graphstore import DistABLPLoader, DistNeighborLoader
    from graphstore.dataset.graph_dataset import LoaderOptions
    from graphstore.modes.replicated.dataset import ReplicatedDataset
    from graphstore.modes.graph_store.remote_dataset import RemoteDistDataset

    built = graphs["hetero"]
    ds = ReplicatedDataset(built.graph, built.features, view="train")
    users = ds.fetch_node_ids(node_type="user", rank=0, world_size=1)
    pairs = ds.fetch_ablp_input("train", rank=0, world_size=1, supervision_edge_type=BUYS)

    def epochs(workers: int) -> list[list]:
        loaders = [DistNeighborLoader(ds, [3, 2], ("user", users), batch_size=7, shuffle=True,
                                      random_seed=11, num_workers=workers),
                   DistABLPLoader(ds, [3, 2], pairs, batch_size=5, shuffle=True, random_seed=11,
                                  supervision_edge_type=BUYS, num_workers=workers)]
        out = []
        for loader in loaders:
            for _ in range(2):  # each epoch reshuffles and reseeds
                out.append([(b["user"].n_id[:b["user"].batch_size].tolist(),
                             b["user"].n_id.tolist(), b["item"].n_id.tolist(),
                             b["user", "buys", "item"].edge_index.tolist()
                             if ("user", "buys", "item") in b.edge_types else None,
                             {et: b[et].e_id.tolist() for et in b.edge_types},
                             {nt: b[nt].x.tolist() for nt in b.node_types if "x" in b[nt]},
                             b.y_positive.tolist() if "y_positive" in b else None)
                            for b in loader])
            loader.shutdown()
        return out

    inline, read_task = epochs(0), epochs(1)
    assert inline == read_task
    for epoch in inline[:2]:  # every user a seed once per epoch, 7 per batch
        seeds = [u for batch in epoch for u in batch[0]]
        assert sorted(seeds) == users[0].tolist() and len(epoch) == -(-len(seeds) // 7)
    assert inline[0] != inline[1]
    want = pairs[0].positive_labels[BUYS.as_tuple()].shape[1]
    assert [sum(len(b[6][0]) for b in epoch) for epoch in inline[2:]] == [want, want]
    assert any(b[5] for b in inline[0])  # features compared too
    with pytest.raises(UsageError, match="num_workers must be >= 0"):
        LoaderOptions("nbr", num_workers=-1)
    with pytest.raises(UsageError, match="graph-store loaders need >= 1 sampling worker"):
        RemoteDistDataset.start_loader(object.__new__(RemoteDistDataset), object(), [], None,
                                       LoaderOptions("nbr", num_workers=0))


def _seed_004_model(in_dim: int):
    """A GNN of the shape seed 004's snippets use: ``model(data.x, data.edge_index)`` (defined in
    here so that Ray pickles it by value into its workers)."""
    from torch_geometric.nn import SAGEConv

    class MyGNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = SAGEConv(in_dim, 8)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index).square().mean()

    return MyGNN()


def test_seed_004_first_snippet_as_written_gets_features(ray_cluster, graphs):
    """Seed 004: ``create_sampling_dataset(graph_path=..., num_neighbors=[25, 10],
    batch_size=1024)``, then ``collate_to_pyg(batch)`` per ``iter_batches(batch_format=
    "pyarrow")`` batch: ``x`` comes from the graph file's features file, unnamed."""
    built = graphs["homo"]
    x_all = FeatureFile.open(built.features).x(GraphFile.open(built.graph).metadata.node_types[0])
    model = _seed_004_model(x_all.shape[1])
    dataset = create_sampling_dataset(graph_path=built.graph, num_neighbors=[25, 10],
                                      batch_size=1024)
    seen = 0
    for batch in dataset.iter_batches(batch_format="pyarrow"):
        data = collate_to_pyg(batch)
        out = model(data.x, data.edge_index)
        assert torch.equal(data.x, x_all[data.n_id]) and out.isfinite()
        seen += 1
    assert seen >= 1


@pytest.mark.timeout(600)
def test_seed_004_ray_train_snippet_finishes_on_two_cpus(ray_cluster, graphs, tmp_path):
    """Seed 004's ``TorchTrainer`` snippet, 2 CPU workers on ``ray.init(num_cpus=2)`` (this
    module's cluster): each worker iterates ``create_sampling_dataset(graph, [25, 10])``. The
    read tasks used to ask for a CPU each while the two workers held both: Ray Data waited forever
    ("backpressured: tasks(ResourceBudget)"). Only addition to the snippet: the results folder."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    graph = graphs["homo"].graph
    (in_dim,) = GraphFile.open(graph).metadata.node_feature_dims.values()
    make_model = _seed_004_model

    def train_fn():
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(make_model(in_dim))
        dataset = create_sampling_dataset(graph, [25, 10])
        batches = 0
        for batch in dataset.iter_batches(batch_format="pyarrow"):
            data = collate_to_pyg(batch)
            loss = model(data.x, data.edge_index)
            loss.backward()  # DDP syncs gradients here
            batches += 1
        assert batches >= 1

    trainer = TorchTrainer(train_fn, scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                           run_config=RunConfig(storage_path=str(tmp_path)))
    result = trainer.fit()
    assert result.error is None


@pytest.mark.timeout(300)
def test_a_dataset_that_cannot_progress_fails_naming_what_it_waits_for(ray_cluster, graphs):
    """Read tasks that ask for CPUs an actor holds never start, and Ray Data waits without a
    word; the sampling dataset raises after its bound instead, naming the CPUs each task asks
    for and the cluster's free ones (tests/integration/ray_stall_probe.py, in a process and a
    Ray of its own: the abandoned iteration's thread stays inside Ray Data until that process
    exits; in this worker it outlived ray.shutdown() and killed the worker two test files later,
    CI on 7495412). A dataset derived from a sampling dataset is a plain Ray dataset."""
    from graphstore.modes.replicated.progress import SamplingDataset

    marker = f"ray-stall-probe-{os.getpid()}-{time.monotonic_ns()}"
    probe = subprocess.run(
        [sys.executable, "-m", "tests.integration.ray_stall_probe", graphs["homo"].graph, "4"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "GRAPHSTORE_RAY_STALL_PROBE": marker})
    text = probe.stdout
    assert probe.returncode == 0, f"exit {probe.returncode}:\n{text}\n{probe.stderr[-3000:]}"
    assert not _processes_carrying(marker, wait_s=90), "the probe's Ray left processes behind"
    waited = float(re.search(r"^WAITED ([0-9.]+)$", text, re.M).group(1))
    assert "no progress for 4 s" in text and "each read task asks for CPU 1" in text, text
    assert re.search(r"free: CPU 0 of 2\b", text), text
    assert 4 <= waited < 60, text

    dataset = create_sampling_dataset(graphs["homo"].graph, [5, 5], batch_size=64, parallelism=2)
    assert isinstance(dataset, SamplingDataset)
    assert not isinstance(dataset.map_batches(lambda b: b, batch_format="pyarrow"),
                          SamplingDataset)
    with pytest.raises(UsageError, match="stall_timeout_s must be > 0"):
        create_sampling_dataset(graphs["homo"].graph, [5], stall_timeout_s=0)
