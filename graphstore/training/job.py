"""What a training worker reads from its dataset: graph metadata and per-supervision-type inputs.

One :class:`Supervision` per supervision edge type of the dataset (in task config order), each with
its anchor and label node types and its inputs, fetched from storage (graph store) or from this
machine's partition (colocated). Batches and model inputs: graphstore.training.batches.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from graphstore.ablp import ABLPInputNodes
from graphstore.errors import UsageError
from graphstore.training.batches import view, without_pair_edges


class Supervision:
    """One supervision edge type ``(anchor, relation, label)`` and how to fetch its inputs."""

    def __init__(self, job: "Job", key: str) -> None:
        self.job, self.key = job, key
        self.edge_type = tuple(key.split("__"))
        self.anchor_type, self.label_type = self.edge_type[0], self.edge_type[2]

    def ablp_input(self, split: str):
        """This rank's anchors of ``split`` with their positives (of that split, per-edge)."""
        job = self.job
        if job.colocated:
            return job.ds.ablp_input(split, self.key, job.local_rank, job.local_world)
        return job.ds.fetch_ablp_input(split=split, supervision_edge_type=self.key)

    def positive_pairs(self, label_ids: torch.Tensor) -> torch.Tensor:
        """``[2, K]`` known (anchor, label) pairs, every split, whose label is in ``label_ids``:
        graph store, from every storage rank; colocated, this machine's anchors (the only
        anchors its ranks evaluate)."""
        job = self.job
        if job.colocated:
            return job.ds.positive_pairs(label_ids, self.key)
        return job.ds.fetch_positive_pairs(label_ids, self.key)

    def label_ids(self, rank: int | None = None, world: int | None = None):
        job = self.job
        if job.colocated:
            return job.ds.node_ids(self.label_type, rank=job.local_rank if rank is None else rank,
                                   world_size=job.local_world if world is None else world)
        return job.ds.fetch_node_ids(rank=rank, world_size=world, node_type=self.label_type)

    def node_input(self, ids):
        return ids if self.job.homo else (self.label_type, ids)

    def train_pairs(self, train_input) -> torch.Tensor:
        """``[2, P]`` (anchor, positive) dense ids of this rank's training input."""
        if isinstance(train_input, ABLPInputNodes):  # colocated
            return train_input.positive_labels[self.edge_type]
        parts = [x.positive_labels[self.edge_type] for x in train_input.values()]
        return torch.cat(parts, dim=1) if parts else torch.empty(2, 0, dtype=torch.long)

    def steps_per_epoch(self, train_input, batch_size: int) -> int:
        """Steps every rank can take per epoch: the minimum over ranks of full batches.

        DDP needs every rank to step together; GLT forms batches per storage rank (drop_last),
        so a rank's count is the sum over storage ranks of ``pairs // batch_size``.
        """
        job = self.job
        if job.colocated:
            full = self.train_pairs(train_input).size(1) // batch_size
        else:
            full = sum(x.positive_labels[self.edge_type].size(1) // batch_size
                       for x in train_input.values())
        count = torch.tensor([float(full)])
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        if count.item() < 1:
            raise UsageError(f"trainerConfig.trainerArgs.batch_size {batch_size} is larger than the "
                             f"{self.key} training pairs some compute rank gets from a storage "
                             "rank; lower it")
        return int(count.item())

    def popularity(self, train_input) -> torch.Tensor:
        """Training positives per label node, summed over ranks (the popularity baseline)."""
        counts = torch.zeros(self.job.meta["node_counts"][self.label_type])
        counts += torch.bincount(self.train_pairs(train_input)[1], minlength=len(counts)).float()
        dist.all_reduce(counts)
        return counts


class Job:
    """Dataset handle (remote or colocated), metadata, and the supervision types to train."""

    def __init__(self, dataset, local_rank: int, local_world: int, colocated: bool,
                 supervision_order: list[str] | None = None) -> None:
        """``supervision_order``: supervision type keys in the task config's order (the first is
        the one reported at the top level of the metrics); others follow in manifest order."""
        from graphlearn_torch.typing import reverse_edge_type

        self.ds, self.colocated = dataset, colocated
        self.local_rank, self.local_world = local_rank, local_world
        self.meta = meta = dataset.metadata
        order = list(supervision_order or [])
        keys = sorted(meta["supervision_edge_types"],
                      key=lambda k: order.index(k) if k in order else len(order))
        if not keys:
            raise UsageError("the dataset has no supervision edge types "
                             "(taskMetadata...supervisionEdgeTypes)")
        self.sups = [Supervision(self, k) for k in keys]
        types = [tuple(k.split("__")) for k in meta["edge_types"]]
        self.homo = (meta["node_types"][0], types[0]) if meta["homogeneous"] else None
        self.edge_types = tuple(dict.fromkeys(types + [reverse_edge_type(t) for t in types]))

    def embed(self, model, batch, drop: tuple[Supervision, torch.Tensor] | None = None):
        """Model output per node type and the batch view; ``drop=(sup, pairs)`` leaves the edges
        joining each pair out of message passing (see :meth:`pair_embeddings`)."""
        v = view(batch, self.homo)
        edges = v.edge_index
        if drop is not None:
            sup, pairs = drop
            edges = without_pair_edges(edges, sup.anchor_type, sup.label_type, pairs, v.num_nodes)
        return model(v.x, edges, v.num_nodes), v

    def pair_embeddings(self, model, batch, sup: Supervision):
        """Embeddings and dense ids of an ABLP batch's (anchor, positive) pairs. The edges joining
        each pair are left out of message passing: with them, a model learns "linked = positive",
        which holds for training pairs only (the splitter removes val/test pairs from the graph),
        and ranked worse than random here."""
        y = batch.y_positive
        h, v = self.embed(model, batch, drop=(sup, y))
        return (h[sup.anchor_type][y[0]], h[sup.label_type][y[1]],
                v.node_ids[sup.anchor_type][y[0]], v.node_ids[sup.label_type][y[1]])
