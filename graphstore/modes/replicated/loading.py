"""How a loader of the default loops iterates in replicated mode: inline, or Ray Data.

``DistNeighborLoader`` and ``DistABLPLoader`` (graphstore.dataset.loaders) check their arguments and build
GLT's sampler input and their ``SamplingOptions`` as in every mode, then hand them to the dataset
(``GraphDataset.start_loader``); :class:`~graphstore.modes.replicated.dataset.ReplicatedDataset` drives
the loader with a :class:`ReplicatedIteration` instead of GLT. The loader's protocol is GLT's:
``iter(loader)`` starts an epoch, ``next(loader)`` gives its next batch (``StopIteration`` at its
end), ``shutdown()`` stops it.

An epoch samples this process's seeds (node mode) or (anchor, positive) pairs (link mode:
``y_positive`` in the batch, as ``DistABLPLoader`` gives it), ``batch_size`` of them per batch,
shuffled per epoch when the loader shuffles (a permutation seeded with the loader's seed and the
epoch number), with a sampling seed that also changes per epoch, as rows of
:class:`~graphstore.modes.replicated.datasource.GraphSamplingDatasource` (``create_sampling_dataset``'s
source) turned into PyG batches by ``collate_to_pyg``. ``LoaderOptions.num_workers`` says where:

- ``0`` (:data:`DEFAULT_SAMPLING_PROCESSES`, what a loader that leaves it None gets): inline, in
  the consuming process, one batch per ``next()``, built directly (no Ray Data, no Arrow); no
  sampling overlaps the consumer's work, and nothing else competes for its cores;
- ``k >= 1``: one ``ray.data`` dataset per epoch with k read tasks (sampling processes), read with
  ``iter_batches(batch_size=1, batch_format="pyarrow")``, ``prefetch_size`` batches read ahead,
  :data:`ROWS_PER_BLOCK` batches per block. The read tasks reserve no CPU (their count bounds
  them) and run on this process's Ray node (soft node affinity): the graph file is local to
  every node, so sampling never crosses the network. Batch order across read tasks is Ray
  Data's (the units of each batch are fixed).

Inline and one read task give the same batches in the same order (the same rows and draws).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np

from graphstore.dataset.graph_dataset import SEED_STRIDE, epoch_units, loader_units
from graphstore.runtime.errors import UsageError

log = logging.getLogger(__name__)
DEFAULT_SAMPLING_PROCESSES = 0
"""``num_workers`` of a loader that leaves it None: inline. Measured (benchmarks/sampling.py, 2
cores, 1 M edges, 2026-12-07 at c89dc69, medians of 3 interleaved repeats;
benchmarks/results/sampling.json): one Ray worker sampling inline 217.6 k seeds/s, the same worker
with one Ray Data read task 63.8 k (Ray Data's streaming executor also takes the worker's CPU).
On 2026-12-01 (before the compiled sampler) the read-task worker's anonymous RSS grew 1.35x from
1 M to 4 M edges against 1.02x inline."""
ROWS_PER_BLOCK = 8
"""Batches per Ray Data block. Measured here (medium graph, 256-pair link batches, 2 read
tasks, 2 cores): 1 per block ran 31 batches/s with 11 ms of the consumer's CPU per batch in Ray
Data's executor; 8 per block 55 batches/s and 6 ms; 16 per block 64 batches/s, at twice the
wait before an epoch's first batch. Known cost (profiled with py-spy in a training worker on
the medium graph): Ray Data's streaming executor thread, one per dataset being read, took ~35-40%
of the worker's samples whatever the block size (its scheduling loop keeps running while the
consumer is slower than the read tasks); training steps ran ~1.7/s against graph-store mode's
~3.7/s there (the per-step model work is the same)."""


def read_task_options(defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray options of the read tasks: no CPU reserved, soft affinity to this process's node
    (``defaults`` override)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    out: dict[str, Any] = {"num_cpus": 0}
    if ray.is_initialized():
        out["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            node_id=ray.get_runtime_context().get_node_id(), soft=True)
    out.update(defaults or {})
    return out


def quiet_ray_data() -> None:
    """No progress bars and no per-execution INFO lines from Ray Data (a dataset per epoch)."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


