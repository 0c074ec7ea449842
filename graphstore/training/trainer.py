"""The default trainer: a link-prediction GNN over the graph store (or colocated, or replicated),
seed-000 shaped.

Per compute machine (``run_training``): the machine's parent of its mode
(graphstore.modes.machine: graph store and colocated: temporary global group ->
``agree_on_cluster`` -> destroy -> the dataset source, colocated: this machine's ``DistDataset``,
built once -> spawn one worker per local process; replicated: the graph file, the Ray cluster ->
one Ray Train ``TorchTrainer`` run over every machine's workers), each worker opening its dataset
from the source. Nothing below depends on the mode: the worker uses the ``GraphDataset`` contract
only.

Per worker (``_worker``), in this order:
  1. ``init_compute_process``; loaders are created in the same order on every rank (a collective):
     for each supervision edge type (manifest order) its train ABLP loader and its random-negative
     loader (label node type); at the first evaluation of a split, per type, the candidate set
     (once) and that split's ABLP loader, kept for later evaluations;
  2. steps (on the process's device: the CPU, or ``cuda:<local_rank>`` when the resource config
     gives GPUs, graphstore.runtime.devices; batches are sampled on the CPU and moved there before the
     forward): for every supervision type, the model on its ABLP batch (anchors, positives; the
     edges joining each pair left out of message passing) and on its negative batch; retrieval (or
     BPR) loss with accidental hits removed, summed over types; a type with hard negatives
     (``hardNegativeEdgeTypes``) has its ABLP batches draw up to ``hard_negatives_per_anchor`` of
     each anchor's known negatives, which join that anchor's negatives (their count per type is
     logged and in ``metrics.json``, ``hard_negatives``); DDP all-reduces gradients; AdamW;
  3. before the first step, the baselines (``trainerArgs.baselines``) are fitted on every
     rank's training pairs; every ``val_every_steps`` before the last step: MRR / hits@k per
     supervision type on val, model and baselines on the same candidates; at the end, on test
     (graphstore.training.evaluation); the learning rate of each step and early stopping on the
     first supervision type's val MRR: graphstore.training.schedule (with
     ``early_stopping_patience``, the end is validated too and the best validation's weights are
     the ones checkpointed and tested);
  4. rank 0 writes ``<run-dir>/checkpoint/model.pt`` (weights, model config, step, optimizer,
     training fan-out; the format: graphstore.training.checkpoint) and ``metrics.json`` (results,
     baselines and their settings, loss history, phase timings, loader wait share:
     graphstore.training.history); a run that finds a checkpoint resumes from its step (the
     machine's parent reads and checks it before any process starts, and hands it to its
     workers); with ``trainerArgs.tensorboard``, rank 0 also writes TensorBoard event files
     (graphstore.training.tensorboard);
  5. loaders shut down, then ``shutdown_compute_process``; then rank 0 writes the run report
     ``<run-dir>/report/`` (graphstore.training.report).
"""

from __future__ import annotations

import json
import logging
import time

import torch
import torch.distributed as dist

from graphstore.io import uris
from graphstore.config import EdgeType
from graphstore.modes.machine import compute_machine
from graphstore.modes.dataset_source import DatasetSource
from graphstore.runtime.env import ClusterTopology
from graphstore.runtime.errors import UsageError
from graphstore.modes.graph_store.info import GraphStoreInfo
from graphstore.formats.run_paths import (
    CHECKPOINT_METRICS, CHECKPOINT_MODEL, RunPaths, read_run_record,
)
from graphstore.config.stage import StageContext
from graphstore.config.default_args import TrainerArgs
from graphstore.training.batches import EpochStream, seed_count
from graphstore.training.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from graphstore.training.evaluation import Evaluator
from graphstore.training.history import TrainingLog
from graphstore.training.job import Job, Supervision
from graphstore.training.losses import (
    accidental_hit_mask, bpr_loss, candidate_scores, hard_negative_mask, logq_offsets,
    retrieval_loss,
)
from graphstore.training.model import LinkPredictionEncoder, ModelConfig, id_embedding_counts
from graphstore.training.schedule import EarlyStopping, lr_factor, set_lr

log = logging.getLogger(__name__)


def _save(ckpt_uri: str, model, optimizer, cfg: ModelConfig, args: TrainerArgs, step: int,
          metrics: dict) -> None:
    """``model.pt`` then ``metrics.json`` into the checkpoint folder (local or gs://); each lands
    whole (uris.put_file: rename locally, one object upload on GCS)."""
    write_checkpoint(uris.join(ckpt_uri, CHECKPOINT_MODEL), state_dict=model.state_dict(),
                     optimizer=optimizer.state_dict(), model_config=cfg, step=step,
                     num_neighbors=args.num_neighbors)
    uris.write_text(uris.join(ckpt_uri, CHECKPOINT_METRICS), json.dumps(metrics, indent=1))


