"""trainerArgs.tensorboard with a gs:// run folder: event files written locally, uploaded
through graphstore.io.uris, readable by tensorboard (GCS emulator, the real client)."""

from __future__ import annotations

from pathlib import Path

from graphstore.io import uris
from graphstore.training.tensorboard import TensorBoardSink
from tests.tensorboard_events import read_scalars


def test_event_files_land_in_the_bucket_and_read_back(bucket, gcs, tmp_path: Path):
    uri = f"gs://{bucket}/runs/r1/tensorboard"
    sink = TensorBoardSink(uri)
    sink.scalar("train/loss", 4.0, 10)
    sink.sync()  # what the trainer does at each validation
    (name,) = uris.list_names(uri)
    assert name.startswith("events.out.tfevents.")
    sink.scalar("train/loss", 3.0, 20)
    sink.close()
    assert uris.list_names(uri) == [name]  # the same object, replaced whole
    local = tmp_path / "read"
    uris.download_tree(uri, str(local))
    assert read_scalars(local)["train/loss"] == [(10, 4.0), (20, 3.0)]
    assert not Path(sink.local_dir).exists()  # the local staging folder is gone
