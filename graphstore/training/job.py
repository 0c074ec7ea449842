"""What a training worker reads from its dataset: graph metadata and per-supervision-type inputs.

One :class:`Supervision` per supervision edge type of the dataset (in task config order), each with
its anchor and label node types and its inputs, fetched through the
:class:`~graphstore.dataset.graph_dataset.GraphDataset` contract: the same calls whether the dataset is the
storage cluster (graph store) or this machine's partition (colocated). Batches and model inputs:
graphstore.training.batches.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.config import EdgeType
from graphstore.runtime.devices import move_batch
from graphstore.runtime.errors import UsageError
from graphstore.dataset.graph_dataset import GraphDataset
from graphstore.training.batches import view, without_pair_edges


class Supervision:
    """One supervision edge type ``(anchor, relation, label)`` and how to fetch its inputs.

    ``key`` (``"src__relation__dst"``) names it in metrics and logs; ``edge_type`` is the
    ``(src, relation, dst)`` tuple batches and ``ABLPInputNodes`` use."""

    def __init__(self, job: "Job", supervision_type: EdgeType) -> None:
        self.job, self.type = job, supervision_type
        self.key = str(supervision_type)
        self.edge_type = supervision_type.as_tuple()
        self.anchor_type, self.label_type = supervision_type.src_node_type, supervision_type.dst_node_type

    def ablp_input(self, split: str) -> dict[int, ABLPInputNodes]:
        """This rank's anchors of ``split`` with their positives (of that split, per-edge)."""
        return self.job.ds.fetch_ablp_input(split=split, supervision_edge_type=self.type)

    def positive_pairs(self, label_ids: torch.Tensor) -> torch.Tensor:
        """``[2, K]`` known (anchor, label) pairs, every split, whose label is in ``label_ids``,
        of every anchor this rank's inputs can hold (graph store: all; colocated: this
        machine's, the only anchors its ranks evaluate)."""
        return self.job.ds.fetch_positive_pairs(label_ids, self.type)

    def label_ids(self, rank: int | None = None, world: int | None = None) -> dict[int, torch.Tensor]:
        """Label-type node ids per partition: this rank's share, or slice ``rank`` of ``world``."""
        return self.job.ds.fetch_node_ids(rank=rank, world_size=world, node_type=self.label_type)

    def node_input(self, ids):
        return ids if self.job.homo else (self.label_type, ids)

    def train_pairs(self, train_input: dict[int, ABLPInputNodes]) -> torch.Tensor:
        """``[2, P]`` (anchor, positive) dense ids of this rank's training input."""
        parts = [x.positive_labels[self.edge_type] for x in train_input.values()]
        return torch.cat(parts, dim=1) if parts else torch.empty(2, 0, dtype=torch.long)

    def steps_per_epoch(self, train_input: dict[int, ABLPInputNodes], batch_size: int) -> int:
        """Steps every rank can take per epoch: the minimum over ranks of full batches.

        DDP needs every rank to step together; GLT forms batches per input partition
        (drop_last), so a rank's count is the sum over partitions of ``pairs // batch_size``.
        """
        full = sum(x.positive_labels[self.edge_type].size(1) // batch_size
                   for x in train_input.values())
        count = torch.tensor([float(full)])
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        if count.item() < 1:
            raise UsageError(f"trainerConfig.trainerArgs.batch_size {batch_size} is larger than the "
                             f"{self.key} training pairs some compute rank gets from a storage "
                             "rank; lower it")
        return int(count.item())

    def popularity(self, train_input: dict[int, ABLPInputNodes]) -> torch.Tensor:
        """Training positives per label node, summed over ranks (the popularity baseline)."""
        counts = torch.zeros(self.job.meta.node_counts[self.label_type])
        counts += torch.bincount(self.train_pairs(train_input)[1], minlength=len(counts)).float()
        dist.all_reduce(counts)
        return counts


class Job:
    """The dataset (any mode), its metadata, and the supervision types to train."""

    def __init__(self, dataset: GraphDataset,
                 supervision_order: Sequence[EdgeType] | None = None,
                 device: torch.device | str = "cpu") -> None:
        """``supervision_order``: supervision types in the task config's order (the first is
        the one reported at the top level of the metrics); others follow in manifest order.
        ``device``: the model's device (graphstore.runtime.devices); every batch moves there before the
        forward pass (:meth:`embed`), so loaders sample on the CPU. Inputs fetched from the
        dataset (id lists, pairs, counts) stay on the CPU."""
        self.ds = dataset
        self.device = torch.device(device)
        self.meta = meta = dataset.metadata
        order = list(supervision_order or [])
        types = sorted(meta.supervision_edge_types,
                       key=lambda et: order.index(et) if et in order else len(order))
        if not types:
            raise UsageError("the dataset has no supervision edge types "
                             "(taskMetadata...supervisionEdgeTypes)")
        self.sups = [Supervision(self, et) for et in types]
        self.homo = meta.homogeneous_types
        # the model passes messages along every edge type and its reverse (GLT's convention)
        self.edge_types = tuple(dict.fromkeys([et.as_tuple() for et in meta.edge_types]
                                              + [et.reverse().as_tuple() for et in meta.edge_types]))

    def embed(self, model, batch, drop: tuple[Supervision, torch.Tensor] | None = None):
        """Model output per node type and the batch view; ``drop=(sup, pairs)`` leaves the edges
        joining each pair out of message passing (see :meth:`pair_embeddings`). The batch moves
        to the job's device first: the outputs are on that device."""
        batch = move_batch(batch, self.device)
        v = view(batch, self.homo)
        edges = v.edge_index
        if drop is not None:
            sup, pairs = drop
            edges = without_pair_edges(edges, sup.anchor_type, sup.label_type, pairs, v.num_nodes)
        return model(v.x, edges, v.num_nodes, v.node_ids), v

    def pair_embeddings(self, model, batch, sup: Supervision):
        """Embeddings and dense ids of an ABLP batch's (anchor, positive) pairs. The edges joining
        each pair are left out of message passing: with them, a model learns "linked = positive",
        which holds for training pairs only (the splitter removes val/test pairs from the graph),
        and ranked worse than random here."""
        return self.pair_and_hard_embeddings(model, batch, sup)[:4]

    def pair_and_hard_embeddings(self, model, batch, sup: Supervision):
        """:meth:`pair_embeddings` plus, from the same forward pass, the batch's hard negatives
        (``batch.y_hard_negative``, graphstore.dataset.loaders): ``(embeddings [M, d], anchor ids [M],
        node ids [M])``, or None when the loader drew none (``hard_negatives_per_anchor`` 0)."""
        batch = move_batch(batch, self.device)
        y = batch.y_positive
        h, v = self.embed(model, batch, drop=(sup, y))
        hard = None
        yh = getattr(batch, "y_hard_negative", None)
        if yh is not None:
            hard = (h[sup.label_type][yh[1]], v.node_ids[sup.anchor_type][yh[0]],
                    v.node_ids[sup.label_type][yh[1]])
        return (h[sup.anchor_type][y[0]], h[sup.label_type][y[1]],
                v.node_ids[sup.anchor_type][y[0]], v.node_ids[sup.label_type][y[1]], hard)
