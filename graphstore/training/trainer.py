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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from graphstore.io import uris
from graphstore.config import EdgeType
from graphstore.modes.machine import compute_machine
from graphstore.modes.cluster_info import DatasetSource
from graphstore.runtime.env import ClusterTopology
from graphstore.runtime.errors import UsageError
from graphstore.modes.cluster_info import ClusterInfo
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


@dataclass
class _Stream:
    """One supervision type's batches: its training ABLP loader (epochs capped at the batch count
    every rank has) and its random-negative loader (None without random negatives)."""

    sup: Supervision
    train: EpochStream
    negatives: EpochStream | None


@dataclass
class _Run:
    """A training worker's state, built by :func:`_start` and advanced by :func:`_train_step`."""

    args: TrainerArgs
    job: Job
    cfg: ModelConfig
    model: torch.nn.Module
    ddp: torch.nn.Module  # the model under DDP: what a step runs
    optimizer: torch.optim.Optimizer
    streams: list[_Stream]
    popularity: dict[EdgeType, torch.Tensor]  # label node popularity per type (logQ correction)
    train_inputs: dict[EdgeType, Any]  # per type, what the baselines fit on
    evaluator: Evaluator
    tlog: TrainingLog
    ckpt_dir: str
    rank: int
    step: int
    start_step: int  # the step this run started (resumed) from
    stopper: EarlyStopping
    history: list[dict] = field(default_factory=list)  # every validation, in order
    stopped_early: bool = False  # early stopping ended training before max_steps / max_epochs
    hard: dict[EdgeType, int] = field(default_factory=dict)  # hard negatives drawn per type

    def epochs_left(self) -> bool:
        """``max_epochs`` counts the first supervision type's epochs."""
        first = self.streams[0].train
        return not self.args.max_epochs or first.epochs_done + first.epoch_full() < self.args.max_epochs

    def save(self, metrics: dict) -> None:
        _save(self.ckpt_dir, self.model, self.optimizer, self.cfg, self.args, self.step, metrics)


@dataclass
class _Interval:
    """Seconds waiting for batches and computing, and the loss, since the last log line."""

    wait_s: float = 0.0
    compute_s: float = 0.0
    loss_sum: float = 0.0


def _worker(local_rank: int, info: ClusterInfo, args: TrainerArgs, run_dir: str,
            data_root: str | None, source: DatasetSource, supervision_order: list[EdgeType],
            resume: Checkpoint | None) -> None:
    """One training process, in the order of the module docs: join, build, fit the baselines,
    train (validating on the way), test and save, leave, report."""
    from graphstore.modes.graph_store.compute import init_compute_process, shutdown_compute_process
    from graphstore.runtime.cli import setup_logging

    setup_logging(f"train{info.machine_index}.{local_rank}")
    t_start = time.perf_counter()
    device = init_compute_process(local_rank, info)
    run = _start(info, local_rank, args, run_dir, source, supervision_order, resume, device,
                 joined_s=time.perf_counter() - t_start)
    with run.tlog.phase("baselines"):
        run.evaluator.fit_baselines(run.train_inputs)
    _train(run)
    summary = _test_and_save(run, seconds=lambda: time.perf_counter() - t_start)
    shutdown_compute_process()
    run.tlog.close()
    if run.rank == 0:
        log.info("report written: %s", _report(run_dir, data_root, run.job, run.evaluator, summary))


def _start(info: ClusterInfo, local_rank: int, args: TrainerArgs, run_dir: str,
           source: DatasetSource, supervision_order: list[EdgeType], resume: Checkpoint | None,
           device: Any, joined_s: float) -> _Run:
    """The dataset, the model (resumed from ``resume``), the optimizer and every loader (the
    same loaders in the same order on every rank: their creation is a collective)."""
    rank = dist.get_rank()
    tlog = TrainingLog(_tensorboard(run_dir) if args.tensorboard and rank == 0 else None)
    tlog.add_phase("join cluster", joined_s)
    torch.manual_seed(args.seed)
    with tlog.phase("open dataset, loaders"):
        job = Job(source.open(info, local_rank), supervision_order, device=device.torch_device)
        cfg = _model_config(job, args)
        model = LinkPredictionEncoder(cfg).to(device.torch_device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                      weight_decay=args.weight_decay)
        step = 0
        if resume is not None:
            model.load_state_dict(resume.state_dict)
            if resume.optimizer is not None:
                optimizer.load_state_dict(resume.optimizer)
            step = resume.step
            log.info("resuming from %s at step=%d", RunPaths(run_dir).checkpoint, step)
        ddp = device.ddp(model, find_unused_parameters=True)  # device_ids + NCCL on CUDA
        streams, popularity, train_inputs = _open_streams(job, args, device.torch_device)
    # the other ranks wait in a collective while one fits: stay well inside its timeout
    evaluator = Evaluator(job, args, fit_budget_s=info.runtime.cluster_init_timeout_s / 3)
    hard = {s.sup.key: 0 for s in streams if _hard_per_anchor(job, s.sup, args)}
    return _Run(args=args, job=job, cfg=cfg, model=model, ddp=ddp, optimizer=optimizer,
                streams=streams, popularity=popularity, train_inputs=train_inputs,
                evaluator=evaluator, tlog=tlog, ckpt_dir=RunPaths(run_dir).checkpoint, rank=rank,
                step=step, start_step=step, stopper=EarlyStopping(args.early_stopping_patience),
                hard=hard)