class ReplicatedIteration:
    """One loader's epochs in replicated mode, sampled inline or by Ray Data read tasks (module
    docs). ``units``: node seeds ``[N]`` (node mode, ``supervision`` None) or (anchor, label)
    pairs ``[2, P]`` (link mode)."""

    def __init__(self, dataset: Any, *, units: np.ndarray, node_type: str | None,
                 supervision: tuple[str, str, str] | None, num_neighbors: Any, batch_size: int,
                 shuffle: bool, drop_last: bool, seed: int, read_tasks: int,
                 prefetch_batches: int) -> None:
        self.dataset, self.units = dataset, units
        self.node_type, self.supervision = node_type, supervision
        self.num_neighbors, self.batch_size = num_neighbors, batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.read_tasks, self.prefetch_batches = read_tasks, prefetch_batches
        self.epoch = 0
        self._batches: Iterator[Any] | None = None

    @classmethod
    def from_loader(cls, dataset: Any, loader: Any, sampler_input: Any, sampling: Any,
                    options: Any) -> ReplicatedIteration:
        """From what the loaders give every mode: GLT's sampler input (``NodeSamplerInput``:
        ``node``, ``input_type``; a labelled ``EdgeSamplerInput``: ``row``, ``col``) and the
        mode-neutral graphstore.dataset.graph_dataset.SamplingOptions (GLT's ``SamplingConfig``
        is never built here: GLT does not sample in this mode); the supervision type of a link
        loader is its ``supervision_edge_type``."""
        meta = dataset.metadata
        if getattr(loader, "hard_negatives_per_anchor", 0):
            raise UsageError("DistABLPLoader: hard_negatives_per_anchor is not supported in "
                             "replicated mode yet (taskMetadata...hardNegativeEdgeTypes); use "
                             "graph-store or colocated mode")
        units, node_type, supervision = loader_units(loader, [sampler_input], meta.node_types)
        return cls(dataset, units=units, node_type=node_type,
                   supervision=supervision, num_neighbors=list(sampling.num_neighbors),
                   batch_size=int(sampling.batch_size), shuffle=bool(sampling.shuffle),
                   drop_last=bool(sampling.drop_last), seed=int(sampling.seed or 0),
                   read_tasks=options.workers_or(DEFAULT_SAMPLING_PROCESSES),
                   prefetch_batches=int(options.prefetch_size))

    def start_epoch(self) -> None:
        """Start the next epoch (a new dataset, or inline: a new generator; the rest of the
        previous one is dropped)."""
        from graphstore.modes.replicated.datasource import sample_batches, sampling_plan

        ds = self.dataset
        units = epoch_units(self.units, self.shuffle, self.seed, self.epoch)
        options: dict[str, Any] = dict(
            features_path=ds.features_path, view=ds.view, drop_last=self.drop_last,
            random_seed=self.seed * SEED_STRIDE + self.epoch, rows_per_block=ROWS_PER_BLOCK)
        if self.supervision is None:
            options["input_nodes"] = (self.node_type, units)
        else:
            options.update(supervision_edge_type=self.supervision, positive_pairs=units)
        self.epoch += 1
        if self.read_tasks == 0:
            self._batches = sample_batches(sampling_plan(
                ds.graph_path, self.num_neighbors, batch_size=self.batch_size, **options))
            return
        import ray

        from graphstore.modes.replicated.arrow_batch import collate_to_pyg
        from graphstore.modes.replicated.datasource import GraphSamplingDatasource
        from graphstore.modes.replicated.progress import DEFAULT_STALL_TIMEOUT_S, watch

        source = GraphSamplingDatasource(
            ds.graph_path, self.num_neighbors, batch_size=self.batch_size, **options)
        read_args = read_task_options(ds.ray_remote_args)
        data = watch(ray.data.read_datasource(source, override_num_blocks=self.read_tasks,
                                              ray_remote_args=read_args),
                     DEFAULT_STALL_TIMEOUT_S, read_args)
        self._batches = map(collate_to_pyg, data.iter_batches(
            batch_size=1, batch_format="pyarrow", prefetch_batches=self.prefetch_batches))

    def next(self) -> Any:
        """The next batch of the current epoch (PyG ``Data`` / ``HeteroData``; never modify its
        tensors in place: with read tasks they view Arrow buffers); ``StopIteration`` at its end
        or before any epoch."""
        if self._batches is None:
            raise StopIteration
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = None
            raise

    def shutdown(self) -> None:
        """Drop the current epoch (Ray Data stops its read tasks when its iterator goes)."""
        self._batches = None


__all__ = ["DEFAULT_SAMPLING_PROCESSES", "ReplicatedIteration", "read_task_options", "quiet_ray_data"]
