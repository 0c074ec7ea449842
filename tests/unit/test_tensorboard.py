"""trainerArgs.tensorboard: the sink writes event files tensorboard reads (local folder; the
gs:// path: tests/emulator/test_tensorboard_gcs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphstore.training.history import TrainingLog
from graphstore.training.tensorboard import TensorBoardSink
from tests import report_data
from tests.tensorboard_events import read_scalars


def test_the_training_log_writes_loss_and_evaluation_scalars(tmp_path: Path):
    folder = tmp_path / "run" / "tensorboard"
    tlog = TrainingLog(TensorBoardSink(str(folder)))
    for step, loss in ((20, 5.5), (40, 4.25), (60, 3.0)):
        tlog.interval(step, loss, batches_per_s=8.0, wait_share=0.25)
    tlog.evaluation("test", 60, report_data.result(0.21, 0.03, 0.05, 0.06))
    tlog.close()
    assert [p.name for p in folder.iterdir()][0].startswith("events.out.tfevents.")
    scalars = read_scalars(folder)
    assert scalars["train/loss"] == [(20, 5.5), (40, 4.25), (60, 3.0)]
    assert [v for _, v in scalars["train/wait_share"]] == [0.25] * 3
    assert scalars["test/user__buys__item/model/mrr"] == [(60, pytest.approx(0.21))]
    assert scalars["test/user__buys__item/lightgcn/hits@10"] == [(60, pytest.approx(0.15))]
    assert not any(tag.endswith("/count") for tag in scalars)


def test_a_second_run_adds_an_event_file_read_together(tmp_path: Path):
    folder = tmp_path / "tb"
    for steps in ((10, 20), (30,)):  # a resumed run continues the curve
        sink = TensorBoardSink(str(folder))
        for s in steps:
            sink.scalar("train/loss", float(s), s)
        sink.close()
    assert len(list(folder.iterdir())) == 2
    assert [s for s, _ in read_scalars(folder)["train/loss"]] == [10, 20, 30]


def test_without_a_sink_nothing_is_written(tmp_path: Path):
    tlog = TrainingLog()
    tlog.interval(1, 2.0, 3.0, 0.5)
    tlog.close()
    assert tlog.to_dict()["loss_history"] == [{"step": 1, "loss": 2.0, "batches_per_s": 3.0,
                                                "wait_share": 0.5}]
