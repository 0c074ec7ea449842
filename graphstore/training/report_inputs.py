"""What the run report needs beyond metrics.json, gathered by compute rank 0 of the trainer.

- :func:`project` - a 2-D PCA (torch, centred, SVD) of a sample of embeddings.
- :func:`node_attribute` - a node attribute of those nodes, to colour them by: the planted
  ``community`` when the data folder holds the synthetic generator's
  ``truth/communities_<node_type>.parquet`` (graphstore.tools.datagen; raw ids mapped to dense ids
  through the shard set's id map), else None (the trainer then colours by training positives).
- :func:`earlier_stages` - the records of the pipeline stages that ran before training
  (``_stages/*.json``, when the run folder has them).
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch

from graphstore.io import uris
from graphstore.formats.stage_records import StageRecord, read_records
from graphstore.training.report import Projection

TRUTH_DIR = "truth"
"""The generator's folder of planted truths, under ``datasetConfig.dataRootUri``."""


def project(emb: torch.Tensor) -> tuple[np.ndarray, tuple[float, float]]:
    """``[n, 2]`` coordinates on the two principal axes of ``emb [n, d]`` and the share of the
    variance each explains (zeros for fewer than 2 rows)."""
    x = emb.detach().cpu().double()
    if x.size(0) < 2:
        return np.zeros((x.size(0), 2)), (0.0, 0.0)
    x = x - x.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    k = min(2, vh.size(0))
    points = np.zeros((x.size(0), 2))
    points[:, :k] = (x @ vh[:k].T).numpy()
    var = s.square()
    share = (var / var.sum()).tolist() if float(var.sum()) > 0 else [0.0]
    share += [0.0, 0.0]
    return points, (float(share[0]), float(share[1]))


def node_attribute(data_root: str | None, shards_uri: str, node_type: str,
                   ids: torch.Tensor) -> tuple[str, np.ndarray] | None:
    """``("community", values [n])`` of the dense ``ids`` of ``node_type`` when the generator's
    truth file exists under ``data_root`` (-1 for an id it does not list), else None."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from graphstore.formats.shards.reader import ShardSet

    if not data_root:
        return None
    truth_uri = uris.join(data_root, TRUTH_DIR, f"communities_{node_type}.parquet")
    if not uris.exists(truth_uri):
        return None
    import duckdb

    with tempfile.TemporaryDirectory(prefix="attribute-") as tmp:
        truth = pq.read_table(uris.localize(truth_uri, tmp))
        id_map = ShardSet.open(shards_uri, workdir=tmp).id_map_files(node_type)  # under tmp
        wanted = pa.table({"pos": np.arange(len(ids), dtype=np.int64), "int_id": ids.numpy()})
        con = duckdb.connect()  # only the rows of ``ids`` leave the files
        con.register("wanted", wanted)
        raw = con.execute("SELECT m.raw_id FROM wanted w JOIN read_parquet(?) m "
                          "ON m.int_id = w.int_id ORDER BY w.pos", [id_map]).to_arrow_table().column(0)
        con.close()
    if "community" not in truth.column_names or truth.num_columns != 2:
        return None
    raw = raw.cast(pa.string())
    truth_ids = truth.column(0 if truth.column_names[1] == "community" else 1).cast(pa.string())
    where = pc.index_in(raw, value_set=truth_ids)
    values = truth.column("community").take(where).fill_null(-1)
    return "community", values.to_numpy().astype(np.int64)


def earlier_stages(run_dir: str) -> list[StageRecord]:
    """The run's pipeline stage records other than train's (empty outside a pipeline run; a record
    being written is left out: the report goes without it)."""
    return [r for r in read_records(run_dir, skip_unreadable=True) if r.stage != "train"]


def build_projection(node_type: str, ids: torch.Tensor, emb: torch.Tensor,
                     attribute: tuple[str, np.ndarray] | None,
                     label_degree: torch.Tensor | None) -> Projection:
    """The report's projection of ``emb`` (rows of ``ids``), coloured by ``attribute`` when
    given, else by log(1 + training positives) of each node (``label_degree``), else uniform."""
    points, explained = project(emb)
    if attribute is not None:
        name, values = attribute
        return Projection(node_type, points, values, name, True, explained)
    if label_degree is not None:
        values = np.log1p(label_degree[ids].double().numpy())
        return Projection(node_type, points, values, "log(1 + training positives)", False,
                          explained)
    return Projection(node_type, points, np.zeros(len(points)), "nothing", False, explained)
