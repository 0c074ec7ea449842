"""``DistNeighborLoader`` and ``DistABLPLoader`` over GLT, for every dataset mode.

A loader takes any :class:`~graphstore.dataset.graph_dataset.GraphDataset` (graph store:
``RemoteDistDataset``; colocated: ``DistDataset``) and its inputs keyed by partition (storage rank),
as the dataset's ``fetch_*`` methods return them; every loader sends each of the dataset's
``input_partitions`` its own input (an empty one too) and lets the dataset start GLT's loader
(``start_loader``: remote sampling workers, inline sampling on this machine's partition, or, in
replicated mode, Ray Data over the graph file, which then drives the loader itself). A
plain ``Tensor`` / ``ABLPInputNodes`` is taken as the input of the only input partition (colocated
mode, or a single storage server). Each loader samples with a fixed ``random_seed``
(``graphStoreRuntimeConfig.randomSeed`` + compute rank unless given): unseeded GLT sampling
measured ~1.8x slower here. ``num_workers``: sampling processes (graph store: GLT workers per
storage server, >= 1, default 1; replicated: Ray Data read tasks per loader, 0 = inline in this
process, the default; colocated samples inline whatever it is); None takes the dataset's default.

ABLP batches (``DistABLPLoader``): the sampled subgraph around the anchors and their positive
label nodes, with features, plus

- ``batch.y_positive``: ``[2, E]`` local index pairs (row: index into the anchor type's nodes of
  the batch, col: index into the label type's nodes), one per (anchor, positive) pair;
- ``batch.y_hard_negative`` (only with ``hard_negatives_per_anchor`` > 0): ``[2, M]`` local index pairs
  (anchor, known negative) of the hard negatives the batch's anchors drew from their
  ``ABLPInputNodes.negative_labels`` (up to that many per distinct anchor, anew every batch:
  graphstore.dataset.hard_negatives), sampled with the batch; ``M`` may be 0;
- ``batch.supervision_edge_type``, ``batch.anchor_node_type``, ``batch.label_node_type``.

``batch_size`` counts (anchor, positive) pairs. Creating a loader is a collective over the compute
process group (every rank creates the same loaders in the same order). Call ``shutdown()`` on every
loader before ``shutdown_compute_process()``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch
from graphlearn_torch.typing import reverse_edge_type
from graphlearn_torch.sampler import NodeSamplerInput

from graphstore.dataset.ablp import ABLPInputNodes
from graphstore.dataset.metadata import EdgeTypeLike, EdgeTypeTuple, as_edge_type
from graphstore.runtime.errors import UsageError
from graphstore.dataset.glt_adapter import GltLoader, HardNegativeEdgeInput, LabeledEdgeInput
from graphstore.dataset.graph_dataset import GraphDataset, LoaderOptions, SamplingOptions
from graphstore.dataset.hard_negatives import NEGATIVE, POSITIVE, AnchorNegatives


def _one_supervision_type(per_part: list, requested: EdgeTypeLike | None) -> EdgeTypeTuple:
    """The supervision type of ABLP inputs: ``requested``, or the only one they hold."""
    if requested is not None:
        return as_edge_type(requested).as_tuple()
    types = {et for x in per_part if x is not None for et in x.positive_labels}
    if len(types) != 1:
        raise UsageError(f"DistABLPLoader: the input holds supervision edge types {sorted(types)}; "
                         "pass supervision_edge_type= to pick one")
    return next(iter(types))


def _seed(dataset: GraphDataset, random_seed: int | None) -> int:
    return dataset.sampling_seed() if random_seed is None else random_seed


_CONTRACT = ("metadata", "input_partitions", "fetch_labels", "sampling_seed", "start_loader")


def _check_dataset(dataset: Any, who: str) -> None:
    """``dataset`` has the members a loader uses (checked on its type: no RPC happens here)."""
    missing = [m for m in _CONTRACT if not hasattr(type(dataset), m)]
    if missing:
        raise UsageError(f"{who}: dataset must be a GraphDataset (RemoteDistDataset or "
                         f"DistDataset), got {type(dataset).__name__} (no {', '.join(missing)})")


def _by_partition(dataset: GraphDataset, value: Any, single: type, who: str) -> list[Any]:
    """``value`` per input partition, in ``input_partitions`` order (None: nothing there).

    ``value`` is ``{partition: input}``, or one ``single`` input when the dataset has one input
    partition."""
    parts = dataset.input_partitions
    if isinstance(value, dict):
        bad = [k for k in value if k not in parts]
        if bad:
            raise UsageError(f"{who} input_nodes: keys must be partitions (storage ranks) "
                             f"{list(parts)}, got {bad}")
        return [value.get(k) for k in parts]
    if isinstance(value, single) and len(parts) == 1:
        return [value]
    raise UsageError(f"{who}: input_nodes must be a dict keyed by partition (storage rank) "
                     f"{list(parts)}, as the dataset's fetch_* methods return"
                     + (f", or one {single.__name__}" if len(parts) == 1 else "")
                     + f"; got {type(value).__name__}")


class _AblpPairs(NamedTuple):
    """A DistABLPLoader's input, per input partition (``input_partitions`` order)."""

    supervision_edge_type: EdgeTypeTuple
    pairs: list[torch.Tensor]  # [2, P] (anchor, label)
    negatives: list[torch.Tensor] | None  # [2, N] (anchor, negative); None: none of that type


