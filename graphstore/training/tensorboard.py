"""TensorBoard event files of a training run (``trainerArgs.tensorboard: true``).

Compute rank 0 writes them with ``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard``
package) into ``<run-dir>/tensorboard/`` (graphstore.formats.run_paths), where a local ``tensorboard
--logdir`` or Vertex AI TensorBoard reads them. On a ``gs://`` run folder the writer writes into
a local temporary folder and :meth:`TensorBoardSink.sync` uploads each event file whole (one
object upload, graphstore.io.uris.put_file, replacing the previous upload of the same file); the
trainer syncs at every validation and at the end. A resumed run adds a new event file beside
the earlier ones (TensorBoard joins them by step).

Scalars (tags): ``train/loss``, ``train/batches_per_s``, ``train/wait_share`` per progress
interval; ``<split>/<supervision type>/<model or baseline>/<mrr|hits@k>`` per evaluation.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from graphstore.io import uris


class TensorBoardSink:
    """Scalars into TensorBoard event files under ``uri`` (module docs); rank 0 only."""

    def __init__(self, uri: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.uri = uri
        self._remote = uris.is_gcs(uri)
        self.local_dir = tempfile.mkdtemp(prefix="tensorboard-") if self._remote else uri
        self.writer = SummaryWriter(log_dir=self.local_dir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, float(value), global_step=step)

    def evaluation(self, split: str, step: int, result: dict) -> None:
        """Every metric of every model/baseline of every supervision type of one evaluation."""
        for key, per_type in result.get("by_supervision_edge_type", {}).items():
            for who, values in per_type.items():
                if not isinstance(values, dict):
                    continue
                for name, value in values.items():
                    if name != "count" and isinstance(value, (int, float)):
                        self.scalar(f"{split}/{key}/{who}/{name}", value, step)

    def sync(self) -> None:
        """Flush; on gs://, upload every event file written so far (each one whole)."""
        self.writer.flush()
        self._upload()

    def close(self) -> None:
        """Close the writer and upload (gs://: the local temporary folder is removed after)."""
        self.writer.close()
        self._upload()
        if self._remote:
            shutil.rmtree(self.local_dir, ignore_errors=True)

    def _upload(self) -> None:
        if self._remote:
            for name in sorted(os.listdir(self.local_dir)):
                uris.put_file(os.path.join(self.local_dir, name), uris.join(self.uri, name))
