"""A bound on how long a sampling dataset may make no progress: an error naming what it waits for.

Ray Data never fails a dataset whose read tasks cannot be scheduled: it reports
``backpressured:tasks(ResourceBudget)`` on its progress bar for as long as one waits (seed 004's
``TorchTrainer`` snippet waited 10 minutes that way before the read tasks stopped reserving a CPU
inside actors, graphstore.modes.replicated.datasource.IN_ACTOR_READ_ARGS). Any other way to starve
them (a cluster whose CPUs other work holds, a custom resource nobody offers, an object store
full of pinned batches) would wait forever too.

So every consumption of a dataset made by ``create_sampling_dataset`` (``iter_batches``,
``iter_rows``, ``iter_torch_batches``, ...: all of Ray Data's iterate through
``DataIterator._iter_batches``) and of the default loaders' Ray Data epochs
(graphstore.modes.replicated.loading) goes through :func:`bounded`: a thread pulls the batches, and
the consumer waits at most ``stall_timeout_s`` for each one. Past that it raises
:class:`~graphstore.runtime.errors.RuntimeFailure` naming what each read task asks for and what
the cluster has free (exit code 1 under the error contract). A dataset derived from it
(``map_batches``, ``split``, ...) is a plain Ray dataset again, without the bound.

Ordering: batches come in the order Ray Data gives them; at most one batch waits in between. The
pulling thread stops at the next batch once the consumer leaves (a ``break``, an error, the bound);
a thread blocked inside Ray Data when the bound fires ends when Ray Data next yields or the
process exits (it is a daemon).
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterable, Iterator, TypeVar

import ray
import ray.data
from ray.data._internal.iterator.iterator_impl import DataIteratorImpl

from graphstore.runtime.errors import RuntimeFailure, UsageError

T = TypeVar("T")
DEFAULT_STALL_TIMEOUT_S = 300.0
"""How long a sampling dataset may go without a batch by default: the first batch includes
starting the read tasks (seconds here); a batch of 1024 seeds takes milliseconds."""
_PUT_POLL_S = 0.5
_END = object()


def bounded(batches: Iterable[T], stall_timeout_s: float,
            waiting_for: Callable[[], str]) -> Iterator[T]:
    """``batches`` in order, or :class:`RuntimeFailure` when none comes for ``stall_timeout_s``
    seconds (module docs); ``waiting_for()`` says what the producer waits for, in the error."""
    handoff: queue.Queue[tuple[Any, BaseException | None]] = queue.Queue(maxsize=1)
    consumer_left = threading.Event()

    def hand(item: Any, error: BaseException | None = None) -> bool:
        while not consumer_left.is_set():
            try:
                handoff.put((item, error), timeout=_PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def pull() -> None:
        source = iter(batches)
        try:
            for item in source:
                if not hand(item):
                    return
            hand(_END)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread
            hand(_END, exc)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    threading.Thread(target=pull, name="dataset-batches", daemon=True).start()
    try:
        while True:
            try:
                item, error = handoff.get(timeout=stall_timeout_s)
            except queue.Empty:
                raise RuntimeFailure(
                    f"the sampling dataset made no progress for {stall_timeout_s:g} s (no batch): "
                    f"{waiting_for()}; free those resources, give the read tasks other "
                    "ray_remote_args, or raise stall_timeout_s") from None
            if error is not None:
                raise error
            if item is _END:
                return
            yield item
    finally:
        consumer_left.set()


def read_task_wants(ray_remote_args: dict[str, Any] | None) -> dict[str, float]:
    """The resources one read task asks Ray for (Ray's default for a task: 1 CPU)."""
    args = dict(ray_remote_args or {})
    wants: dict[str, float] = {"CPU": float(args.get("num_cpus", 1))}
    if args.get("num_gpus"):
        wants["GPU"] = float(args["num_gpus"])
    if args.get("memory"):
        wants["memory"] = float(args["memory"])
    for name, amount in (args.get("resources") or {}).items():
        wants[name] = float(amount)
    return wants


def describe_wait(ray_remote_args: dict[str, Any] | None) -> str:
    """One line: what each read task asks for, and what the Ray cluster has free of each."""
    wants = read_task_wants(ray_remote_args)
    free, total = ray.available_resources(), ray.cluster_resources()
    asked = ", ".join(f"{name} {amount:g}" for name, amount in wants.items() if amount)
    have = ", ".join(f"{name} {free.get(name, 0.0):g} of {total.get(name, 0.0):g}"
                     for name in wants)
    return (f"each read task asks for {asked or 'no resources'}; the Ray cluster has free: "
            f"{have}")


def watch(dataset: Any, stall_timeout_s: float, ray_remote_args: dict[str, Any] | None) -> Any:
    """``dataset`` (made by ``ray.data.read_datasource``), every consumption of it bounded by
    ``stall_timeout_s`` (module docs). The object is the same; its class becomes a subclass of
    ``ray.data.Dataset`` that only changes how it is iterated."""
    if not stall_timeout_s > 0:
        raise UsageError(f"stall_timeout_s must be > 0, got {stall_timeout_s!r}")
    dataset.__class__ = SamplingDataset
    dataset._graphstore_stall = (float(stall_timeout_s), dict(ray_remote_args or {}))
    return dataset


class _BoundedIterable:
    """One ``_iter_batches`` result, each of its iterations bounded."""

    def __init__(self, inner: Iterable[Any], stall: tuple[float, dict]) -> None:
        self.inner, self.stall = inner, stall

    def __iter__(self) -> Iterator[Any]:
        timeout_s, args = self.stall
        return bounded(self.inner, timeout_s, lambda: describe_wait(args))


class BoundedDataIterator(DataIteratorImpl):
    """Ray Data's iterator of a :class:`SamplingDataset`: every consumption goes through
    ``_iter_batches`` (Ray 2.60), which this bounds."""

    def _iter_batches(self, **kwargs: Any) -> Iterable[Any]:
        return _BoundedIterable(super()._iter_batches(**kwargs),
                                self._base_dataset._graphstore_stall)


class SamplingDataset(ray.data.Dataset):
    """A sampling dataset whose every iteration is bounded (module docs)."""

    def iterator(self) -> Any:
        return BoundedDataIterator(self)


__all__ = ["DEFAULT_STALL_TIMEOUT_S", "SamplingDataset", "bounded", "describe_wait",
           "read_task_wants", "watch"]
