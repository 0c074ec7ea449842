"""The whole pipeline with everything on gs:// and the export in BigQuery (both emulators): raw
tables, frozen configs, shards, checkpoint, embeddings, stage records and logs under the run
folder on the GCS emulator; the storage and compute processes read and write it themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from graphstore.io import uris
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.export.bigquery_warehouse import BigQueryWarehouse
from graphstore.formats.shards.reader import ShardSet
from tests.integration.test_pipeline_run import TRAINER_ARGS

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.emulator, pytest.mark.integration]


@pytest.mark.timeout(900)
def test_whole_pipeline_on_gcs_exports_to_bigquery(tmp_path, bucket, bigquery_emulator):
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=5), str(data))
    uris.upload_tree(str(data), f"gs://{bucket}/data")
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = f"gs://{bucket}/data"
    manifest = _run_pipeline(tmp_path, task, bucket, bigquery_emulator)
    assert all(e.sha256 for e in manifest.files.values())  # the local engine's checksums


@pytest.mark.timeout(900)
def test_whole_pipeline_on_bigquery_tables_partitions_in_bigquery(tmp_path, bucket,
                                                                   bigquery_emulator, bq_tables):
    """The raw tables in BigQuery: the partition stage picks the BigQuery engine (its files
    carry GCS's crc32c), and the storage processes train and embed from the shards it exported."""
    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=5), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    del task["datasetConfig"]["dataRootUri"]
    for kind in ("nodes", "edges"):
        for i, src in enumerate(task["datasetConfig"]["dataSources"][kind]):
            src["uri"] = bq_tables.parquet(f"{kind}_{i}", data / src["uri"])
    manifest = _run_pipeline(tmp_path, task, bucket, bigquery_emulator)
    assert all(e.crc32c and e.sha256 is None for e in manifest.files.values())


def _run_pipeline(tmp_path: Path, task: dict, bucket: str, bigquery_emulator):
    """``pipeline run`` of ``task`` with its run folder on the GCS emulator and the export in
    BigQuery; checks every stage's output and returns the shard set's manifest."""
    task["trainerConfig"]["trainerArgs"] = TRAINER_ARGS
    task["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 15,
                                       "readinessTimeoutS": 120, "rpcTimeoutS": 120,
                                       "sessionTimeoutS": 600}
    task["exportConfig"] = {"warehouse": "bigquery", "bigqueryProject": bigquery_emulator.project,
                            "bigqueryDataset": "graph_emb"}
    tp, rp = tmp_path / "task.yaml", tmp_path / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    root = f"gs://{bucket}/runs"
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "--task-config", str(tp),
                           "--resource-config", str(rp), "--run-root", root, "--run-id", "g1"],
                          cwd=REPO, capture_output=True, text=True, timeout=800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = f"{root}/g1"
    assert not (REPO / "gs:").exists()  # nothing landed in a local folder named after the URI
    manifest = ShardSet.open(f"{run}/shards", workdir=str(tmp_path)).manifest
    counts = {nt: manifest.node_types[nt].count for nt in ("user", "item")}
    assert uris.exists(f"{run}/checkpoint/model.pt")
    assert json.loads(uris.read_text(f"{run}/checkpoint/metrics.json"))["test"]["model"]["count"] > 0
    for nt, n in counts.items():
        assert json.loads(uris.read_text(f"{run}/embeddings/{nt}/_SUCCESS"))["count"] == n
    assert {"partition.json", "train.json", "infer.json", "export-user.json",
            "export-item.json"} <= set(uris.list_names(f"{run}/_stages"))
    assert "storage_0.log" in uris.list_names(f"{run}/logs/train")
    wh = BigQueryWarehouse(bigquery_emulator.project, "graph_emb")
    for nt, n in counts.items():
        assert wh.runs(f"embeddings_{nt}")[0][:2] == ("g1", n)
    out = proc.stdout
    assert "run g1: partition, train, infer, export in" in out
    assert f"warehouse bigquery:{bigquery_emulator.project}.graph_emb" in out
    assert len([line for line in out.splitlines() if "score" in line]) == 5
    return manifest
