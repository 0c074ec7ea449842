"""What a training run records as it goes, for metrics.json, the run report and TensorBoard.

- ``loss_history``: one row per progress interval (``log_every_steps``), rank 0's view: the mean
  loss of the interval, batches/s and the share of the interval spent waiting for batches
  (``wait_share``: time in ``next()`` on the loaders over the step time).
- ``timings_s``: seconds per phase of the stage, in the order phases first ran (a phase that
  runs again, such as ``validation``, adds up), measured on rank 0.
- ``wait_share``: the whole run's share of step time spent waiting for batches.

Every scalar also goes to the TensorBoard sink when there is one (graphstore.training.tensorboard).
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from graphstore.training.tensorboard import TensorBoardSink


class TrainingLog:
    """Rows and timings of one training run (module docs). Not thread-safe; one per process."""

    def __init__(self, tensorboard: TensorBoardSink | None = None) -> None:
        self.tensorboard = tensorboard
        self.loss_history: list[dict] = []
        self.timings_s: dict[str, float] = {}
        self.wait_s = self.compute_s = 0.0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (added to earlier runs of the same phase)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings_s[name] = self.timings_s.get(name, 0.0) + time.perf_counter() - t0

    def add_phase(self, name: str, seconds: float) -> None:
        """Record a phase measured elsewhere (e.g. before this log existed)."""
        self.timings_s[name] = self.timings_s.get(name, 0.0) + seconds

    def step_times(self, wait_s: float, compute_s: float) -> None:
        """One step's time waiting for batches and computing (summed for ``wait_share``)."""
        self.wait_s += wait_s
        self.compute_s += compute_s

    def interval(self, step: int, loss: float, batches_per_s: float, wait_share: float) -> None:
        """One progress interval's row (what the progress log line shows)."""
        self.loss_history.append({"step": step, "loss": round(loss, 5),
                                  "batches_per_s": round(batches_per_s, 2),
                                  "wait_share": round(wait_share, 4)})
        if self.tensorboard is not None:
            self.tensorboard.scalar("train/loss", loss, step)
            self.tensorboard.scalar("train/batches_per_s", batches_per_s, step)
            self.tensorboard.scalar("train/wait_share", wait_share, step)

    def evaluation(self, split: str, step: int, result: dict) -> None:
        """One evaluation's results (to TensorBoard, then the event files are synced)."""
        if self.tensorboard is not None:
            self.tensorboard.evaluation(split, step, result)
            self.tensorboard.sync()

    @property
    def wait_share(self) -> float:
        total = self.wait_s + self.compute_s
        return self.wait_s / total if total else 0.0

    def to_dict(self) -> dict:
        """``{"loss_history", "timings_s", "wait_share"}`` for metrics.json."""
        return {"loss_history": list(self.loss_history),
                "timings_s": {k: round(v, 2) for k, v in self.timings_s.items()},
                "wait_share": round(self.wait_share, 4)}

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
