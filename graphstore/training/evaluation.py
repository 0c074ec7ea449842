"""Ranking evaluation of every supervision type, the model and its baselines under one protocol
(the metrics: graphstore.training.metrics).

Candidates: per supervision type, ``eval_candidates`` label-type nodes drawn uniformly at random
with the trainer's seed (graphstore.training.candidates), the same set at every evaluation, for
the model and for every baseline, in both modes. Each rank embeds the candidates its input
partitions own (graph store: all of them; colocated: its machine's); the ranks then share what
they embedded, each id once, with the lowest rank's embedding, and check that the shared set is
the drawn one. Each (anchor, positive) pair of the split is ranked against them, filtered: a
candidate that is a known positive of the row's anchor, in any split, is skipped (with a
per-edge split an anchor's training positives are among them).

Baselines (graphstore.training.baselines) are fitted once, before training, on the training
pairs of every rank (gathered), each embedding baseline on one rank (spread over the ranks, so
they fit side by side) and sent to the others. Sums are all-reduced, so every rank returns the
same result. Loaders are created in the same order on every rank (a collective); ``Evaluator``
keeps them between evaluations. Ranking runs on the CPU.

Full ranking (graphstore.training.full_ranking), on the test split only, when
``full_ranking_k`` > 0 and the label type has at most ``full_ranking_max_labels`` nodes: every
label node is embedded (the candidates when they are all of them, else one more loader over
every id); each anchor of the split is ranked against all of them, its training pairs (gathered
for the baselines) masked. The anchors' embeddings come from the same pair batches the sampled
ranking reads (an anchor's first batch); the ranks share their anchors and pairs, then each
ranks every ``world``-th anchor (ascending id), for the model and every baseline.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.runtime.errors import RuntimeFailure
from graphstore.training import metrics as M
from graphstore.config.default_args import TrainerArgs
from graphstore.training.baselines import (
    DEFAULT_SETTINGS, EMBEDDING_BASELINES, POPULARITY_SETTINGS, PairGraph, PopularityScorer,
    Scorer, fit,
)
from graphstore.training.batches import seed_count
from graphstore.training.candidates import by_partition, fingerprint, sample_candidates
from graphstore.training.collectives import all_gather_rows, broadcast_from
from graphstore.training.full_ranking import PairIndex, finalize as finalize_full, score_in_chunks
from graphstore.training.job import Job, Supervision

log = logging.getLogger(__name__)
CPU = torch.device("cpu")


class Evaluator:
    """Ranks every supervision type's pairs of a split; keeps its loaders between evaluations.

    Creating a graph-store loader starts sampling processes on every storage server (seconds
    each), so each supervision type's candidate loader and each (type, split) pair loader is
    created once, at its first use, and iterated again at the next evaluation (each evaluation
    reads every batch, so the next ``iter()`` starts a clean epoch). Creation order is the same on
    every rank (a collective). ``close()`` shuts them all down.

    After :meth:`run`, ``samples[key]`` holds the candidates' ids and model embeddings of that
    evaluation (a uniform sample of the label type: the run report projects them).
    """

    def __init__(self, job: Job, args: TrainerArgs, fit_device: torch.device = CPU,
                 fit_budget_s: float = float("inf")) -> None:
        """``fit_device``: where the embedding baselines are fitted; ``fit_budget_s``: seconds each
        may take (checked between its epochs; keep it below the process group's timeout, which
        the other ranks wait under)."""
        self.job, self.args = job, args
        self.fit_device, self.fit_budget_s = fit_device, fit_budget_s
        self._candidates: dict[str, tuple[object, torch.Tensor]] = {}
        self._all_labels: dict[str, tuple[object, torch.Tensor]] = {}
        self.train_pairs: dict[str, PairIndex] = {}  # every rank's training pairs, per type
        self._pairs: dict[tuple[str, str], object] = {}
        self.scorers: dict[str, dict[str, Scorer]] = {}
        self.anchor_degree: dict[str, torch.Tensor] = {}
        self.label_degree: dict[str, torch.Tensor] = {}
        self.baselines: dict[str, dict] = {}  # name -> settings (+ epochs run, seconds per type)
        self.samples: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # -- baselines --------------------------------------------------------------------------------
    def fit_baselines(self, train_inputs: dict[str, dict[int, ABLPInputNodes]]) -> None:
        """Fit ``args.baselines`` for every supervision type on the training pairs of every rank
        (``train_inputs[key]``: this rank's training input of that type). A collective."""
        job, args = self.job, self.args
        rank, world = dist.get_rank(), dist.get_world_size()
        graphs = {}
        for sup in job.sups:
            pairs = torch.cat(all_gather_rows(sup.train_pairs(train_inputs[sup.key]).T), 0).T
            n_anchor = job.meta.node_counts[sup.anchor_type]
            n_label = job.meta.node_counts[sup.label_type]
            self.anchor_degree[sup.key] = torch.bincount(pairs[0], minlength=n_anchor)
            self.label_degree[sup.key] = torch.bincount(pairs[1], minlength=n_label)
            self.train_pairs[sup.key] = PairIndex.from_pairs(pairs, n_anchor, n_label)
            self.scorers[sup.key] = {}
            if "popularity" in args.baselines:
                self.scorers[sup.key]["popularity"] = PopularityScorer(self.label_degree[sup.key])
                self.baselines["popularity"] = dict(POPULARITY_SETTINGS)
            graphs[sup.key] = PairGraph(pairs, n_anchor, n_label,
                                        same_type=sup.anchor_type == sup.label_type)
        jobs = [(sup.key, name) for sup in job.sups for name in args.baselines
                if name in EMBEDDING_BASELINES]
        mine = {}
        for i, (key, name) in enumerate(jobs):  # job i on rank i % world: side by side
            if i % world == rank:
                settings = DEFAULT_SETTINGS[name].__class__(**{**DEFAULT_SETTINGS[name].__dict__,
                                                              "seed": args.seed})
                mine[i] = fit(name, graphs[key], settings, self.fit_device, self.fit_budget_s)
        for i, (key, name) in enumerate(jobs):
            graph, settings = graphs[key], DEFAULT_SETTINGS[name]
            table, epochs, seconds = mine.get(i, (torch.empty(graph.num_nodes, settings.dim), 0, 0.0))
            table = broadcast_from(table, i % world)
            done = broadcast_from(torch.tensor([float(epochs), seconds]), i % world)
            self.scorers[key][name] = graph.split(table)
            info = self.baselines.setdefault(name, {**settings.describe(name), "seed": args.seed})
            info.setdefault("epochs_run", {})[key] = round(float(done[0]), 2)
            info.setdefault("seconds", {})[key] = round(float(done[1]), 1)

    # -- evaluation -------------------------------------------------------------------------------
    def run(self, model, split: str) -> dict:
        """Every supervision type's result under ``by_supervision_edge_type``; the first type's
        result also at the top level (what single-type readers and the pipeline summary read)."""
        results = {sup.key: self._one(model, sup, split) for sup in self.job.sups}
        first = results[self.job.sups[0].key]
        return {**first, "by_supervision_edge_type": results}

    def close(self) -> None:
        nodes = [*self._candidates.values(), *self._all_labels.values()]
        for loader in [*self._pairs.values(), *(c[0] for c in nodes)]:
            loader.shutdown()
        self._pairs.clear()
        self._candidates.clear()
        self._all_labels.clear()

    def _node_loader(self, sup: Supervision, ids: torch.Tensor):
        """A loader over label nodes ``ids``: each rank gets those its input partitions own."""
        from graphstore.dataset.loaders import DistNeighborLoader

        job, args = self.job, self.args
        book = job.ds.fetch_node_partition_book(sup.label_type)
        inputs = by_partition(ids, book, tuple(job.ds.input_partitions))
        return DistNeighborLoader(job.ds, list(args.num_neighbors), sup.node_input(inputs),
                                  batch_size=1024, num_workers=args.sampling_workers)

    def _loaders(self, sup: Supervision, split: str):
        from graphstore.dataset.loaders import DistABLPLoader

        job, args = self.job, self.args
        if sup.key not in self._candidates:
            ids = sample_candidates(job.meta.node_counts[sup.label_type], args.eval_candidates,
                                    args.seed)
            self._candidates[sup.key] = (self._node_loader(sup, ids), ids)
        if (sup.key, split) not in self._pairs:
            self._pairs[sup.key, split] = DistABLPLoader(
                job.ds, list(args.num_neighbors), sup.ablp_input(split),
                batch_size=args.batch_size, supervision_edge_type=sup.key,
                num_workers=args.sampling_workers)
        return self._candidates[sup.key], self._pairs[sup.key, split]

    def _embed_candidates(self, model, sup: Supervision, loader,
                          expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates' model embeddings and ids (sorted), the same on every rank."""
        job = self.job
        embs, ids = [], []
        for batch in loader:
            h, v = job.embed(model, batch)
            k = seed_count(batch, sup.label_type, job.homo is not None)
            embs.append(h[sup.label_type][:k].cpu())
            ids.append(v.node_ids[sup.label_type][:k].cpu())
        emb = torch.cat(embs) if embs else torch.empty(0, self.args.out_dim)
        cand_id = torch.cat(ids) if ids else torch.empty(0, dtype=torch.long)
        emb, cand_id = _gather_candidates(emb, cand_id)
        if not torch.equal(cand_id, expected):
            raise RuntimeFailure(f"evaluation of {sup.key}: the ranks embedded {len(cand_id)} "
                                 f"candidates, not the {len(expected)} drawn")
        return emb, cand_id

    def _one(self, model, sup: Supervision, split: str) -> dict:
        """``{"model": metrics, <baseline>: metrics..., "candidates_per_pair": n, ...}``."""
        job = self.job
        (cand_loader, expected), loader = self._loaders(sup, split)
        scorers = self.scorers.get(sup.key, {})
        degree = self.anchor_degree.get(sup.key)
        names = ["model", *scorers]
        n_labels = job.meta.node_counts[sup.label_type]
        full = self._full_ranking_on(sup, split)
        seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (a, a_id, p_id)
        model.eval()
        with torch.no_grad():
            cand_emb, cand_id = self._embed_candidates(model, sup, cand_loader, expected)
            known = sup.positive_pairs(cand_id)
            known = torch.unique(known[0] * n_labels + known[1])  # (anchor, candidate) keys
            sums, cold = torch.zeros(len(names), 5), torch.zeros(1)
            for batch in loader:
                a, p, a_id, p_id = job.pair_embeddings(model, batch, sup)
                a_id, p_id = a_id.cpu(), p_id.cpu()
                if full:
                    seen.append((a.cpu(), a_id, p_id))
                mask = torch.isin(a_id[:, None] * n_labels + cand_id[None, :], known)
                rows = [M.metric_sums(M.ranks((a * p).sum(-1).cpu(), (a @ cand_emb.T.to(a.device)).cpu(),
                                              mask))]
                rows += [M.metric_sums(M.ranks(s.pair_scores(a_id, p_id),
                                               s.candidate_scores(a_id, cand_id), mask))
                         for s in scorers.values()]
                sums += torch.stack(rows)
                if degree is not None:
                    cold += (degree[a_id] == 0).sum()
            ranked = (self._full_ranking(model, sup, seen, scorers, cand_emb, cand_id)
                      if full else None)
        dist.all_reduce(sums)
        dist.all_reduce(cold)
        model.train()
        self.samples[sup.key] = (cand_id, cand_emb)
        result = {name: M.finalize(sums[i]) for i, name in enumerate(names)}
        count = float(sums[0, 0])
        result.update(candidates_per_pair=int(cand_id.numel()), candidates=fingerprint(cand_id))
        if degree is not None:
            result["cold_anchor_share"] = round(float(cold) / count, 4) if count else 0.0
        if ranked is not None:
            result["full_ranking"] = ranked
        return result

    def _full_ranking_on(self, sup: Supervision, split: str) -> bool:
        args = self.args
        n_labels = self.job.meta.node_counts[sup.label_type]
        if split != "test" or args.full_ranking_k <= 0 or sup.key not in self.train_pairs:
            return False
        if n_labels > args.full_ranking_max_labels:
            log.info("full ranking of %s skipped: %d label nodes > full_ranking_max_labels %d",
                     sup.key, n_labels, args.full_ranking_max_labels)
            return False
        return True

    def _full_ranking(self, model, sup: Supervision,
                      seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                      scorers: dict[str, Scorer], cand_emb: torch.Tensor,
                      cand_id: torch.Tensor) -> dict:
        """``{"k", "labels", "model": {...}, <baseline>: {...}}`` (module docs). A collective."""
        job, args, k = self.job, self.args, self.args.full_ranking_k
        n_anchors = job.meta.node_counts[sup.anchor_type]
        n_labels = job.meta.node_counts[sup.label_type]
        label_id = torch.arange(n_labels)
        if torch.equal(cand_id, label_id):
            label_emb = cand_emb
        else:
            if sup.key not in self._all_labels:
                self._all_labels[sup.key] = (self._node_loader(sup, label_id), label_id)
            label_emb, _ = self._embed_candidates(model, sup, self._all_labels[sup.key][0], label_id)
        emb = torch.cat([s[0] for s in seen]) if seen else torch.empty(0, args.out_dim)
        a_id = torch.cat([s[1] for s in seen]) if seen else torch.empty(0, dtype=torch.long)
        p_id = torch.cat([s[2] for s in seen]) if seen else torch.empty(0, dtype=torch.long)
        pairs = torch.stack([torch.cat(all_gather_rows(a_id)), torch.cat(all_gather_rows(p_id))])
        split = PairIndex.from_pairs(pairs, n_anchors, n_labels)
        mine, first = _first_occurrence(a_id)
        anchor_emb, anchors = _gather_candidates(emb[first], mine)  # every anchor once, ascending
        rank, world = dist.get_rank(), dist.get_world_size()
        anchor_emb, anchors = anchor_emb[rank::world], anchors[rank::world].contiguous()
        label_emb_t = label_emb.T.contiguous()

        def model_scores(part: torch.Tensor) -> torch.Tensor:
            return anchor_emb[torch.searchsorted(anchors, part)] @ label_emb_t

        score_fns = [model_scores] + [
            (lambda part, s=s: s.candidate_scores(part, label_id)) for s in scorers.values()]
        train = self.train_pairs[sup.key]
        sums = torch.stack([score_in_chunks(fn, anchors, train, split, k) for fn in score_fns])
        dist.all_reduce(sums)
        out: dict = {"k": k, "labels": n_labels}
        for name, row in zip(["model", *scorers], sums):
            out[name] = finalize_full(row, k)
        return out


def _gather_candidates(emb: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's candidates, each id once (ranks that read the same partitions hold the same
    ones), in id order, with the embedding of the lowest rank that holds the id."""
    emb, ids = torch.cat(all_gather_rows(emb)), torch.cat(all_gather_rows(ids))
    unique, first = _first_occurrence(ids)
    return emb[first], unique


def _first_occurrence(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique ids and the index of each one's first occurrence in ``ids``."""
    unique, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((len(unique),), len(ids), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(len(ids)), reduce="amin")
    return unique, first
