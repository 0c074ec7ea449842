"""The default inferencer: embed every node of each configured node type, one session per type.

Per compute machine (``run_inference``): read the checkpoint (``<run-dir>/checkpoint/model.pt``,
written by the trainer) -> the machine's parent of its mode (graphstore.modes.machine: graph
store and colocated: temporary global group -> ``agree_on_cluster`` -> destroy -> the dataset
source, colocated: this machine's ``DistDataset``, built once; replicated: the graph file and
the Ray cluster) -> for node type k of ``inferencerConfig.nodeTypes``, in that order: run one
worker per compute process against storage session k (spawned; replicated: one Ray Train run);
the storage side serves exactly one session per node type (derived).

Per worker (``_worker``), for its node type:
  1. ``init_compute_process``; global rank 0 names this attempt's folder
     (``attempt-<UTC>-<hex>``, graphstore.formats.embeddings) and broadcasts it: every rank writes only
     there, so the previous ``_SUCCESS`` and its files stay valid until step 4 replaces it;
  2. this rank's share of the node ids (``fetch_node_ids``; graph store: a contiguous slice of
     every storage rank's owned ids; colocated: a slice of this machine's),
     ``DistNeighborLoader``, eval mode, no grad; the model on the process's device (the CPU, or
     ``cuda:<local_rank>`` when the resource config gives GPUs: graphstore.runtime.devices), each batch
     moved there before the forward, each batch's embeddings moved back to the CPU;
  3. each rank writes ``<attempt>/part-<rank>-of-<world>.parquet`` (columns ``int_id`` int64,
     ``embedding`` list<float32>; graphstore.formats.embeddings), through a temporary name so a reader
     never sees half a file;
  4. counts are all-reduced; global rank 0 checks that every node of the type was embedded
     exactly once (distinct count == node count) and only then writes ``_SUCCESS`` (the atomic
     switch), then removes older attempts; anything else fails the stage and leaves the
     previous ``_SUCCESS`` (if any) as it was;
  5. loaders shut down, then ``shutdown_compute_process`` (ends the session on every server).
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any

import torch
import torch.distributed as dist

from graphstore.io import uris
from graphstore.modes.machine import compute_machine
from graphstore.modes.cluster_info import DatasetSource
from graphstore.formats.embeddings import (SUCCESS, EmbeddingsMarker, new_attempt_name, publish_success,
                                   shard_name, write_part)
from graphstore.runtime.env import ClusterTopology
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.modes.cluster_info import ClusterInfo
from graphstore.config.stage import StageContext
from graphstore.config.default_args import InferencerArgs  # torch-free: the config loader checks them too
from graphstore.training.batches import seed_count, view
from graphstore.training.checkpoint import Checkpoint, read_checkpoint
from graphstore.training.model import LinkPredictionEncoder

log = logging.getLogger(__name__)


def load_checkpoint(uri: str) -> Checkpoint:
    """The trainer's checkpoint (format: graphstore.training.checkpoint, read without unpickling
    objects); clear error when missing or not ours."""
    if not uris.exists(uri):
        raise UsageError(f"no model checkpoint at {uri}: run the train stage first (or set "
                         "inferencerConfig.inferencerArgs.checkpoint)")
    return read_checkpoint(uri, fix="point inferencerConfig.inferencerArgs.checkpoint at a model.pt "
                                    "written by the train stage, or rerun it")



def _worker(local_rank: int, info: ClusterInfo, node_type: str, ckpt: Checkpoint, args: InferencerArgs,
            batch_size: int, out_dir: str, source: DatasetSource) -> None:
    from graphstore.dataset.loaders import DistNeighborLoader
    from graphstore.modes.graph_store.compute import init_compute_process, shutdown_compute_process
    from graphstore.runtime.cli import setup_logging

    setup_logging(f"infer{info.machine_index}.{local_rank}")
    device = init_compute_process(local_rank, info)
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = source.open(info, local_rank)
    meta = ds.metadata
    attempt = [new_attempt_name() if rank == 0 else ""]
    dist.broadcast_object_list(attempt, src=0)  # every rank writes into rank 0's attempt folder
    attempt_dir = uris.join(out_dir, attempt[0])
    model = LinkPredictionEncoder(ckpt.model_config)
    model.load_state_dict(ckpt.state_dict)  # CPU tensors (read with map_location="cpu")
    model.to(device.torch_device).eval()
    homo = meta.homogeneous_types
    fanout = list(ckpt.fanout(args.num_neighbors))
    node_ids = ds.fetch_node_ids(node_type=node_type)  # this rank's share of every partition
    total = sum(len(t) for t in node_ids.values())
    loader = DistNeighborLoader(ds, fanout, node_ids if homo else (node_type, node_ids),
                                batch_size=batch_size, num_workers=args.sampling_workers)
    t0 = time.perf_counter()
    mine_ids, mine = _embed_all(model, loader, device, homo, node_type, args.log_every_batches,
                                total, batch_size)
    t_shut = time.perf_counter()
    loader.shutdown()
    log.info("infer %s rank=%d loader shut down in %.2f s", node_type, rank,
             time.perf_counter() - t_shut)
    write_part(uris.join(attempt_dir, shard_name(rank, world)), mine_ids.numpy(), mine.numpy())
    counts = torch.tensor([len(mine_ids), len(torch.unique(mine_ids))], dtype=torch.long)
    dist.all_reduce(counts)
    if rank == 0:
        _publish(out_dir, attempt[0], node_type, ckpt, world, rows=int(counts[0]),
                 distinct=int(counts[1]), expected=int(meta.node_counts[node_type]),
                 seconds=time.perf_counter() - t0)
    shutdown_compute_process()


def _embed_all(model: LinkPredictionEncoder, loader: Any, device: Any, homo: Any, node_type: str,
               log_every_batches: int, total: int, batch_size: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Every batch of ``loader``: its seeds' ids and embeddings (on the CPU), in batch order."""
    ids, embs, t0 = [], [], time.perf_counter()
    num_batches = (total + batch_size - 1) // batch_size  # an upper bound: GLT batches per server
    with torch.no_grad():
        for i, batch in enumerate(loader, 1):
            batch = device.batch(batch)
            v = view(batch, homo)
            k = seed_count(batch, node_type, homo is not None)
            h = model.embed_seeds(v.x, v.edge_index, v.num_nodes, v.node_ids, node_type, k)
            embs.append(h.cpu())  # written from the CPU (no-op there)
            ids.append(v.node_ids[node_type][:k].cpu())
            if log_every_batches and i % log_every_batches == 0:
                done = sum(len(t) for t in ids)
                log.info("infer %s rank=%d batches=%d/~%d nodes=%d/%d nodes_per_s=%.0f", node_type,
                         dist.get_rank(), i, num_batches, done, total,
                         done / (time.perf_counter() - t0))
    return (torch.cat(ids) if ids else torch.empty(0, dtype=torch.long),
            torch.cat(embs) if embs else torch.empty(0, model.cfg.out_dim))


