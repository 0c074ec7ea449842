"""Peak memory of the partition task with the BigQuery engine, at graph sizes 10x apart.

For each generated hetero preset (default ``tiny`` and ``medium``), the raw Parquet tables are
uploaded to the GCS emulator and loaded into BigQuery tables by load jobs (tests/emulators.py
starts both emulators; bqemulator's exports reach the GCS emulator through
tests/bqemulator_gcs.py). Then ``python -m components.partition`` runs on the ``bq://`` tables
into a gs:// output (engine ``auto``: BigQuery), under ``/usr/bin/time -f %M``: the peak resident
set of the task's process, which submits the SQL jobs, lists the exported files and writes the
manifest. The engine's claim is that this does not grow with the graph (no row passes through
the task); the emulators' own memory (bqemulator runs the SQL in DuckDB on this machine) is not
the task's and is not counted. Wall time is reported but is the emulator's, not BigQuery's.

usage: python benchmarks/partition_bigquery.py [--presets tiny,medium]
Needs .venv-emulators (scripts/setup_emulators.sh). Prints a table and writes
benchmarks/results/partition_bigquery.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def load_tables(task: dict, data: Path, bucket: str, project: str, dataset: str) -> None:
    """Every source of ``task`` (files under ``data``) into ``project.dataset`` by load jobs
    from the GCS emulator; ``task``'s uris become the ``bq://`` tables."""
    from google.cloud import bigquery

    from graphstore.io import uris
    from graphstore.io.gcp import bigquery_client

    client = bigquery_client(project)
    client.create_dataset(f"{project}.{dataset}", exists_ok=True)
    import pyarrow.parquet as pq

    kinds = {"string": "STRING", "int64": "INT64", "float": "FLOAT64", "double": "FLOAT64"}
    for kind in ("nodes", "edges"):
        for i, src in enumerate(task["datasetConfig"]["dataSources"][kind]):
            uri = f"gs://{bucket}/raw/{dataset}/{src['uri']}"
            uris.put_file(str(data / src["uri"]), uri)
            ref = f"{project}.{dataset}.{kind}_{i}"
            fields = [bigquery.SchemaField(f.name, kinds[str(f.type)])
                      for f in pq.read_schema(data / src["uri"])]
            client.create_table(bigquery.Table(ref, schema=fields))
            config = bigquery.LoadJobConfig(source_format=bigquery.SourceFormat.PARQUET,
                                            schema=fields)
            client.load_table_from_uri(uri, ref, job_config=config).result()
            src["uri"] = f"bq://{ref}"
    task["datasetConfig"].pop("dataRootUri", None)


def measure(preset: str, work: Path, bucket: str, project: str) -> dict:
    from graphstore.formats.shards.reader import ShardSet
    from graphstore.tools.datagen import DatasetSpec, generate_dataset

    data = work / preset
    generate_dataset(DatasetSpec.from_preset(preset, kind="hetero", seed=1), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    load_tables(task, data, bucket, project, f"raw_{preset}")
    tp = work / f"task_{preset}.yaml"
    tp.write_text(yaml.safe_dump(task))
    out = f"gs://{bucket}/shards_{preset}"
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kib=%M", sys.executable, "-m", "components.partition",
         "--task-config", str(tp), "--resource-config",
         str(REPO / "configs" / "resource_local.yaml"), "--output", out],
        cwd=REPO, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0 or "partition engine: bigquery" not in proc.stderr:
        raise SystemExit(f"{preset}: partition failed or not on BigQuery:\n{proc.stderr[-3000:]}")
    rss = int(proc.stderr.rsplit("maxrss_kib=", 1)[1].split()[0])
    with ShardSet.open(out, workdir=str(work)) as shards:
        m = shards.manifest
        edges = sum(e.count for e in m.edge_types.values())
        nodes = sum(n.count for n in m.node_types.values())
        files = len(m.files)
    return {"preset": preset, "stored_edges": edges, "nodes": nodes, "files": files,
            "peak_rss_mib": round(rss / 1024, 1), "seconds_on_the_emulator": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="tiny,medium")
    args = ap.parse_args()
    from graphstore.io.gcp import storage_client
    from graphstore.runtime.env import BIGQUERY_EMULATOR_HOST, STORAGE_EMULATOR_HOST
    from tests.emulators import BQ_PROJECT, start_bigquery, start_gcs

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-partition-bq-") as tmp:
        work = Path(tmp)
        gcs = start_gcs(work / "gcs", work)
        os.environ[STORAGE_EMULATOR_HOST] = gcs.url
        bq = start_bigquery(work / "gcs", work, gcs_url=gcs.url)
        os.environ[BIGQUERY_EMULATOR_HOST] = bq.url
        try:
            storage_client().create_bucket("bench")
            for preset in args.presets.split(","):
                rows.append(measure(preset, work, "bench", BQ_PROJECT))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            bq.stop()
            gcs.stop()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    result = {"date": datetime.date.today().isoformat(), "commit": commit,
              "command": "python benchmarks/partition_bigquery.py --presets " + args.presets,
              "cpus": os.cpu_count(), "results": rows}
    (REPO / "benchmarks" / "results" / "partition_bigquery.json").write_text(
        json.dumps(result, indent=1) + "\n")
    print(f"{'preset':>8} {'stored edges':>13} {'nodes':>10} {'files':>6} {'peak RSS MiB':>13}")
    for r in rows:
        print(f"{r['preset']:>8} {r['stored_edges']:>13,} {r['nodes']:>10,} {r['files']:>6} "
              f"{r['peak_rss_mib']:>13}")


if __name__ == "__main__":
    main()
