"""Ranking evaluation of one supervision type (protocol: graphstore.training.metrics).

Candidates: the same ~``eval_candidates`` label nodes for every pair: slice 0 of every
partition's label ids. Each rank fetches slice 0 of its input partitions (graph store: every
partition; colocated: its machine's) and embeds them; the ranks then share what they embedded,
each id once, with the lowest rank's embedding. Each (anchor, positive) pair of the split is
ranked against them, filtered: a candidate that is a known positive of the row's anchor, in any
split, is skipped (with a per-edge split an anchor's training positives are among them). The
popularity baseline (training positives per label node) is scored under the same protocol. Sums
are all-reduced, so every rank returns the same result. Loaders are created in the same order on
every rank (a collective); ``Evaluator`` keeps them between evaluations.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from graphstore.training import metrics as M
from graphstore.training.args import TrainerArgs
from graphstore.training.batches import seed_count
from graphstore.training.job import Job, Supervision


class Evaluator:
    """Ranks every supervision type's pairs of a split; keeps its loaders between evaluations.

    Creating a graph-store loader starts sampling processes on every storage server (seconds
    each), so each supervision type's candidate loader and each (type, split) pair loader is
    created once, at its first use, and iterated again at the next evaluation (each evaluation
    reads every batch, so the next ``iter()`` starts a clean epoch). Creation order is the same on
    every rank (a collective). ``close()`` shuts them all down.
    """

    def __init__(self, job: Job, args: TrainerArgs, popularity: dict[str, torch.Tensor]) -> None:
        self.job, self.args, self.popularity = job, args, popularity
        self._candidates: dict[str, object] = {}
        self._pairs: dict[tuple[str, str], object] = {}

    def run(self, model, split: str) -> dict:
        """Every supervision type's result under ``by_supervision_edge_type``; the first type's
        result also at the top level (what single-type readers and the pipeline summary read)."""
        results = {sup.key: self._one(model, sup, split) for sup in self.job.sups}
        first = results[self.job.sups[0].key]
        return {**first, "by_supervision_edge_type": results}

    def close(self) -> None:
        for loader in [*self._pairs.values(), *self._candidates.values()]:
            loader.shutdown()
        self._pairs.clear()
        self._candidates.clear()

    def _loaders(self, sup: Supervision, split: str):
        from graphstore import DistABLPLoader, DistNeighborLoader

        job, args = self.job, self.args
        if sup.key not in self._candidates:
            n_labels = job.meta.node_counts[sup.label_type]
            world = max(1, n_labels // args.eval_candidates)
            self._candidates[sup.key] = DistNeighborLoader(
                job.ds, list(args.num_neighbors),
                sup.node_input(sup.label_ids(rank=0, world=world)), batch_size=1024)
        if (sup.key, split) not in self._pairs:
            self._pairs[sup.key, split] = DistABLPLoader(
                job.ds, list(args.num_neighbors), sup.ablp_input(split),
                batch_size=args.batch_size, supervision_edge_type=sup.key)
        return self._candidates[sup.key], self._pairs[sup.key, split]

    def _one(self, model, sup: Supervision, split: str) -> dict:
        """``{"model": metrics, "popularity": metrics, "candidates_per_pair": n}`` on ``split``."""
        job, args, popularity = self.job, self.args, self.popularity[sup.key]
        cand_loader, loader = self._loaders(sup, split)
        model.eval()
        with torch.no_grad():
            embs, ids = [], []
            for batch in cand_loader:
                h, v = job.embed(model, batch)
                k = seed_count(batch, sup.label_type, job.homo is not None)
                embs.append(h[sup.label_type][:k])
                ids.append(v.node_ids[sup.label_type][:k])
            cand_emb = torch.cat(embs) if embs else torch.empty(0, args.out_dim)
            cand_id = torch.cat(ids) if ids else torch.empty(0, dtype=torch.long)
            cand_emb, cand_id = _gather_candidates(cand_emb, cand_id)
            n_labels = job.meta.node_counts[sup.label_type]
            known = sup.positive_pairs(cand_id)
            known = torch.unique(known[0] * n_labels + known[1])  # (anchor, candidate) keys
            sums, pop_sums = torch.zeros(5), torch.zeros(5)
            for batch in loader:
                a, p, a_id, p_id = job.pair_embeddings(model, batch, sup)
                mask = torch.isin(a_id[:, None] * n_labels + cand_id[None, :], known)
                sums += M.metric_sums(M.ranks((a * p).sum(-1), a @ cand_emb.T, mask))
                pop = popularity[cand_id][None, :].expand(len(p_id), -1)
                pop_sums += M.metric_sums(M.ranks(popularity[p_id], pop, mask))
        dist.all_reduce(sums)
        dist.all_reduce(pop_sums)
        model.train()
        return {"model": M.finalize(sums), "popularity": M.finalize(pop_sums),
                "candidates_per_pair": int(cand_id.numel())}


def _gather_candidates(emb: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's candidates, each id once (ranks that read the same partitions hold the same
    ones), in id order, with the embedding of the lowest rank that holds the id: slice 0 of every
    partition, whichever partitions each rank reads."""
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(ids)]))
    most = int(max(int(x) for x in sizes))
    pad_emb = torch.zeros(most, emb.size(1))
    pad_emb[:len(ids)] = emb
    pad_ids = torch.full((most,), -1, dtype=torch.long)
    pad_ids[:len(ids)] = ids
    embs = [torch.empty_like(pad_emb) for _ in range(world)]
    all_ids = [torch.empty_like(pad_ids) for _ in range(world)]
    dist.all_gather(embs, pad_emb)
    dist.all_gather(all_ids, pad_ids)
    emb, ids = torch.cat(embs), torch.cat(all_ids)
    keep = ids >= 0
    emb, ids = emb[keep], ids[keep]
    unique, first = _first_occurrence(ids)
    return emb[first], unique


def _first_occurrence(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted unique ids and the index of each one's first occurrence in ``ids``."""
    unique, inverse = torch.unique(ids, return_inverse=True)
    first = torch.full((len(unique),), len(ids), dtype=torch.long)
    first.scatter_reduce_(0, inverse, torch.arange(len(ids)), reduce="amin")
    return unique, first