def _ablp_pairs(dataset: GraphDataset, input_nodes: Any, requested: EdgeTypeLike | None
                ) -> _AblpPairs:
    """The loader's pairs (:class:`_AblpPairs`).

    ``ABLPInputNodes`` inputs bring their labels (of one split); anchor ids (``Tensor`` or
    ``(anchor_node_type, Tensor)``, per partition or one) get every label of each anchor from the
    partition that owns it (``fetch_labels``), and no negatives."""
    empty = torch.empty((2, 0), dtype=torch.long)
    anchor_type = None
    if isinstance(input_nodes, tuple):
        anchor_type, input_nodes = input_nodes
    values = input_nodes.values() if isinstance(input_nodes, dict) else [input_nodes]
    if anchor_type is None and not any(isinstance(v, torch.Tensor) for v in values):
        per_part = _by_partition(dataset, input_nodes, ABLPInputNodes, "DistABLPLoader")
        sup = _one_supervision_type(per_part, requested)
        negatives = None
        if any(x is not None and sup in x.negative_labels for x in per_part):
            negatives = [x.negative_labels.get(sup, empty) if x is not None else empty
                         for x in per_part]
        return _AblpPairs(sup, [x.positive_labels.get(sup, empty) if x is not None else empty
                                for x in per_part], negatives)
    anchors = _by_partition(dataset, input_nodes, torch.Tensor, "DistABLPLoader")
    sup_type = dataset.metadata.supervision_edge_type(requested)
    if anchor_type is not None and anchor_type != sup_type.src_node_type:
        raise UsageError(f"DistABLPLoader: anchor_node_type {anchor_type!r} is not the source "
                         f"of {sup_type}")
    parts = dataset.input_partitions
    labels = dataset.fetch_labels({k: a for k, a in zip(parts, anchors) if a is not None},
                                  sup_type)
    return _AblpPairs(sup_type.as_tuple(), [labels.get(k, empty) for k in parts], None)


class _GltIteration:
    """GLT's own iteration of a loader (graph store, colocated): ``DistLoader``'s methods."""

    def __init__(self, loader: GltLoader) -> None:
        self._loader = loader

    def start_epoch(self) -> None:
        GltLoader.__iter__(self._loader)

    def next(self) -> Any:
        return GltLoader.__next__(self._loader)

    def shutdown(self) -> None:
        GltLoader.shutdown(self._loader)


class _NotStarted:
    """The iteration of a loader whose construction failed: nothing to iterate or stop."""

    def start_epoch(self) -> None:
        raise UsageError("this loader was not started (its construction failed)")

    def next(self) -> Any:
        raise UsageError("this loader was not started (its construction failed)")

    def shutdown(self) -> None:
        return None


class _DatasetDriven:
    """A loader whose iteration its dataset chooses: :meth:`_start` hands it to GLT's loader,
    then the dataset's ``start_loader`` either finishes GLT's loader (graph store, colocated) or
    calls :meth:`drive_with` (replicated mode: Ray Data, graphstore.modes.replicated.loading).
    The protocol is GLT's either way: ``iter()`` starts an epoch, ``next()`` gives a batch,
    ``shutdown()`` stops."""

    _driver: Any = _NotStarted()

    def _start(self, dataset: GraphDataset, inputs: Sequence[Any], sampling: SamplingOptions,
               options: LoaderOptions) -> None:
        self._driver = _GltIteration(self)
        dataset.start_loader(self, inputs, sampling, options)

    def drive_with(self, driver: Any) -> None:
        """Iterate with ``driver`` (``start_epoch()``, ``next()``, ``shutdown()``), not GLT."""
        self._driver = driver

    def __iter__(self):
        self._driver.start_epoch()
        return self

    def __next__(self):
        return self._driver.next()

    def shutdown(self) -> None:
        self._driver.shutdown()


class DistNeighborLoader(_DatasetDriven, GltLoader):
    """Neighbourhood samples around node seeds. ``input_nodes``: ``dict[int, Tensor]``
    (homogeneous) or ``(node_type, dict[int, Tensor])``, as ``fetch_node_ids`` returns (a plain
    ``Tensor`` for the only input partition, e.g. colocated)."""

    def __init__(self, dataset: GraphDataset, num_neighbors: list[int], input_nodes: Any,
                 batch_size: int = 1, num_workers: int | None = None, shuffle: bool = False,
                 drop_last: bool = False, with_edge: bool = False, random_seed: int | None = None,
                 worker_concurrency: int = 4, prefetch_size: int = 4) -> None:
        _check_dataset(dataset, "DistNeighborLoader")
        meta = dataset.metadata
        node_type = None
        if isinstance(input_nodes, tuple):
            node_type, input_nodes = input_nodes
        if not meta.is_homogeneous and node_type is None:
            raise UsageError("DistNeighborLoader: give input_nodes=(node_type, ...) in a "
                             "heterogeneous graph")
        seeds = _by_partition(dataset, input_nodes, torch.Tensor, "DistNeighborLoader")
        input_type = None if meta.is_homogeneous else node_type
        inputs = [NodeSamplerInput(node=(t if t is not None else torch.empty(0, dtype=torch.long)),
                                   input_type=input_type) for t in seeds]
        self.num_seeds = sum(len(i) for i in inputs)
        sampling = SamplingOptions("node", num_neighbors, batch_size, shuffle, drop_last,
                                   meta.edge_dir, _seed(dataset, random_seed), with_edge=with_edge)
        self._start(dataset, inputs, sampling, LoaderOptions(
            "nbr", num_workers, worker_concurrency, prefetch_size))


