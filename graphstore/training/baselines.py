"""The baselines the model is compared with, scored under the evaluation protocol of the model.

Each baseline is fitted on the same training (anchor, label) pairs of a supervision edge type
the model trains on (every rank's training input, gathered) and scores pairs the way the model
does: ``score(anchor, label)``, higher is better (graphstore.training.evaluation ranks them
against the same candidates, with the same filter).

- ``popularity``: the label's number of training positives (the same score for every anchor).
- ``bpr``: matrix factorisation with one embedding per node (identity embeddings), trained with
  the BPR loss (Rendle et al., UAI 2009): one uniformly drawn label per training pair as its
  negative, L2 on the batch's embeddings, SparseAdam.
- ``lightgcn``: PyG's :class:`torch_geometric.nn.LightGCN` (He et al., SIGIR 2020) on the
  training pairs as an undirected graph (symmetrically normalised once), trained with its BPR
  ``recommendation_loss``, one uniform negative per pair, Adam.

Node numbering of the embedding baselines: when anchor and label types differ, anchors are
``0..A-1`` and labels ``A..A+L-1`` of one table; when they are the same type, one table of its
nodes. Anchors without a training pair (held-out anchors of a node split: cold start) keep their
random initial embedding, so these baselines rank them at random: they have no features.

Everything here is plain torch on the ``device`` given (CPU by default): no process group; the
trainer decides which rank fits which baseline (graphstore.training.evaluation).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from graphstore.config.default_args import BASELINES, BaselineName

log = logging.getLogger(__name__)

EMBEDDING_BASELINES: tuple[BaselineName, ...] = ("bpr", "lightgcn")


class Scorer(Protocol):
    """What the evaluation asks of a baseline (ids are dense ids of the supervision's types)."""

    def pair_scores(self, anchor_ids: torch.Tensor, label_ids: torch.Tensor) -> torch.Tensor:
        """``[P]`` scores of the pairs ``(anchor_ids[i], label_ids[i])``."""

    def candidate_scores(self, anchor_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        """``[P, K]`` scores of each anchor against every candidate label."""


@dataclass(frozen=True, kw_only=True)
class FitSettings:
    """How an embedding baseline is trained; written into metrics.json beside its results.

    ``epochs`` passes over the training pairs in batches of ``batch_size`` pairs (shuffled with
    ``seed``), each pair with ``negatives`` uniform labels; ``l2`` weighs the squared norm of the
    batch's (layer-0) embeddings; ``num_layers`` is LightGCN's propagation depth (unused by
    ``bpr``)."""

    dim: int = 64
    epochs: int = 40
    batch_size: int = 4096
    lr: float = 0.01
    l2: float = 1e-4
    num_layers: int = 3
    negatives: int = 1
    seed: int = 0

    def describe(self, name: BaselineName) -> dict:
        """The settings of ``name`` as metrics.json states them."""
        d = asdict(self)
        if name != "lightgcn":
            d.pop("num_layers")
        return {"method": {"bpr": "matrix factorisation, BPR loss, SparseAdam",
                           "lightgcn": "torch_geometric.nn.LightGCN, BPR loss, Adam"}[name], **d}


POPULARITY_SETTINGS = {"method": "training positives per label node"}
DEFAULT_SETTINGS: dict[BaselineName, FitSettings] = {
    # measured on MovieLens-100K (per-edge split) and the default synthetic data: a few seconds
    # each on 2 CPU cores; more epochs give LightGCN a little more (see docs/quality.md)
    "bpr": FitSettings(dim=64, epochs=20, batch_size=4096, lr=0.005, l2=1e-4),
    "lightgcn": FitSettings(dim=64, epochs=30, batch_size=16384, lr=0.03, l2=1e-4, num_layers=3),
}
"""The settings each embedding baseline is fitted with (``seed`` replaced by the trainer's)."""


class PopularityScorer:
    """Scores a label by its training positives (``counts[label]``), whatever the anchor."""

    def __init__(self, counts: torch.Tensor) -> None:
        self.counts = counts.float()

    def pair_scores(self, anchor_ids: torch.Tensor, label_ids: torch.Tensor) -> torch.Tensor:
        return self.counts[label_ids]

    def candidate_scores(self, anchor_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        return self.counts[cand_ids][None, :].expand(len(anchor_ids), -1)


class EmbeddingScorer:
    """Dot products of per-node embeddings: ``anchor_emb[a] . label_emb[l]``."""

    def __init__(self, anchor_emb: torch.Tensor, label_emb: torch.Tensor) -> None:
        self.anchor_emb, self.label_emb = anchor_emb, label_emb

    def pair_scores(self, anchor_ids: torch.Tensor, label_ids: torch.Tensor) -> torch.Tensor:
        return (self.anchor_emb[anchor_ids] * self.label_emb[label_ids]).sum(-1)

    def candidate_scores(self, anchor_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        return self.anchor_emb[anchor_ids] @ self.label_emb[cand_ids].T


@dataclass(frozen=True)
class PairGraph:
    """Training pairs of one supervision type in the embedding baselines' numbering."""

    pairs: torch.Tensor  # [2, E] (anchor, label) dense ids
    num_anchors: int
    num_labels: int
    same_type: bool

    @property
    def num_nodes(self) -> int:
        return self.num_labels if self.same_type else self.num_anchors + self.num_labels

    @property
    def label_offset(self) -> int:
        return 0 if self.same_type else self.num_anchors

    def split(self, table: torch.Tensor) -> EmbeddingScorer:
        """The scorer of one embedding table in this numbering."""
        if self.same_type:
            return EmbeddingScorer(table, table)
        return EmbeddingScorer(table[:self.num_anchors], table[self.num_anchors:])


class _Batches:
    """Shuffled ``(anchor rows, positive rows, negative rows [B, negatives])`` batches, in table
    rows, epoch after epoch, ``s.epochs`` of them or fewer: iteration stops at the first batch
    that would start after ``deadline`` (time.monotonic). ``epochs_run`` counts what was given
    (a fraction when the deadline cut an epoch)."""

    def __init__(self, graph: PairGraph, s: FitSettings, gen: torch.Generator,
                 device: torch.device, deadline: float) -> None:
        self.graph, self.s, self.gen, self.device, self.deadline = graph, s, gen, device, deadline
        self.per_epoch = max(1, math.ceil(graph.pairs.size(1) / s.batch_size))
        self.steps = 0

    @property
    def epochs_run(self) -> float:
        return round(self.steps / self.per_epoch, 2)

    def __iter__(self):
        graph, s = self.graph, self.s
        anchors, labels = graph.pairs[0], graph.pairs[1] + graph.label_offset
        for _ in range(s.epochs):
            order = torch.randperm(anchors.numel(), generator=self.gen)
            for start in range(0, anchors.numel(), s.batch_size):
                if time.monotonic() >= self.deadline:
                    return
                idx = order[start:start + s.batch_size]
                neg = torch.randint(graph.num_labels, (idx.numel(), s.negatives), generator=self.gen)
                yield (anchors[idx].to(self.device), labels[idx].to(self.device),
                       (neg + graph.label_offset).to(self.device))
                self.steps += 1


def fit_bpr(graph: PairGraph, s: FitSettings, device: torch.device | str = "cpu",
            budget_s: float = float("inf")) -> tuple[torch.Tensor, float]:
    """Matrix factorisation with the BPR loss (module docs). Returns the trained table
    ``[num_nodes, dim]`` (on the CPU) and the epochs run: all of ``s.epochs`` unless
    ``budget_s`` seconds ran out first (checked before each batch; then a fraction)."""
    device = torch.device(device)
    deadline = time.monotonic() + budget_s
    gen = torch.Generator(device="cpu").manual_seed(s.seed)
    emb = torch.nn.Embedding(graph.num_nodes, s.dim, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(graph.num_nodes, s.dim, generator=gen).mul_(0.1))
    emb = emb.to(device)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=s.lr)
    batches = _Batches(graph, s, gen, device, deadline)
    for a, p, n in batches:
        ea, ep, en = emb(a), emb(p), emb(n)
        pos = (ea * ep).sum(-1, keepdim=True)
        neg = (ea[:, None, :] * en).sum(-1)
        reg = (ea.square().sum() + ep.square().sum() + en.square().sum()) / len(a)
        loss = -F.logsigmoid(pos - neg).mean() + s.l2 * reg
        opt.zero_grad()
        loss.backward()
        opt.step()
    return emb.weight.detach().cpu(), batches.epochs_run


def normalized_adjacency(graph: PairGraph, device: torch.device):
    """The training pairs as an undirected graph, ``D^-1/2 A D^-1/2`` as a torch_sparse
    SparseTensor (computed once; LightGCN's layers then skip their own normalisation)."""
    from torch_sparse import SparseTensor

    a = graph.pairs[0]
    b = graph.pairs[1] + graph.label_offset
    row, col = torch.cat([a, b]), torch.cat([b, a])
    adj = SparseTensor(row=row, col=col, sparse_sizes=(graph.num_nodes, graph.num_nodes)).coalesce()
    deg = adj.sum(dim=1).clamp_min(1.0)
    inv_sqrt = deg.pow(-0.5)
    r, c, _ = adj.coo()
    value = inv_sqrt[r] * inv_sqrt[c]
    return SparseTensor(row=r, col=c, value=value,
                        sparse_sizes=(graph.num_nodes, graph.num_nodes)).to(device)


def fit_lightgcn(graph: PairGraph, s: FitSettings, device: torch.device | str = "cpu",
                 budget_s: float = float("inf")) -> tuple[torch.Tensor, float]:
    """PyG's LightGCN on the training pairs (module docs). Returns the propagated table
    ``[num_nodes, dim]`` (on the CPU) and the epochs run (as :func:`fit_bpr`)."""
    from torch_geometric.nn import LightGCN

    device = torch.device(device)
    deadline = time.monotonic() + budget_s
    gen = torch.Generator(device="cpu").manual_seed(s.seed)
    torch.manual_seed(s.seed)  # LightGCN's xavier initialisation
    model = LightGCN(graph.num_nodes, s.dim, s.num_layers, normalize=False).to(device)
    adj = normalized_adjacency(graph, device)
    # torch_sparse multiplies through a torch CSR tensor, which warns once that it is "beta"
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    opt = torch.optim.Adam(model.parameters(), lr=s.lr)
    batches = _Batches(graph, s, gen, device, deadline)
    for a, p, n in batches:
        out = model.get_embedding(adj)  # the whole graph propagated for every batch
        ea = out[a]
        pos = (ea * out[p]).sum(-1, keepdim=True).expand(-1, n.size(1)).reshape(-1)
        neg = (ea[:, None, :] * out[n]).sum(-1).reshape(-1)
        nodes = torch.cat([a, p, n.reshape(-1)])
        loss = model.recommendation_loss(pos, neg, node_id=nodes, lambda_reg=s.l2)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return model.get_embedding(adj).cpu(), batches.epochs_run


def fit(name: BaselineName, graph: PairGraph, s: FitSettings, device: torch.device | str = "cpu",
        budget_s: float = float("inf")) -> tuple[torch.Tensor, float, float]:
    """Fit the embedding baseline ``name``: its table (score it with ``graph.split``), the
    epochs run and the seconds it took."""
    t0 = time.perf_counter()
    fitter = {"bpr": fit_bpr, "lightgcn": fit_lightgcn}[name]
    table, epochs = fitter(graph, s, device, budget_s)
    seconds = time.perf_counter() - t0
    if epochs < s.epochs:
        log.warning("baseline %s stopped after %.2f of %d epochs: its %.0f s budget ran out",
                    name, epochs, s.epochs, budget_s)
    log.info("baseline %s fitted pairs=%d nodes=%d epochs=%g seconds=%.1f", name,
             graph.pairs.size(1), graph.num_nodes, epochs, seconds)
    return table, epochs, seconds