def _model_config(job: Job, args: TrainerArgs) -> ModelConfig:
    dims = {nt: job.meta.node_feature_dims[nt] for nt in job.meta.node_types}
    return ModelConfig(node_feature_dims=dims, edge_types=job.edge_types,
                       hidden_dim=args.hidden_dim, out_dim=args.out_dim,
                       num_layers=args.num_layers, decoder=args.decoder, dropout=args.dropout,
                       id_embedding_counts=id_embedding_counts(
                           args.id_embeddings, job.meta.node_counts, args.id_embedding_max_nodes))


def _open_streams(job: Job, args: TrainerArgs, device: torch.device
                  ) -> tuple[list[_Stream], dict[EdgeType, torch.Tensor], dict[EdgeType, Any]]:
    """Per supervision type (manifest order): its train ABLP loader and random-negative loader,
    the label nodes' popularity, and the training input."""
    from graphstore.dataset.loaders import DistABLPLoader, DistNeighborLoader

    streams, popularity, train_inputs = [], {}, {}
    for sup in job.sups:
        train_input = train_inputs[sup.key] = sup.ablp_input("train")
        popularity[sup.key] = sup.popularity(train_input).to(device)
        train = DistABLPLoader(job.ds, list(args.num_neighbors), train_input,
                               batch_size=args.batch_size, shuffle=True, drop_last=True,
                               supervision_edge_type=sup.key, num_workers=args.sampling_workers,
                               hard_negatives_per_anchor=_hard_per_anchor(job, sup, args))
        negatives = DistNeighborLoader(job.ds, list(args.num_neighbors),
                                       sup.node_input(sup.label_ids()),
                                       batch_size=args.num_random_negatives, shuffle=True,
                                       num_workers=args.sampling_workers) \
            if args.num_random_negatives else None
        streams.append(_Stream(sup, EpochStream(train, sup.steps_per_epoch(train_input,
                                                                           args.batch_size)),
                               EpochStream(negatives) if negatives is not None else None))
    return streams, popularity, train_inputs


def _train(run: _Run) -> None:
    """Steps until ``max_steps`` or ``max_epochs``, validating every ``val_every_steps`` (and at
    the end with early stopping), stopping early when the validations say so."""
    args, interval = run.args, _Interval()
    while run.step < args.max_steps and run.epochs_left():
        _train_step(run, interval)
        if run.step % args.log_every_steps == 0:
            _log_interval(run, interval)
            interval = _Interval()
        last = run.step >= args.max_steps or not run.epochs_left()
        if _validation_due(run, last):
            _validate(run.evaluator, run.model, run.step, run.history, run.stopper, run.tlog,
                      run.rank, lambda: run.save({"val_history": run.history}))
            if run.stopper.should_stop() and not last:
                run.stopped_early = True
                log.info("early stop at step=%d: val MRR %.4f at step=%d not beaten in %d "
                         "validations", run.step, run.stopper.best_mrr, run.stopper.best_step,
                         run.stopper.misses)
                break
    run.tlog.add_phase("training steps", run.tlog.wait_s + run.tlog.compute_s)


def _train_step(run: _Run, interval: _Interval) -> None:
    """One optimizer step over every supervision type's batch (DDP all-reduces gradients)."""
    args = run.args
    t0 = time.perf_counter()
    batches = [(s.sup, s.train.next(), s.negatives.next() if s.negatives else None)
               for s in run.streams]
    t1 = time.perf_counter()
    loss = 0
    for sup, batch, neg in batches:
        sup_loss, drawn = _loss(run.ddp, run.job, sup, batch, neg, args, run.popularity[sup.key])
        loss = loss + sup_loss
        if sup.key in run.hard:
            run.hard[sup.key] += drawn
    run.optimizer.zero_grad()
    loss.backward()
    set_lr(run.optimizer, args.lr * lr_factor(run.step, args.max_steps, args.lr_schedule,
                                              args.warmup_steps))
    run.optimizer.step()
    run.step += 1
    t2 = time.perf_counter()
    interval.wait_s += t1 - t0
    interval.compute_s += t2 - t1
    interval.loss_sum += float(loss)
    run.tlog.step_times(t1 - t0, t2 - t1)