class DistABLPLoader(_DatasetDriven, GltLoader):
    """Anchor-based link prediction batches (see module docs). ``input_nodes``:
    ``dict[int, ABLPInputNodes]``, as ``fetch_ablp_input`` returns (the labels of one split), or
    anchor ids ``dict[int, Tensor]`` / ``(anchor_node_type, dict[int, Tensor])`` with all their
    labels; a plain ``ABLPInputNodes`` / ``Tensor`` for the only input partition (e.g.
    colocated). ``hard_negatives_per_anchor`` > 0: each batch also samples up to that many of
    each distinct anchor's ``negative_labels`` (``ABLPInputNodes`` inputs only; ``y_hard_negative``);
    not in replicated mode yet (UsageError)."""

    def __init__(self, dataset: GraphDataset, num_neighbors: list[int], input_nodes: Any,
                 batch_size: int = 1, num_workers: int | None = None, shuffle: bool = False,
                 drop_last: bool = False, supervision_edge_type: EdgeTypeLike | None = None,
                 random_seed: int | None = None, worker_concurrency: int = 4,
                 prefetch_size: int = 4, hard_negatives_per_anchor: int = 0) -> None:
        _check_dataset(dataset, "DistABLPLoader")
        meta = dataset.metadata
        sup, pairs_per_input, negatives = _ablp_pairs(dataset, input_nodes,
                                                      supervision_edge_type)
        self.supervision_edge_type = sup
        self._hetero = not meta.is_homogeneous
        self.hard_negatives_per_anchor = int(hard_negatives_per_anchor)
        seed = _seed(dataset, random_seed)
        if self.hard_negatives_per_anchor < 0:
            raise UsageError(f"DistABLPLoader: hard_negatives_per_anchor must be >= 0, got "
                             f"{hard_negatives_per_anchor}")
        if self.hard_negatives_per_anchor and negatives is None:
            raise UsageError(f"DistABLPLoader: hard_negatives_per_anchor="
                             f"{self.hard_negatives_per_anchor} but the input has no negative labels "
                             f"of {sup} (give fetch_ablp_input's ABLPInputNodes of a supervision type "
                             "with taskMetadata...hardNegativeEdgeTypes)")
        input_type = sup if self._hetero else None
        if self.hard_negatives_per_anchor:
            inputs = [HardNegativeEdgeInput(p[0].contiguous(), p[1].contiguous(), input_type,
                                            AnchorNegatives.from_pairs(n),
                                            self.hard_negatives_per_anchor, seed)
                      for p, n in zip(pairs_per_input, negatives)]
        else:  # a label tensor is required (graphstore.dataset.glt_adapter.LabeledEdgeInput says why);
            # every label is 1: one element expanded (GLT only indexes it)
            inputs = [LabeledEdgeInput(p[0].contiguous(), p[1].contiguous(),
                                       torch.ones(1, dtype=torch.long).expand(p.size(1)),
                                       input_type)
                      for p in pairs_per_input]
        self.num_pairs = sum(len(i) for i in inputs)
        sampling = SamplingOptions("link", num_neighbors, batch_size, shuffle, drop_last,
                                   meta.edge_dir, seed)
        self._start(dataset, inputs, sampling, LoaderOptions(
            "ablp", num_workers, worker_concurrency, prefetch_size))

    def finish_batch(self, data: Any) -> Any:
        """Add ``y_positive`` (and ``y_hard_negative``) and the batch's supervision, anchor and label
        types."""
        sup = self.supervision_edge_type
        if not self._hetero:
            # GLT's to_data stores edge_label_index flipped; undo it: [anchor idx, label idx]
            rows, label = data.edge_label_index.flip(0), data.edge_label
        elif self.edge_dir == "in":
            rows, label = data[sup].edge_label_index, data[sup].edge_label
        else:
            store = data[reverse_edge_type(sup)]
            rows, label = store.edge_label_index.flip(0), store.edge_label
        if self.hard_negatives_per_anchor:  # rows: the pairs (POSITIVE), then drawn negatives
            data.y_positive = rows[:, label == POSITIVE]
            data.y_hard_negative = rows[:, label == NEGATIVE]
        else:
            data.y_positive = rows
        data.supervision_edge_type = sup
        data.anchor_node_type, data.label_node_type = sup[0], sup[2]
        return data