def resume_checkpoint(ckpt_dir: str) -> Checkpoint | None:
    """The checkpoint a run resumes from (``<ckpt_dir>/model.pt``), or None when there is none.

    Raises UsageError naming the file when it is not a graphstore checkpoint this version reads."""
    uri = uris.join(ckpt_dir, CHECKPOINT_MODEL)
    if not uris.exists(uri):
        return None
    return read_checkpoint(uri, fix="move it away (or use another --run-dir) to train from scratch")


def _worker(local_rank: int, info: GraphStoreInfo, args: TrainerArgs, run_dir: str,
            data_root: str | None, source: DatasetSource, supervision_order: list[EdgeType],
            resume: Checkpoint | None) -> None:
    from graphstore.dataset.loaders import DistABLPLoader, DistNeighborLoader
    from graphstore.modes.graph_store.compute import init_compute_process, shutdown_compute_process
    from graphstore.runtime.cli import setup_logging

    setup_logging(f"train{info.machine_index}.{local_rank}")
    t_start = time.perf_counter()
    device = init_compute_process(local_rank, info)
    rank = dist.get_rank()
    tlog = TrainingLog(_tensorboard(run_dir) if args.tensorboard and rank == 0 else None)
    tlog.add_phase("join cluster", time.perf_counter() - t_start)
    ckpt_dir = RunPaths(run_dir).checkpoint
    torch.manual_seed(args.seed)
    with tlog.phase("open dataset, loaders"):
        job = Job(source.open(info, local_rank), supervision_order, device=device.torch_device)
        dims = {nt: job.meta.node_feature_dims[nt] for nt in job.meta.node_types}
        cfg = ModelConfig(node_feature_dims=dims, edge_types=job.edge_types,
                          hidden_dim=args.hidden_dim, out_dim=args.out_dim,
                          num_layers=args.num_layers, decoder=args.decoder, dropout=args.dropout,
                          id_embedding_counts=id_embedding_counts(
                              args.id_embeddings, job.meta.node_counts, args.id_embedding_max_nodes))
        model = LinkPredictionEncoder(cfg).to(device.torch_device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                      weight_decay=args.weight_decay)
        step = 0
        if resume is not None:
            model.load_state_dict(resume.state_dict)
            if resume.optimizer is not None:
                optimizer.load_state_dict(resume.optimizer)
            step = resume.step
            log.info("resuming from %s at step=%d", ckpt_dir, step)
        ddp = device.ddp(model, find_unused_parameters=True)  # device_ids + NCCL on CUDA
        streams, popularity, train_inputs = [], {}, {}
        for sup in job.sups:  # the same loaders in the same order on every rank
            train_input = train_inputs[sup.key] = sup.ablp_input("train")
            popularity[sup.key] = sup.popularity(train_input).to(device.torch_device)
            train = DistABLPLoader(job.ds, list(args.num_neighbors), train_input,
                                   batch_size=args.batch_size, shuffle=True, drop_last=True,
                                   supervision_edge_type=sup.key,
                                   num_workers=args.sampling_workers,
                                   hard_negatives_per_anchor=_hard_per_anchor(job, sup, args))
            negatives = DistNeighborLoader(job.ds, list(args.num_neighbors),
                                           sup.node_input(sup.label_ids()),
                                           batch_size=args.num_random_negatives, shuffle=True,
                                           num_workers=args.sampling_workers) \
                if args.num_random_negatives else None
            streams.append((sup, EpochStream(train, sup.steps_per_epoch(train_input,
                                                                         args.batch_size)),
                            EpochStream(negatives) if negatives is not None else None))
    # the other ranks wait in a collective while one fits: stay well inside its timeout
    evaluator = Evaluator(job, args, fit_budget_s=info.runtime.cluster_init_timeout_s / 3)
    with tlog.phase("baselines"):
        evaluator.fit_baselines(train_inputs)
    history = []
    stopper = EarlyStopping(args.early_stopping_patience)
    stopped_early = False  # True when early stopping ended training before max_steps / max_epochs
    wait_s = compute_s = loss_sum = 0.0
    hard = {sup.key: 0 for sup, _, _ in streams if _hard_per_anchor(job, sup, args)}
    first = streams[0][1]

    def epochs_left() -> bool:  # max_epochs counts the first supervision type's epochs
        return not args.max_epochs or first.epochs_done + first.epoch_full() < args.max_epochs

    while step < args.max_steps and epochs_left():
        t0 = time.perf_counter()
        batches = [(sup, train.next(), negatives.next() if negatives else None)
                   for sup, train, negatives in streams]
        t1 = time.perf_counter()
        loss = 0
        for sup, batch, neg in batches:
            sup_loss, drawn = _loss(ddp, job, sup, batch, neg, args, popularity[sup.key])
            loss = loss + sup_loss
            if sup.key in hard:
                hard[sup.key] += drawn
        optimizer.zero_grad()
        loss.backward()
        set_lr(optimizer, args.lr * lr_factor(step, args.max_steps, args.lr_schedule,
                                              args.warmup_steps))
        optimizer.step()
        step += 1
        t2 = time.perf_counter()
        wait_s += t1 - t0
        compute_s += t2 - t1
        tlog.step_times(t1 - t0, t2 - t1)
        loss_sum += float(loss)
        if step % args.log_every_steps == 0 and rank == 0:
            total = wait_s + compute_s
            mean = loss_sum / args.log_every_steps
            log.info("step=%d loss=%.4f batches_per_s=%.1f wait_share=%.2f%s", step, mean,
                     args.log_every_steps / total, wait_s / total,
                     "".join(f" hard_negatives.{k}={n}" for k, n in hard.items()))
            tlog.interval(step, mean, args.log_every_steps / total, wait_s / total)
        if step % args.log_every_steps == 0:
            wait_s = compute_s = loss_sum = 0.0
        last = step >= args.max_steps or not epochs_left()
        if step % args.val_every_steps == 0 and step < args.max_steps or last and stopper.patience \
                and (not history or history[-1]["step"] != step):  # the end scores test
            _validate(evaluator, model, step, history, stopper, tlog, rank,
                      lambda: _save(ckpt_dir, model, optimizer, cfg, args, step,
                                    {"val_history": history}))
            if stopper.should_stop() and not last:
                stopped_early = True
                log.info("early stop at step=%d: val MRR %.4f at step=%d not beaten in %d "
                         "validations", step, stopper.best_mrr, stopper.best_step, stopper.misses)
                break
    tlog.add_phase("training steps", tlog.wait_s + tlog.compute_s)
    for _, train, negatives in streams:
        train.close()
        if negatives is not None:
            negatives.close()
    if stopper.best_state is not None:  # early stopping: test (and keep) the best weights
        model.load_state_dict(stopper.best_state)
    with tlog.phase("test"):
        test = evaluator.run(model, "test")
    evaluator.close()
    if rank == 0:
        tlog.evaluation("test", step, test)
        summary = {"steps": step, "seconds": round(time.perf_counter() - t_start, 1),
                   "val_history": history, "test": test, "baselines": evaluator.baselines,
                   **tlog.to_dict(), "protocol": _protocol(args)}
        if hard:
            # rank 0's batches: how many hard negatives reached its loss, in all and per step
            summary["hard_negatives"] = {
                k: {"per_anchor": args.hard_negatives_per_anchor, "drawn_rank0": n,
                    "per_step_rank0": round(n / max(step - (resume or {}).get("step", 0), 1), 1)}
                for k, n in hard.items()}
        if stopper.patience:
            summary["early_stopping"] = {"best_step": stopper.best_step,
                                         "best_val_mrr": stopper.best_mrr,
                                         "stopped_early": stopped_early}
        _save(ckpt_dir, model, optimizer, cfg, args, step, summary)
        for key, r in test["by_supervision_edge_type"].items():
            log.info("train done steps=%d %s test_mrr=%.4f %s seconds=%.1f", step, key,
                     r["model"]["mrr"], _baseline_mrrs(r, "test_"), summary["seconds"])
    shutdown_compute_process()
    tlog.close()
    if rank == 0:
        uri = _report(run_dir, data_root, job, evaluator, summary)
        log.info("report written: %s", uri)


