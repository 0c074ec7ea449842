"""The default trainer: a link-prediction GNN over the graph store (or colocated), seed-000 shaped.

Per compute machine (``run_training``): temporary global group -> ``agree_on_cluster`` ->
destroy -> (colocated: build this machine's ``DistDataset``) -> spawn one worker per local process.

Per worker (``_worker``), in this order:
  1. ``init_compute_process``; loaders are created in the same order on every rank (a collective):
     train ABLP, random negatives (label node type), then at evaluation time val/test ABLP and
     the shared candidate set;
  2. steps: model on the ABLP batch (anchors, positives) and on the negative batch; retrieval
     (or BPR) loss with accidental hits removed; DDP all-reduces gradients; AdamW;
  3. every ``val_every_steps`` and at the end: MRR / hits@k on val (test at the end) under the
     protocol of graphstore.training.metrics; candidates are the same ~``eval_candidates`` label
     nodes for every pair (slice 0 of every storage rank's label ids); the popularity baseline is
     scored under the same protocol;
  4. rank 0 writes ``<run-dir>/checkpoint/model.pt`` (weights, model config, step, optimizer,
     training fan-out, schema version) and ``metrics.json``; a run that finds a checkpoint
     resumes from its step;
  5. loaders shut down, then ``shutdown_compute_process``.
"""

from __future__ import annotations

import json
import logging
import os
import time

import torch
import torch.distributed as dist

from graphstore.env import ClusterTopology
from graphstore.graph_store_info import GraphStoreInfo, agree_on_cluster
from graphstore.stage import StageContext
from graphstore.training import metrics as M
from graphstore.training.args import TrainerArgs
from graphstore.training.batches import finish_epoch, seed_count, view, without_pair_edges
from graphstore.training.losses import accidental_hit_mask, bpr_loss, candidate_scores, retrieval_loss
from graphstore.training.model import LinkPredictionEncoder, ModelConfig

log = logging.getLogger(__name__)
CHECKPOINT_SCHEMA_VERSION = 1


class _Job:
    """What one worker needs: dataset handle, graph metadata, and how to fetch inputs."""

    def __init__(self, info: GraphStoreInfo, local_rank: int, local_dataset) -> None:
        from graphstore import RemoteDistDataset

        self.colocated = local_dataset is not None
        self.ds = local_dataset if self.colocated else RemoteDistDataset(info, local_rank)
        self.local_rank, self.local_world = local_rank, info.num_processes_per_compute
        meta = self.ds.metadata
        self.meta = meta
        self.sup_key = meta["supervision_edge_types"][0]
        self.sup = tuple(self.sup_key.split("__"))
        self.anchor_type, self.label_type = self.sup[0], self.sup[2]
        types = [tuple(k.split("__")) for k in meta["edge_types"]]
        self.homo = (meta["node_types"][0], types[0]) if meta["homogeneous"] else None
        from graphlearn_torch.typing import reverse_edge_type

        self.edge_types = tuple(dict.fromkeys(types + [reverse_edge_type(t) for t in types]))

    def ablp_input(self, split: str):
        if self.colocated:
            return (self.anchor_type, self.ds.anchor_ids(split, self.sup_key, self.local_rank, self.local_world))
        return self.ds.fetch_ablp_input(split=split, supervision_edge_type=self.sup_key)

    def label_ids(self, rank: int | None = None, world: int | None = None):
        if self.colocated:
            return self.ds.node_ids(self.label_type, rank=self.local_rank if rank is None else rank,
                                    world_size=self.local_world if world is None else world)
        return self.ds.fetch_node_ids(rank=rank, world_size=world, node_type=self.label_type)

    def node_input(self, ids):
        return ids if self.homo else (self.label_type, ids)


def _embed(model, batch, job: _Job, drop_pairs: torch.Tensor | None = None):
    v = view(batch, job.homo)
    edges = v.edge_index
    if drop_pairs is not None:
        edges = without_pair_edges(edges, job.anchor_type, job.label_type, drop_pairs, v.num_nodes)
    return model(v.x, edges, v.num_nodes), v


def _pairs_embeddings(model, batch, job: _Job):
    """Embeddings of the batch's (anchor, positive) pairs. The edges joining each pair are left out
    of message passing: with them, a model learns "linked = positive", which holds for training
    pairs only (the splitter removes val/test pairs from the graph) and ranks worse than random."""
    y = batch.y_positive
    h, v = _embed(model, batch, job, drop_pairs=y)
    anchors = h[job.anchor_type][y[0]]
    positives = h[job.label_type][y[1]]
    return anchors, positives, v.node_ids[job.anchor_type][y[0]], v.node_ids[job.label_type][y[1]]


