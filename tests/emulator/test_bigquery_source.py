"""The partition stage reading raw tables from BigQuery (``bq://project.dataset.table``) with the
real client against bqemulator: the same graph as from the Parquet files it was loaded from."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from graphstore.io import uris
from graphstore.config import load_config_pair
from graphstore.config.errors import ConfigError
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.errors import InputDataError
from graphstore.io.gcp import bigquery_client
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.emulator]
TABLES = {"users.parquet": "users", "items.parquet": "items", "user_item.parquet": "user_item",
          "item_item.parquet": "item_item"}


def _configs(tmp: Path, sources: dict[str, str]) -> tuple[Path, Path]:
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    ds = task["datasetConfig"]
    ds["dataRootUri"] = str(tmp / "data")
    for src in [*ds["dataSources"]["nodes"], *ds["dataSources"]["edges"]]:
        src["uri"] = sources[src["uri"]]
    tp, rp = tmp / f"task-{len(list(tmp.glob('task-*')))}.yaml", tmp / "res.yaml"
    tp.write_text(yaml.safe_dump(task))
    rp.write_text((REPO / "configs" / "resource_local.yaml").read_text())
    return tp, rp


def _graph(shards: Path) -> dict:
    """Node and edge counts, raw ids, each node's features and each edge, by raw ids."""
    s = ShardSet.open(str(shards))
    raw = {nt: s.id_map(nt).sort_by("int_id").column("raw_id").to_pylist()
           for nt in s.manifest.node_types}
    feats, edges = {nt: {} for nt in raw}, {}
    for p in range(s.manifest.num_partitions):
        part = s.load_partition(p)
        for nt, shard in part.nodes.items():
            for i, row in zip(shard.ids, shard.feats if shard.feats is not None else []):
                feats[nt][raw[nt][i]] = [round(float(v), 5) for v in row]
        for et, shard in part.edges.items():
            src_t, _, dst_t = et.split("__")
            edges.setdefault(et, set()).update(
                (raw[src_t][a], raw[dst_t][b]) for a, b in zip(shard.src, shard.dst))
    return {"counts": {nt: v.count for nt, v in s.manifest.node_types.items()},
            "ids": {nt: sorted(ids) for nt, ids in raw.items()}, "feats": feats, "edges": edges}


def test_partition_reads_bigquery_tables_like_the_files(tmp_path, bucket, bigquery_emulator):
    from google.cloud import bigquery

    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=4), str(tmp_path / "data"))
    client = bigquery_client(bigquery_emulator.project)
    client.create_dataset("raw", exists_ok=True)
    kinds = {"string": "STRING", "int64": "INT64", "float": "FLOAT64", "double": "FLOAT64"}
    for file, table in TABLES.items():
        uri = f"gs://{bucket}/raw/{file}"
        uris.put_file(str(tmp_path / "data" / file), uri)
        schema = [bigquery.SchemaField(f.name, kinds[str(f.type)])
                  for f in pq.read_schema(tmp_path / "data" / file)]
        ref = f"{bigquery_emulator.project}.raw.{table}"
        client.create_table(bigquery.Table(ref, schema=schema))
        config = bigquery.LoadJobConfig(source_format="PARQUET", schema=schema)
        client.load_table_from_uri(uri, ref, job_config=config).result()
    cfg_files, _ = load_config_pair(*_configs(tmp_path, {f: f for f in TABLES}))
    bq = {f: f"bq://{bigquery_emulator.project}.raw.{t}" for f, t in TABLES.items()}
    cfg_bq, _ = load_config_pair(*_configs(tmp_path, bq))
    assert {s.format for s in cfg_bq.dataset.edge_sources} == {"bigquery"}
    partition_graph(cfg_files, num_partitions=2, output_uri=str(tmp_path / "from_files"))
    partition_graph(cfg_bq, num_partitions=2, output_uri=str(tmp_path / "from_bq"))
    a, b = _graph(tmp_path / "from_files"), _graph(tmp_path / "from_bq")
    assert a["counts"]["user"] > 0 and len(a["feats"]["user"]) == a["counts"]["user"]
    assert all(a["edges"].values()) and a == b
    # a missing table or column is named
    bad = {**bq, "users.parquet": f"bq://{bigquery_emulator.project}.raw.nope"}
    with pytest.raises(InputDataError, match="raw.nope not found"):
        partition_graph(load_config_pair(*_configs(tmp_path, bad))[0], num_partitions=2,
                        output_uri=str(tmp_path / "bad"))
    assert not (tmp_path / "bad" / "manifest.json").exists()


def test_bigquery_uris_are_checked_by_the_config_loader(tmp_path):
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=4), str(tmp_path / "data"))
    bad = {f: f for f in TABLES}
    bad["users.parquet"] = "bq://Not_A_Project.raw.users"
    with pytest.raises(ConfigError, match=r"nodes\[0\]\.uri.*bq://project\.dataset\.table"):
        load_config_pair(*_configs(tmp_path, bad))