def _publish(out_dir: str, attempt: str, node_type: str, ckpt: Checkpoint, world: int, *,
             rows: int, distinct: int, expected: int, seconds: float) -> None:
    """Rank 0, once every rank wrote its part: the ``_SUCCESS`` marker naming every part, only
    when the rows are exactly one per node (every rank holds disjoint id slices, so per-rank
    distinct counts add up to the global one)."""
    if rows != expected or distinct != expected:
        raise RuntimeFailure(f"infer {node_type}: wrote {rows} rows ({distinct} distinct ids) "
                             f"for {expected} nodes; no {SUCCESS} marker written")
    dim = ckpt.model_config.out_dim
    marker = EmbeddingsMarker(
        node_type=node_type, count=rows, dim=dim,
        files=tuple(f"{attempt}/{shard_name(r, world)}" for r in range(world)),
        checkpoint_step=ckpt.step, finished_at=datetime.datetime.now(datetime.timezone.utc),
        seconds=round(seconds, 1))
    publish_success(out_dir, marker)
    log.info("infer %s done: %d embeddings (dim %d) in %.1f s -> %s", node_type, rows, dim,
             marker.seconds, out_dir)


def run_inference(ctx: StageContext, topology: ClusterTopology) -> int:
    """The compute-machine parent (see module docs)."""
    if ctx.task.inferencer is None:
        raise UsageError("the task config has no inferencerConfig")
    args = InferencerArgs.from_mapping(ctx.task.inferencer.inferencer_args)
    ckpt = load_checkpoint(args.checkpoint or ctx.paths.model)
    node_types = ctx.task.inferencer.node_types
    with compute_machine(ctx, topology, __name__) as machine:  # the mode: graph store, colocated, replicated
        for session, node_type in enumerate(node_types):
            t0 = time.perf_counter()
            log.info("infer session %d/%d: node type %s", session + 1, len(node_types), node_type)
            machine.run(_worker, (node_type, ckpt, args, ctx.task.inferencer.inference_batch_size,
                                  ctx.paths.embeddings(node_type), machine.source), session=session)
            log.info("infer session %d/%d: node type %s finished in %.1f s", session + 1,
                     len(node_types), node_type, time.perf_counter() - t0)
    return 0
