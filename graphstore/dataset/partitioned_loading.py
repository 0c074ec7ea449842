"""How a loader iterates over a partitioned graph (graph-store and colocated mode): the
partitioned sampler (graphstore.dataset.partitioned_sampler) in a thread of the loader's process.

``DistNeighborLoader`` and ``DistABLPLoader`` (graphstore.dataset.loaders) build GLT's sampler
inputs (one per input partition) and their ``SamplingOptions`` as in every mode; the dataset's
``start_loader`` then drives the loader with a :class:`PartitionedIteration`. The protocol is
GLT's: ``iter(loader)`` starts an epoch, ``next(loader)`` gives its next batch
(``StopIteration`` at its end), ``shutdown()`` stops.

An epoch: the units of every input partition, end to end in partition order (node seeds, or
(anchor, positive) pairs of a link loader), permuted when the loader shuffles (seeded with the
loader's seed and the epoch number), cut into batches of ``batch_size`` units (``drop_last``:
without the last short one), so one batch mixes units of every partition. Each batch's seeds are
its units (link: its anchors and labels, unique per type, ``y_positive`` their local indices,
graphstore.dataset.subgraph.link_seeds). Batches are sampled :data:`ROUND_SEEDS` seeds' worth
at a time (one round of requests: graphstore.dataset.partitioned_sampler) with a generator seeded
per epoch, in a producer thread that runs up to ``prefetch_size`` rounds ahead of the consumer,
and come out in order. Batches are graphstore.dataset.subgraph's (what replicated mode gives).

Failures: an error in the producer (a storage partition that failed a request, an RPC that
outlived ``rpcTimeoutS``) is raised by the ``next()`` that would have returned the batch; no
batch is skipped silently. ``shutdown()`` (or a new epoch) stops the producer: it finishes the
round in flight and exits.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from graphstore.dataset.graph_dataset import SEED_STRIDE, epoch_units, loader_units
from graphstore.dataset.partitioned_sampler import Ask, PartitionedSampler
from graphstore.dataset.subgraph import link_seeds, subgraph_to_pyg
from graphstore.runtime.errors import UsageError

ROUND_SEEDS = 8192
"""Units per round of requests (at least one batch, at most :data:`MAX_ROUND_BATCHES`): each
hop asks each partition once for all of a round's batches."""
MAX_ROUND_BATCHES = 32
SAMPLER_THREADS = 2
"""Producer threads per loader: rounds in flight at once."""
_PUT_POLL_S = 0.1  # how often a producer blocked on a full queue checks for a stop


@dataclass(frozen=True)
class _Failure:
    error: BaseException


class _Producer:
    """One epoch's rounds, sampled by ``threads`` daemon threads (round ``r`` by thread
    ``r % threads``, each into its own bounded queue) and handed out in round order: while one
    thread waits for the partitions' replies, another relabels and builds its batches."""

    def __init__(self, sample_round: Callable[[int], list[Any]], num_rounds: int, threads: int,
                 depth: int) -> None:
        self._sample_round, self._num_rounds = sample_round, num_rounds
        self._threads = max(1, min(threads, num_rounds))
        self._queues = [queue.Queue(maxsize=depth) for _ in range(self._threads)]
        self._stop = threading.Event()
        self._next_round = 0
        self._ready: list[Any] = []
        for t in range(self._threads):
            threading.Thread(target=self._run, args=(t,), name=f"graphstore-sampler-{t}",
                             daemon=True).start()

    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=_PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, t: int) -> None:
        q = self._queues[t]
        try:
            for r in range(t, self._num_rounds, self._threads):
                if not self._put(q, self._sample_round(r)):
                    return
        except BaseException as exc:  # handed to the consumer, raised by its next()
            self._put(q, _Failure(exc))

    def next(self) -> Any:
        while not self._ready:
            if self._next_round == self._num_rounds:
                raise StopIteration
            item = self._queues[self._next_round % self._threads].get()
            if isinstance(item, _Failure):
                raise item.error
            self._next_round += 1
            self._ready = list(reversed(item))
        return self._ready.pop()

    def stop(self) -> None:
        self._stop.set()