def _evaluate(model, job: _Job, args: TrainerArgs, split: str, popularity: torch.Tensor) -> dict:
    """MRR / hits@k of the model and of popularity on ``split`` (see module docs)."""
    from graphstore import DistABLPLoader, DistNeighborLoader

    model.eval()
    n_labels = job.meta["node_counts"][job.label_type]
    world = max(1, n_labels // args.eval_candidates)
    cand_ids = job.label_ids(rank=0, world=world)
    cand_loader = DistNeighborLoader(job.ds, list(args.num_neighbors), job.node_input(cand_ids),
                                     batch_size=1024)
    loader = DistABLPLoader(job.ds, list(args.num_neighbors), job.ablp_input(split),
                            batch_size=args.batch_size)
    with torch.no_grad():
        embs, ids = [], []
        for batch in cand_loader:
            h, v = _embed(model, batch, job)
            k = seed_count(batch, job.label_type, job.homo is not None)
            embs.append(h[job.label_type][:k])
            ids.append(v.node_ids[job.label_type][:k])
        cand_emb = torch.cat(embs) if embs else torch.empty(0, args.out_dim)
        cand_id = torch.cat(ids) if ids else torch.empty(0, dtype=torch.long)
        sums, pop_sums = torch.zeros(5), torch.zeros(5)
        for batch in loader:
            a, p, a_id, p_id = _pairs_embeddings(model, batch, job)
            # filtered: a candidate that is a positive of the row's anchor (in this batch, the
            # row's own positive included) is not ranked against it
            same = a_id[:, None] == a_id[None, :]
            mask = (same[:, :, None] & (p_id[None, :, None] == cand_id[None, None, :])).any(1)
            sums += M.metric_sums(M.ranks((a * p).sum(-1), a @ cand_emb.T, mask))
            pop = popularity[cand_id][None, :].expand(len(p_id), -1)
            pop_sums += M.metric_sums(M.ranks(popularity[p_id], pop, mask))
    loader.shutdown()
    cand_loader.shutdown()
    dist.all_reduce(sums)
    dist.all_reduce(pop_sums)
    model.train()
    return {"model": M.finalize(sums), "popularity": M.finalize(pop_sums),
            "candidates_per_pair": int(cand_id.numel())}


def _popularity(job: _Job) -> torch.Tensor:
    """Training positives per label node, summed over ranks."""
    counts = torch.zeros(job.meta["node_counts"][job.label_type])
    ablp = job.ablp_input("train")
    if job.colocated:
        pairs = job.ds.labels_for(ablp[1], job.sup_key)
        counts += torch.bincount(pairs[1], minlength=len(counts)).float()
    else:
        for x in ablp.values():
            counts += torch.bincount(x.positive_labels[job.sup][1], minlength=len(counts)).float()
    dist.all_reduce(counts)
    return counts


def _steps_per_epoch(job: _Job, train_input, batch_size: int) -> int:
    """Steps every rank can take per epoch: the minimum over ranks of full batches.

    DDP needs every rank to step together; GLT forms batches per storage rank (drop_last), so a
    rank's count is the sum over storage ranks of ``pairs // batch_size``.
    """
    from graphstore.errors import UsageError

    if job.colocated:
        full = job.ds.labels_for(train_input[1], job.sup_key).size(1) // batch_size
    else:
        full = sum(x.positive_labels[job.sup].size(1) // batch_size for x in train_input.values())
    count = torch.tensor([float(full)])
    dist.all_reduce(count, op=dist.ReduceOp.MIN)
    if count.item() < 1:
        raise UsageError(f"trainerConfig.trainerArgs.batch_size {batch_size} is larger than the "
                         "training pairs some compute rank gets from a storage rank; lower it")
    return int(count.item())


def _save(path_dir: str, model, optimizer, cfg: ModelConfig, args: TrainerArgs, step: int,
          metrics: dict) -> None:
    os.makedirs(path_dir, exist_ok=True)
    tmp = os.path.join(path_dir, "model.pt.tmp")
    torch.save({"schema_version": CHECKPOINT_SCHEMA_VERSION, "model_config": cfg.to_dict(),
                "state_dict": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "num_neighbors": list(args.num_neighbors)},
               tmp)
    os.replace(tmp, os.path.join(path_dir, "model.pt"))  # a reader never sees a partial file
    tmp = os.path.join(path_dir, f"metrics.json.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(metrics, fh, indent=1)
    os.replace(tmp, os.path.join(path_dir, "metrics.json"))


def _worker(local_rank: int, info: GraphStoreInfo, args: TrainerArgs, ckpt_dir: str,
            local_dataset) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from graphstore import DistABLPLoader, DistNeighborLoader, init_compute_process, shutdown_compute_process
    from graphstore.cli import setup_logging

    setup_logging(f"train{info.machine_index}.{local_rank}")
    init_compute_process(local_rank, info)
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    job = _Job(info, local_rank, local_dataset)
    dims = {nt: job.meta["feature_dims"][nt] for nt in job.meta["node_types"]}
    cfg = ModelConfig(node_feature_dims=dims, edge_types=job.edge_types, hidden_dim=args.hidden_dim,
                      out_dim=args.out_dim, num_layers=args.num_layers, decoder=args.decoder)
    model = LinkPredictionEncoder(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    step = 0
    if os.path.exists(os.path.join(ckpt_dir, "model.pt")):
        ckpt = torch.load(os.path.join(ckpt_dir, "model.pt"))
        model.load_state_dict(ckpt["state_dict"])
        optimizer.load_state_dict(ckpt["optimizer"])
        step = int(ckpt["step"])
        log.info("resuming from %s at step=%d", ckpt_dir, step)
    ddp = DDP(model, find_unused_parameters=True)
    popularity = _popularity(job)
    train_input = job.ablp_input("train")
    train = DistABLPLoader(job.ds, list(args.num_neighbors), train_input,
                           batch_size=args.batch_size, shuffle=True, drop_last=True)
    steps_per_epoch = _steps_per_epoch(job, train_input, args.batch_size)
    negatives = DistNeighborLoader(job.ds, list(args.num_neighbors), job.node_input(job.label_ids()),
                                   batch_size=args.num_random_negatives, shuffle=True)
    t_start, history = time.perf_counter(), []
    wait_s = compute_s = 0.0
    neg_iter = iter(negatives)
    while step < args.max_steps:
        for i, batch in enumerate(train):  # one iter(): one GLT epoch (see finish_epoch)
            if i >= steps_per_epoch:  # other ranks have no more batches: finish the epoch unused
                finish_epoch(train)
                break
            t0 = time.perf_counter()
            try:
                neg = next(neg_iter)
            except StopIteration:
                neg_iter = iter(negatives)
                neg = next(neg_iter)
            t1 = time.perf_counter()
            a, p, a_id, p_id = _pairs_embeddings(ddp, batch, job)
            hn, vn = _embed(ddp, neg, job)
            k = seed_count(neg, job.label_type, job.homo is not None)
            n_emb, n_id = hn[job.label_type][:k], vn.node_ids[job.label_type][:k]
            scores = candidate_scores(a, p, n_emb, args.decoder, args.temperature)
            mask = accidental_hit_mask(a_id, p_id, n_id)
            loss = (retrieval_loss if args.loss == "retrieval" else bpr_loss)(scores, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            wait_s += t1 - t0
            compute_s += time.perf_counter() - t1
            if step % args.log_every_steps == 0 and rank == 0:
                total = wait_s + compute_s
                log.info("step=%d loss=%.4f batches_per_s=%.1f wait_share=%.2f", step, float(loss),
                         args.log_every_steps / total, wait_s / total)
                wait_s = compute_s = 0.0
            if step % args.val_every_steps == 0 or step >= args.max_steps:
                result = _evaluate(model, job, args, "val", popularity)
                history.append({"step": step, **result})
                if rank == 0:
                    log.info("step=%d val_mrr=%.4f val_hits@10=%.4f popularity_mrr=%.4f", step,
                             result["model"]["mrr"], result["model"]["hits@10"], result["popularity"]["mrr"])
                    _save(ckpt_dir, model, optimizer, cfg, args, step, {"val_history": history})
            if step >= args.max_steps:
                finish_epoch(train)
                break
    train.shutdown()
    negatives.shutdown()
    test = _evaluate(model, job, args, "test", popularity)
    if rank == 0:
        summary = {"steps": step, "seconds": round(time.perf_counter() - t_start, 1),
                   "val_history": history, "test": test,
                   "protocol": f"filtered ranking of each (anchor, positive) against ~{args.eval_candidates} "
                               "shared random label nodes; popularity = training positives per node"}
        _save(ckpt_dir, model, optimizer, cfg, args, step, summary)
        log.info("train done steps=%d test_mrr=%.4f popularity_test_mrr=%.4f seconds=%.1f", step,
                 test["model"]["mrr"], test["popularity"]["mrr"], summary["seconds"])
    shutdown_compute_process()


def run_training(ctx: StageContext, topology: ClusterTopology) -> int:
    """The compute-machine parent (see module docs)."""
    import torch.multiprocessing as mp

    args = TrainerArgs.from_mapping(ctx.task.trainer.trainer_args)  # fail before any process starts
    info = agree_on_cluster(ctx, topology)
    local = None
    if info.colocated:
        from graphstore import DistDataset

        local = DistDataset.from_shards(ctx.shards_uri, info.machine_index, ctx.storage.storage_args)
    # workers get plain picklable values (the frozen configs hold read-only mappings)
    mp.spawn(_worker, args=(info, args, ctx.path("checkpoint"), local),
             nprocs=info.num_processes_per_compute, join=True)
    return 0
