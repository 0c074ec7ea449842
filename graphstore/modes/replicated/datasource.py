"""Ray Data over a graph file: ``create_sampling_dataset`` and the Datasource under it (seed 004).

``create_sampling_dataset(graph_path, num_neighbors, ...)`` returns a ``ray.data.Dataset`` whose
rows are sampled mini-batches (graphstore.modes.replicated.arrow_batch); iterate it with
``iter_batches(batch_size=1, batch_format="pyarrow")`` and ``collate_to_pyg``. It reads through
:class:`GraphSamplingDatasource` (``ray.data.read_datasource``, for custom pipelines).

Read tasks: the seeds are cut into ``parallelism`` contiguous slices (slice i of P is
``[i*n//P, (i+1)*n//P)``, as graph-store storage slices ids), one read task each. Each task maps
the graph file (and the features file) itself, wherever Ray runs it, so nothing but the seeds'
description travels to it, and samples its slice in order, ``batch_size`` seeds (node mode) or
(anchor, positive) pairs (link mode) per row; its randomness (a torch generator of its own, never
the process's global one) is seeded with ``random_seed`` and the task's index. The file must be
at ``graph_path`` on every node that runs read tasks.

Seeds: ``input_nodes`` None (every node; homogeneous graphs), ids (homogeneous), a node type
(all its nodes) or ``(node_type, ids)``. Link mode (``supervision_edge_type`` given): the
anchors are ``input_nodes`` (ids, or None: the anchors of ``split``), each with its positive
labels of ``split``, plus ``num_negatives`` random label-type nodes per row; or, with
``positive_pairs`` (a ``[2, P]`` array of (anchor, label) ids, e.g. one rank's share, shuffled),
exactly those pairs in that order (``input_nodes`` and ``split`` are then not given).

Blocks: a read task yields ``rows_per_block`` rows per Ray Data block (default 1); every block
costs Ray Data and the object store work of its own, so several rows per block read faster
(measured: graphstore.modes.replicated.loading.ROWS_PER_BLOCK). ``iter_batches(batch_size=1)``
still gives one row per batch, without a copy.

Slices: when the units (seeds, or explicit pairs) are known up front, read task i of T gets
batches ``[i*B//T, (i+1)*B//T)`` of the B batches, so every batch but the last is full whatever
T is (``drop_last`` drops that last one); with anchors of a split, the anchors are sliced
instead (their pair counts are known only inside the task). Each task carries only its slice.

View: ``"train"`` (the message-passing graph of training: held-out supervision edges absent) when
the file has it, else ``"full"``; inference passes ``view="full"``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from graphstore.runtime.errors import UsageError

log = logging.getLogger(__name__)

_SPLITS = (None, "train", "val", "test")


@dataclass(frozen=True)
class _Plan:
    """What every read task needs (pickled into it): small values only, never graph data."""

    graph_path: str
    features_path: str | None
    num_neighbors: Any
    batch_size: int
    replace: bool
    view: str
    node_type: str | None  # node mode: the seeds' type
    ids: np.ndarray | None  # explicit seeds; None: all nodes of node_type / anchors of split
    count: int  # seeds in all
    supervision: tuple[str, str, str] | None = None  # link mode
    split: str | None = None
    num_negatives: int = 0
    random_seed: int = 0
    drop_last: bool = False
    message_types: list = field(default_factory=list)
    pairs: np.ndarray | None = None  # link mode: explicit [2, P] (anchor, label) units
    rows_per_block: int = 1  # rows (mini-batches) per Ray Data block a read task yields

    @property
    def aligned(self) -> bool:
        """Units known up front (node seeds, explicit pairs): task slices follow batches."""
        return self.supervision is None or self.pairs is not None

    def slice(self, lo: int, hi: int) -> _Plan:
        """The plan of units ``[lo, hi)`` alone (explicit ids / pairs cut to that slice)."""
        import dataclasses

        if self.pairs is not None:
            return dataclasses.replace(self, pairs=self.pairs[:, lo:hi], count=hi - lo)
        if self.ids is not None:
            return dataclasses.replace(self, ids=self.ids[lo:hi], count=hi - lo)
        return self


def _ids(value: Any, what: str) -> np.ndarray:
    arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise UsageError(f"{what} must be a 1-D sequence of integer node ids, got shape "
                         f"{arr.shape} of {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _pairs(value: Any) -> np.ndarray:
    arr = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if arr.ndim != 2 or arr.shape[0] != 2 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise UsageError(f"positive_pairs must be a [2, P] array of integer (anchor, label) ids, got "
                         f"shape {arr.shape} of {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


def _plan(graph, graph_path: str, num_neighbors, input_nodes, batch_size: int, replace: bool,
          features_path: str | None, view: str | None, supervision_edge_type, split,
          num_negatives: int, random_seed: int, drop_last: bool,
          positive_pairs: Any = None) -> _Plan:
    from graphstore.dataset.metadata import as_edge_type
    from graphstore.modes.replicated.sampler import CsrSampler

    meta = graph.metadata
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if split not in _SPLITS:
        raise UsageError(f"split must be one of 'train', 'val', 'test' or None, got {split!r}")
    view = view or ("train" if "train" in graph.views else "full")
    sampler = CsrSampler(graph, num_neighbors, view=view, replace=replace)  # checks fanouts, view
    common = dict(graph_path=graph_path, features_path=features_path, num_neighbors=num_neighbors,
                  batch_size=batch_size, replace=bool(replace), view=view,
                  random_seed=int(random_seed), drop_last=bool(drop_last),
                  message_types=sampler.message_types)
    if supervision_edge_type is not None:
        sup = meta.supervision_edge_type(as_edge_type(supervision_edge_type))
        if isinstance(input_nodes, tuple):
            if input_nodes[0] != sup.src_node_type:
                raise UsageError(f"input_nodes node type {input_nodes[0]!r} is not the anchor type "
                                 f"of {sup} ({sup.src_node_type!r})")
            input_nodes = input_nodes[1]
        if num_negatives < 0:
            raise UsageError(f"num_negatives must be >= 0, got {num_negatives}")
        if positive_pairs is not None:
            if input_nodes is not None or split is not None:
                raise UsageError("positive_pairs= replaces input_nodes= and split=; give one")
            pairs = _pairs(positive_pairs)
            return _Plan(node_type=sup.src_node_type, ids=None, count=pairs.shape[1], pairs=pairs,
                         supervision=sup.as_tuple(), num_negatives=int(num_negatives), **common)
        ids = None if input_nodes is None else np.unique(_ids(input_nodes, "input_nodes"))
        count = len(graph.anchors(sup, split)) if ids is None else len(ids)
        return _Plan(node_type=sup.src_node_type, ids=ids, count=count,
                     supervision=sup.as_tuple(), split=split, num_negatives=int(num_negatives),
                     **common)
    if positive_pairs is not None:
        raise UsageError("positive_pairs= needs supervision_edge_type= (link mode)")
    if split is not None or num_negatives:
        raise UsageError("split= and num_negatives= need supervision_edge_type= (link mode)")
    if isinstance(input_nodes, str):
        input_nodes = (input_nodes, None)
    if isinstance(input_nodes, tuple):
        node_type, ids = meta.node_type(input_nodes[0]), input_nodes[1]
    elif meta.is_homogeneous:
        node_type, ids = meta.node_types[0], input_nodes
    else:
        raise UsageError("input_nodes must name the node type in a heterogeneous graph: "
                         f"a node type or (node_type, ids), one of {list(meta.node_types)}")
    ids = None if ids is None else _ids(ids, "input_nodes")
    if ids is not None and len(np.unique(ids)) != len(ids):
        raise UsageError("input_nodes holds duplicate ids; give each seed once")
    count = meta.node_counts[node_type] if ids is None else len(ids)
    return _Plan(node_type=node_type, ids=ids, count=count, **common)


def sampling_plan(graph_path: str, num_neighbors: Sequence[int] | dict, input_nodes: Any = None,
                  batch_size: int = 1024, replace: bool = False, features_path: str | None = None,
                  *, view: str | None = None, supervision_edge_type: Any = None,
                  split: str | None = None, num_negatives: int = 0, random_seed: int = 0,
                  drop_last: bool = False, positive_pairs: Any = None,
                  rows_per_block: int = 1) -> _Plan:
    """The checked plan of :class:`GraphSamplingDatasource`'s arguments (opens the files; a
    UsageError names a bad one). :func:`sample_batches` samples it in this process."""
    from graphstore.modes.replicated.graph_file import FeatureFile, GraphFile

    graph_path = os.path.abspath(os.fspath(graph_path))
    graph = GraphFile.open(graph_path)
    if features_path is None:
        features_path = features_beside(graph, graph_path)
    if features_path is not None:
        features_path = os.path.abspath(os.fspath(features_path))
        FeatureFile.open(features_path).check_matches(graph)
    plan = _plan(graph, graph_path, num_neighbors, input_nodes, batch_size, replace,
                 features_path, view, supervision_edge_type, split, num_negatives,
                 random_seed, drop_last, positive_pairs)
    if isinstance(rows_per_block, bool) or not isinstance(rows_per_block, int) \
            or rows_per_block < 1:
        raise UsageError(f"rows_per_block must be an integer >= 1, got {rows_per_block!r}")
    return dataclasses.replace(plan, rows_per_block=rows_per_block)


def features_beside(graph: Any, graph_path: str) -> str | None:
    """The features file to sample with when no ``features_path`` is given: the one the
    partition task writes beside the graph file (``features.bin`` in its folder,
    graphstore.formats.run_paths) when the graph has node features and that file is there;
    None otherwise, logged once per dataset (its batches have ``x=None``)."""
    from graphstore.formats.run_paths import FEATURES_FILE

    dims = graph.metadata.node_feature_dims
    beside = os.path.join(os.path.dirname(graph_path), FEATURES_FILE)
    if not any(dims.values()):
        log.info("%s: the graph has no node features; batches have x=None", graph_path)
        return None
    if not os.path.exists(beside):
        log.warning("%s: the graph has node features but no %s beside it; batches have x=None "
                    "(pass features_path)", graph_path, FEATURES_FILE)
        return None
    return beside


def sample_batches(plan: _Plan) -> Iterator[Any]:
    """Every mini-batch of ``plan`` sampled in this process, as PyG ``Data`` / ``HeteroData``
    built directly (no Arrow, no Ray): what ``collate_to_pyg`` makes of each row of one read task
    of the whole plan, the same tensors in the same order."""
    from graphstore.modes.replicated import arrow_batch
    from graphstore.modes.replicated.graph_file import GraphFile

    homogeneous = GraphFile.open(plan.graph_path).metadata.is_homogeneous
    for sub, x, link in _sample(plan, 0, plan.count, 0):
        yield arrow_batch.subgraph_to_pyg(sub, message_types=plan.message_types, x=x,
                                          homogeneous=homogeneous, link=link)


def _read(plan: _Plan, lo: int, hi: int, task_index: int) -> Iterator[Any]:
    """Sample seeds ``[lo, hi)`` of ``plan``: one Arrow row per mini-batch, ``rows_per_block``
    rows per yielded table (a Ray Data block)."""
    import pyarrow as pa

    from graphstore.modes.replicated import arrow_batch
    from graphstore.modes.replicated.graph_file import GraphFile

    meta = GraphFile.open(plan.graph_path).metadata
    block: list[Any] = []  # rows not yet yielded (concatenated: no copy of their buffers)
    for sub, x, link in _sample(plan, lo, hi, task_index):
        block.append(arrow_batch.encode(sub, node_types=list(meta.node_types),
                                        message_types=plan.message_types, x=x,
                                        homogeneous=meta.is_homogeneous, link=link))
        if len(block) == plan.rows_per_block:
            yield block[0] if len(block) == 1 else pa.concat_tables(block)
            block = []
    if block:
        yield pa.concat_tables(block)


def _sample(plan: _Plan, lo: int, hi: int, task_index: int) -> Iterator[tuple[Any, dict, Any]]:
    """Sample seeds ``[lo, hi)`` of ``plan``, one mini-batch at a time: (the sampled subgraph,
    features per node type, link: (supervision type, positives, negatives) or None)."""
    import torch

    from graphstore.config import EdgeType
    from graphstore.modes.replicated.graph_file import FeatureFile, GraphFile
    from graphstore.modes.replicated.sampler import CsrSampler
    from graphstore.dataset.subgraph import link_seeds

    graph = GraphFile.open(plan.graph_path)
    feats = FeatureFile.open(plan.features_path) if plan.features_path else None
    generator = torch.Generator().manual_seed(plan.random_seed * 1_000_003 + task_index)
    sampler = CsrSampler(graph, plan.num_neighbors, view=plan.view, replace=plan.replace,
                         generator=generator)
    meta = graph.metadata
    sup = EdgeType(src_node_type=plan.supervision[0], relation=plan.supervision[1],
                   dst_node_type=plan.supervision[2]) if plan.supervision else None
    if plan.pairs is not None:  # explicit pairs (already cut to this task's slice)
        units, n_units = plan.pairs, plan.pairs.shape[1]
    else:
        if plan.ids is not None:  # explicit ids (already cut to this task's slice)
            ids = plan.ids
        elif sup is not None:
            ids = np.asarray(graph.anchors(sup, plan.split)[lo:hi])
        else:
            ids = np.arange(lo, hi, dtype=np.int64)
        if sup is not None:
            units = graph.positives(sup, ids, plan.split)  # [2, P] pairs: the rows' units
            n_units = units.shape[1]
        else:
            units, n_units = ids, len(ids)
    stop = n_units - n_units % plan.batch_size if plan.drop_last else n_units
    for start in range(0, stop, plan.batch_size):
        link = None
        if sup is None:
            seeds = {plan.node_type: torch.from_numpy(np.ascontiguousarray(units[start:start + plan.batch_size]))}
        else:
            pairs = torch.from_numpy(np.ascontiguousarray(units[:, start:start + plan.batch_size]))
            neg = torch.randint(0, meta.node_counts[sup.dst_node_type], (plan.num_negatives,),
                                generator=generator)
            seeds, link = link_seeds(sup, pairs, neg)
        sub = sampler.sample(seeds)
        x = {}
        if feats is not None:
            x = {nt: feats.rows(nt, sub.node[nt]) for nt in sub.node if feats.has(nt)}
        yield sub, x, link


def _slices(plan: _Plan, parallelism: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` unit ranges of the read tasks (module docs: batch-aligned when the units are
    known up front, else even slices of the anchors)."""
    n = plan.count
    if not plan.aligned:
        tasks = max(1, min(parallelism, n))
        return [(i * n // tasks, (i + 1) * n // tasks) for i in range(tasks)]
    batches = -(-n // plan.batch_size)
    tasks = max(1, min(parallelism, batches))
    bounds = [min(n, (i * batches // tasks) * plan.batch_size) for i in range(tasks + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _datasource_class():
    """The Datasource class, built on first use (importing Ray costs seconds)."""
    from ray.data import Datasource
    from ray.data.block import BlockMetadata
    from ray.data.datasource import ReadTask

    class GraphSamplingDatasource(Datasource):
        """Sampled mini-batches of a graph file (see the module docs; the arguments are
        :func:`create_sampling_dataset`'s)."""

        def __init__(self, graph_path: str, num_neighbors: Sequence[int] | dict,
                     input_nodes: Any = None, batch_size: int = 1024, replace: bool = False,
                     features_path: str | None = None, *, view: str | None = None,
                     supervision_edge_type: Any = None, split: str | None = None,
                     num_negatives: int = 0, random_seed: int = 0, drop_last: bool = False,
                     positive_pairs: Any = None, rows_per_block: int = 1) -> None:
            super().__init__()
            self.plan = sampling_plan(
                graph_path, num_neighbors, input_nodes, batch_size, replace, features_path,
                view=view, supervision_edge_type=supervision_edge_type, split=split,
                num_negatives=num_negatives, random_seed=random_seed, drop_last=drop_last,
                positive_pairs=positive_pairs, rows_per_block=rows_per_block)

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[ReadTask]:
            plan = self.plan
            out = []
            for i, (lo, hi) in enumerate(_slices(plan, int(parallelism))):
                rows = -(-(hi - lo) // plan.batch_size) if plan.aligned else None
                task_plan = plan.slice(lo, hi)  # explicit seeds travel only to their task
                out.append(ReadTask(lambda p=task_plan, lo=lo, hi=hi, i=i: _read(p, lo, hi, i),
                                    BlockMetadata(num_rows=rows, size_bytes=None,
                                                  exec_stats=None, input_files=None),
                                    per_task_row_limit=per_task_row_limit))
            return out

    return GraphSamplingDatasource


_CLASS = None


def __getattr__(name: str) -> Any:
    global _CLASS
    if name == "GraphSamplingDatasource":
        if _CLASS is None:
            _CLASS = _datasource_class()
        return _CLASS
    raise AttributeError(name)


def create_sampling_dataset(graph_path: str, num_neighbors: Sequence[int] | dict,
                            input_nodes: Any = None, batch_size: int = 1024,
                            replace: bool = False, features_path: str | None = None,
                            parallelism: int | None = None, *,
                            ray_remote_args: dict[str, Any] | None = None,
                            stall_timeout_s: float | None = None, **options: Any):
    """A ``ray.data.Dataset`` of sampled mini-batches of the graph file at ``graph_path`` (module
    docs). ``parallelism``: read tasks, default the CPUs of the Ray cluster. ``options``
    (keyword only): ``view``, ``supervision_edge_type``, ``split``, ``num_negatives``,
    ``random_seed``, ``drop_last``, ``positive_pairs``, ``rows_per_block``
    (:class:`GraphSamplingDatasource`);
    ``ray_remote_args``: the read tasks' Ray options (e.g. ``num_cpus``, a scheduling strategy;
    default Ray Data's, or :data:`IN_ACTOR_READ_ARGS` inside a Ray actor such as a train worker);
    ``stall_timeout_s``: how long an iteration of the dataset may go without a batch before it
    raises an error naming the resources its read tasks wait for (default
    graphstore.modes.replicated.progress.DEFAULT_STALL_TIMEOUT_S, 300 s). Starts Ray
    (``ray.init``) when it is not running."""
    import ray

    from graphstore.modes.replicated.progress import DEFAULT_STALL_TIMEOUT_S, watch

    if not ray.is_initialized():
        ray.init()
    if parallelism is None:
        parallelism = max(1, int(ray.cluster_resources().get("CPU", 1)))
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise UsageError(f"parallelism must be an integer >= 1, got {parallelism!r}")
    source = __getattr__("GraphSamplingDatasource")(
        graph_path, num_neighbors, input_nodes, batch_size, replace, features_path, **options)
    if ray_remote_args is None and ray.get_runtime_context().get_actor_id() is not None:
        ray_remote_args = dict(IN_ACTOR_READ_ARGS)
    dataset = ray.data.read_datasource(source, override_num_blocks=parallelism,
                                       ray_remote_args=ray_remote_args)
    return watch(dataset, DEFAULT_STALL_TIMEOUT_S if stall_timeout_s is None else stall_timeout_s,
                 ray_remote_args)


IN_ACTOR_READ_ARGS = {"num_cpus": 0}
"""The read tasks' Ray options when :func:`create_sampling_dataset` is called inside a Ray actor
(a Ray Train worker) and none are given: no CPU reserved. Each read task would otherwise ask for
one CPU, and train workers that hold every CPU (seed 004's ``TorchTrainer`` snippet: 2 workers on
``ray.init(num_cpus=2)``) waited forever for their own data ("backpressured:
tasks(ResourceBudget)", measured); the actor's own CPU does the work instead."""
