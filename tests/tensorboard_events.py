"""Read TensorBoard event files back with tensorboard's own reader (tests only)."""

from __future__ import annotations

from pathlib import Path


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of every scalar in the event files under ``folder``
    (EventAccumulator joins the files of one folder by step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