class PartitionedIteration:
    """One loader's epochs over a partitioned graph (module docs). ``units``: node seeds ``[N]``
    (node mode, ``supervision`` None) or (anchor, label) pairs ``[2, P]`` (link mode)."""

    def __init__(self, metadata: Any, ask: Ask, *, units: np.ndarray, node_type: str,
                 supervision: tuple[str, str, str] | None, num_neighbors: Any, batch_size: int,
                 shuffle: bool, drop_last: bool, seed: int, prefetch_rounds: int,
                 with_edge: bool = False) -> None:
        self.meta, self.ask, self.units = metadata, ask, units
        self.node_type, self.supervision = node_type, supervision
        self.num_neighbors, self.batch_size = num_neighbors, batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.prefetch_rounds, self.with_edge = max(1, prefetch_rounds), bool(with_edge)
        self.round_batches = max(1, min(MAX_ROUND_BATCHES, ROUND_SEEDS // batch_size))
        self.epoch = 0
        self._producer: _Producer | None = None
        PartitionedSampler(metadata, ask, num_neighbors)  # checks the fanouts now

    @classmethod
    def from_loader(cls, metadata: Any, ask: Ask, loader: Any, inputs: list[Any], sampling: Any,
                    options: Any) -> PartitionedIteration:
        """From what the loaders give every mode: GLT's sampler inputs, one per input partition
        (``NodeSamplerInput``: ``node``, ``input_type``; a labelled ``EdgeSamplerInput``:
        ``row``, ``col``), and the mode-neutral SamplingOptions; a link loader's supervision
        type is its ``supervision_edge_type``."""
        if getattr(loader, "hard_negatives_per_anchor", 0):
            raise UsageError("the partitioned sampler does not draw hard negatives")
        units, node_type, supervision = loader_units(loader, inputs, metadata.node_types)
        return cls(metadata, ask, units=units,
                   node_type=node_type, supervision=supervision,
                   num_neighbors=sampling.num_neighbors, batch_size=int(sampling.batch_size),
                   shuffle=bool(sampling.shuffle), drop_last=bool(sampling.drop_last),
                   seed=int(sampling.seed or 0), prefetch_rounds=int(options.prefetch_size),
                   with_edge=bool(sampling.with_edge))

    def _round(self, units: np.ndarray, epoch_seed: int, r: int) -> list[Any]:
        """The batches of round ``r`` of an epoch's ``units``, sampled with a generator of the
        round's own (seeded by the epoch's seed and ``r``: the same whichever thread runs it)."""
        generator = torch.Generator().manual_seed(epoch_seed * SEED_STRIDE + r)
        sampler = PartitionedSampler(self.meta, self.ask, self.num_neighbors,
                                     with_edge_ids=self.with_edge, generator=generator)
        size, step = self.batch_size, self.batch_size * self.round_batches
        start, stop = r * step, min((r + 1) * step, self._stop(units))
        seeds, links = [], []
        for lo in range(start, stop, size):
            part = torch.from_numpy(np.ascontiguousarray(units[..., lo:lo + size]))
            if self.supervision is None:
                seeds.append({self.node_type: part})
                links.append(None)
            else:
                sup = self.meta.supervision_edge_type(self.supervision)
                s, link = link_seeds(sup, part, torch.empty(0, dtype=torch.long))
                seeds.append(s)
                links.append(link)
        subs = sampler.sample(seeds)
        feats = sampler.features(subs)
        return [subgraph_to_pyg(sub, message_types=sampler.message_types, x=x,
                                homogeneous=self.meta.is_homogeneous, link=link)
                for sub, x, link in zip(subs, feats, links)]

    def _stop(self, units: np.ndarray) -> int:
        """Units an epoch samples (``drop_last``: without the last short batch)."""
        n = units.shape[-1]
        return n - n % self.batch_size if self.drop_last else n

    def start_epoch(self) -> None:
        """Start the next epoch (the rest of the previous one is dropped)."""
        self.shutdown()
        units = epoch_units(self.units, self.shuffle, self.seed, self.epoch)
        epoch_seed = self.seed * SEED_STRIDE + self.epoch
        self.epoch += 1
        rounds = -(-self._stop(units) // (self.batch_size * self.round_batches))
        self._producer = _Producer(lambda r: self._round(units, epoch_seed, r), rounds,
                                   SAMPLER_THREADS, self.prefetch_rounds)

    def next(self) -> Any:
        """The next batch of the current epoch; ``StopIteration`` at its end or before any."""
        if self._producer is None:
            raise StopIteration
        try:
            return self._producer.next()
        except BaseException:
            self.shutdown()
            raise

    def shutdown(self) -> None:
        """Stop the current epoch's producer (it exits after the round in flight)."""
        if self._producer is not None:
            self._producer.stop()
            self._producer = None


__all__ = ["MAX_ROUND_BATCHES", "PartitionedIteration", "ROUND_SEEDS"]
