"""Export load throughput: rows/s into the local warehouse and into the BigQuery emulator.

For each size (default 100 000 and 1 000 000 rows, embedding dim 64), one rows Parquet file in
the table schema (graphstore.export.rows: string raw ids, float64 lists) is written, then loaded
the way the export stage loads it, side by side in one run:

* ``local``: ``LocalWarehouse.load_run`` (DuckDB: staging table, one-transaction swap, view).
* ``bigquery-emulator``: upload of the file to the GCS emulator (``uris.put_file``) plus
  ``BigQueryWarehouse.load_run`` (``load_table_from_uri`` into staging, MERGE swap, view) against
  bqemulator; ``upload_s`` and ``load_s`` are reported apart. The emulator runs on this machine
  (DuckDB inside), so this measures our path and the emulator, not BigQuery's service.

Each load goes into a fresh table, and then again into the same table (``rerun_s``: the same run id
replaced, the idempotent path). The join of embeddings to raw ids (``build_rows``) is not timed here.

usage: python benchmarks/export.py [--sizes 100000,1000000] [--dim 64] [--targets local,bigquery-emulator]
Needs .venv-emulators for the emulator target (scripts/setup_emulators.sh). Prints a table and
writes benchmarks/results/export.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_rows(path: Path, n: int, dim: int):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from graphstore.export.rows import Rows

    created = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    values = np.random.default_rng(0).standard_normal(n * dim)
    emb = pa.ListArray.from_arrays(pa.array(np.arange(0, n * dim + 1, dim, dtype=np.int32)),
                                   pa.array(values, pa.float64()))
    table = pa.table({
        "node_id": pa.array([f"n{i:08d}" for i in range(n)]),
        "node_type": pa.array(["node"] * n), "embedding": emb,
        "model_version": pa.array(["v1"] * n), "run_id": pa.array(["bench"] * n),
        "created_at": pa.array([created] * n, pa.timestamp("us", tz="UTC"))})
    pq.write_table(table, path)
    return Rows(path=str(path), node_type="node", count=n, dim=dim, node_id_type="STRING",
                created_at=created)


def bench_local(rows, work: Path) -> dict:
    from graphstore.export.local_warehouse import LocalWarehouse

    wh = LocalWarehouse(str(work / f"local-{rows.count}"))
    t0 = time.perf_counter()
    assert wh.load_run("emb", rows, "bench") == rows.count
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert wh.load_run("emb", rows, "bench") == rows.count
    return {"load_s": load_s, "rerun_s": time.perf_counter() - t0}


def bench_bigquery(rows, work: Path) -> dict:
    from graphstore.io import uris
    from graphstore.export.bigquery_warehouse import BigQueryWarehouse
    from graphstore.io.gcp import storage_client
    from tests.emulators import BQ_PROJECT

    bucket = f"bench-{rows.count}"
    storage_client().create_bucket(bucket)
    uri = f"gs://{bucket}/export/rows.parquet"
    t0 = time.perf_counter()
    uris.put_file(rows.path, uri)
    upload_s = time.perf_counter() - t0
    wh = BigQueryWarehouse(BQ_PROJECT, f"bench_{rows.count}")
    t0 = time.perf_counter()
    assert wh.load_run("emb", rows, "bench", source_uri=uri) == rows.count
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert wh.load_run("emb", rows, "bench", source_uri=uri) == rows.count
    return {"upload_s": upload_s, "load_s": load_s, "rerun_s": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--targets", default="local,bigquery-emulator")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "export.json"))
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    targets = a.targets.split(",")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        work = Path(tmp)
        emulators = []
        if "bigquery-emulator" in targets:
            from tests.emulators import start_bigquery, start_gcs

            gcs = start_gcs(work / "gcs", work)
            emulators.append(gcs)
            emulators.append(start_bigquery(work / "gcs", work))
            os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
            os.environ["BIGQUERY_EMULATOR_HOST"] = emulators[1].url
        try:
            print(f"{'rows':>9} {'target':<18} {'upload_s':>9} {'load_s':>8} {'rows/s':>10} "
                  f"{'rerun_s':>8} {'file_MB':>8}")
            for n in sizes:
                rows = write_rows(work / f"rows-{n}.parquet", n, a.dim)
                mb = os.path.getsize(rows.path) / 1e6
                for target in targets:
                    r = (bench_local if target == "local" else bench_bigquery)(rows, work)
                    total = r["load_s"] + r.get("upload_s", 0.0)
                    row = {"rows": n, "dim": a.dim, "target": target, "file_mb": round(mb, 1),
                           **{k: round(v, 2) for k, v in r.items()},
                           "rows_per_s": round(n / total)}
                    results.append(row)
                    print(f"{n:>9} {target:<18} {r.get('upload_s', 0.0):>9.2f} {r['load_s']:>8.2f} "
                          f"{row['rows_per_s']:>10} {r['rerun_s']:>8.2f} {mb:>8.1f}", flush=True)
        finally:
            for emu in emulators:
                emu.stop()
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"results": results}, indent=1))
    print(f"# rows/s counts upload + load; wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