def _validate(evaluator: Evaluator, model, step: int, history: list, stopper: EarlyStopping,
              tlog: TrainingLog, rank: int, save) -> None:
    """One validation: its result into ``history`` and the log; ``save()`` on rank 0 (every
    validation, or with early stopping only when the first type's val MRR is the best so far)."""
    with tlog.phase("validation"):
        result = evaluator.run(model, "val")
    history.append({"step": step, **result})
    best = stopper.update(step, result["model"]["mrr"], model) if stopper.patience else True
    if rank == 0:
        tlog.evaluation("val", step, result)
        for key, r in result["by_supervision_edge_type"].items():
            log.info("step=%d %s val_mrr=%.4f val_hits@10=%.4f %s", step, key,
                     r["model"]["mrr"], r["model"]["hits@10"], _baseline_mrrs(r))
        if best:
            save()


def _tensorboard(run_dir: str):
    from graphstore.training.tensorboard import TensorBoardSink

    return TensorBoardSink(RunPaths(run_dir).tensorboard)


def _protocol(args: TrainerArgs) -> str:
    return (f"filtered ranking of each (anchor, positive) against {args.eval_candidates} label "
            f"nodes drawn uniformly at random (seed {args.seed}), the same for the model and "
            "every baseline; every known positive of the anchor (any split) is skipped")