def _log_interval(run: _Run, interval: _Interval) -> None:
    """Rank 0's log line (and TensorBoard point) for the last ``log_every_steps`` steps."""
    if run.rank != 0:
        return
    every = run.args.log_every_steps
    total = interval.wait_s + interval.compute_s
    mean = interval.loss_sum / every
    log.info("step=%d loss=%.4f batches_per_s=%.1f wait_share=%.2f%s", run.step, mean,
             every / total, interval.wait_s / total,
             "".join(f" hard_negatives.{k}={n}" for k, n in run.hard.items()))
    run.tlog.interval(run.step, mean, every / total, interval.wait_s / total)


def _validation_due(run: _Run, last: bool) -> bool:
    """Every ``val_every_steps`` before the last step; with early stopping, also at the end
    (unless this step was just validated): the best validation's weights are the ones tested."""
    args = run.args
    if run.step % args.val_every_steps == 0 and run.step < args.max_steps:
        return True
    return bool(last and run.stopper.patience
                and (not run.history or run.history[-1]["step"] != run.step))


def _test_and_save(run: _Run, seconds: Callable[[], float]) -> dict:
    """Close the training loaders, test (the best validation's weights under early stopping),
    and on rank 0 write the checkpoint and ``metrics.json``; returns the summary."""
    for s in run.streams:
        s.train.close()
        if s.negatives is not None:
            s.negatives.close()
    if run.stopper.best_state is not None:
        run.model.load_state_dict(run.stopper.best_state)
    with run.tlog.phase("test"):
        test = run.evaluator.run(run.model, "test")
    run.evaluator.close()
    summary = _summary(run, test, seconds())
    if run.rank == 0:
        run.tlog.evaluation("test", run.step, test)
        run.save(summary)
        for key, r in test["by_supervision_edge_type"].items():
            log.info("train done steps=%d %s test_mrr=%.4f %s%s seconds=%.1f", run.step, key,
                     r["model"]["mrr"], _baseline_mrrs(r, "test_"), _full_ranking(r),
                     summary["seconds"])
    return summary


def _summary(run: _Run, test: dict, seconds: float) -> dict:
    """``metrics.json``: steps, time, every validation, test, baselines, phases, protocol; the
    hard negatives rank 0's batches drew; the early stopping outcome."""
    args, stopper = run.args, run.stopper
    summary = {"steps": run.step, "seconds": round(seconds, 1), "val_history": run.history,
               "test": test, "baselines": run.evaluator.baselines, **run.tlog.to_dict(),
               "protocol": _protocol(args)}
    if run.hard:
        steps = max(run.step - run.start_step, 1)
        summary["hard_negatives"] = {
            k: {"per_anchor": args.hard_negatives_per_anchor, "drawn_rank0": n,
                "per_step_rank0": round(n / steps, 1)} for k, n in run.hard.items()}
    if stopper.patience:
        summary["early_stopping"] = {"best_step": stopper.best_step,
                                     "best_val_mrr": stopper.best_mrr,
                                     "stopped_early": run.stopped_early}
    return summary


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
            "every baseline; every known positive of the anchor (any split) is skipped"
            + (f"; test also full ranking: each test anchor against every label node, its "
               f"training pairs masked, recall@{args.full_ranking_k} and "
               f"NDCG@{args.full_ranking_k} averaged over anchors (label types of at most "
               f"{args.full_ranking_max_labels} nodes)" if args.full_ranking_k else ""))


def _baseline_mrrs(result: dict, prefix: str = "") -> str:
    """``popularity_mrr=0.0280 bpr_mrr=...`` of the baselines in one evaluation result."""
    return " ".join(f"{prefix}{who}_mrr={v['mrr']:.4f}" for who, v in result.items()
                    if who != "model" and isinstance(v, dict) and "mrr" in v)


def _full_ranking(result: dict) -> str:
    """`` full_recall@20: model=0.2101 lightgcn=...`` of a test result with a full ranking."""
    full = result.get("full_ranking")
    if not full:
        return ""
    key = f"recall@{full['k']}"
    return f" full_{key}: " + " ".join(f"{who}={v[key]:.4f}" for who, v in full.items()
                                       if isinstance(v, dict))


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