def _baseline_mrrs(result: dict, prefix: str = "") -> str:
    """``popularity_mrr=0.0280 bpr_mrr=...`` of the baselines in one evaluation result."""
    return " ".join(f"{prefix}{who}_mrr={v['mrr']:.4f}" for who, v in result.items()
                    if who != "model" and isinstance(v, dict) and "mrr" in v)


def _report(run_dir: str, data_root: str | None, job: Job, evaluator: Evaluator,
            summary: dict) -> str:
    """Write the run report (rank 0, after the cluster is left); returns report.html's URI."""
    from graphstore.training.report import ReportInputs, write_report
    from graphstore.training.report_inputs import build_projection, earlier_stages, node_attribute

    sup = job.sups[0]
    projection = None
    if sup.key in evaluator.samples:
        ids, emb = evaluator.samples[sup.key]
        attribute = node_attribute(data_root, RunPaths(run_dir).shards, sup.label_type, ids)
        projection = build_projection(sup.label_type, ids, emb, attribute,
                                      evaluator.label_degree.get(sup.key))
    record = read_run_record(run_dir)  # pipeline runs; a hand-made folder goes by its name
    title = f"Training run {(record or {}).get('run_id') or RunPaths(run_dir).folder_name}"
    return write_report(run_dir, ReportInputs(title=title, metrics=summary, projection=projection,
                                              stages=earlier_stages(run_dir)))


def _hard_per_anchor(job: Job, sup: Supervision, args: TrainerArgs) -> int:
    """Hard negatives per anchor of ``sup``'s training batches: 0 unless the graph has hard
    negatives for it (``hardNegativeEdgeTypes``)."""
    return args.hard_negatives_per_anchor if sup.type in job.meta.hard_negative_edge_types else 0


def _loss(model, job: Job, sup: Supervision, batch, neg, args: TrainerArgs,
          popularity: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Retrieval (or BPR) loss of one supervision type's batch against in-batch, random and hard
    negatives (each hard negative only for its own anchor's rows, no logQ offset: it was not
    sampled by popularity), accidental hits removed; and the hard negatives it used."""
    a, p, a_id, p_id, hard = job.pair_and_hard_embeddings(model, batch, sup)
    if neg is not None:
        hn, vn = job.embed(model, neg)
        k = seed_count(neg, sup.label_type, job.homo is not None)
        n_emb, n_id = hn[sup.label_type][:k], vn.node_ids[sup.label_type][:k]
    else:  # num_random_negatives 0: in-batch negatives only
        n_emb, n_id = a.new_empty(0, a.size(1)), p_id.new_empty(0)
    h_emb, h_anchor, h_id = hard if hard is not None else (
        a.new_empty(0, a.size(1)), a_id.new_empty(0), a_id.new_empty(0))
    scores = candidate_scores(a, p, torch.cat([n_emb, h_emb]), args.decoder, args.temperature)
    if args.logq_correction:
        offsets = logq_offsets(p_id, n_id, popularity, args.in_batch_negatives)
        scores = scores - torch.cat([offsets, offsets.new_zeros(len(h_id))])[None, :]
    mask = torch.cat([accidental_hit_mask(a_id, p_id, n_id, args.in_batch_negatives),
                      hard_negative_mask(a_id, p_id, h_anchor, h_id)], dim=1)
    loss = (retrieval_loss if args.loss == "retrieval" else bpr_loss)(scores, mask)
    return loss, int(len(h_id))


def run_training(ctx: StageContext, topology: ClusterTopology) -> int:
    """The compute-machine parent (see module docs)."""
    args = TrainerArgs.from_mapping(ctx.task.trainer.trainer_args)  # fail before any process starts
    if not args.in_batch_negatives and not args.num_random_negatives:
        raise UsageError("trainerConfig.trainerArgs: in_batch_negatives false and "
                         "num_random_negatives 0 leave no negatives; enable one of them")
    resume = resume_checkpoint(ctx.paths.checkpoint)  # likewise
    # workers get plain picklable values (the frozen configs hold read-only mappings)
    order = list(ctx.task.supervision_edge_types)
    with compute_machine(ctx, topology, __name__) as machine:  # the mode: graph store, colocated, replicated
        machine.run(_worker, (args, ctx.run_dir, ctx.task.dataset.data_root_uri, machine.source,
                              order, resume))
    return 0
