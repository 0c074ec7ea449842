"""The BigQuery engine's bytes before it runs (graphstore.planning.bigquery_cost), on the shape
of docs/vertex.md's worked example: each statement's reads written out by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.planning.bigquery_cost import (
    PRICE_PER_TIB_USD, TIB, TableShape, column_bytes, cost_lines, engine_costs,
)

REPO = Path(__file__).resolve().parents[2]
N, E, D = 50_000_000, 1_000_000_000, 128


def _task(tmp_path: Path, features: int):
    task = yaml.safe_load((REPO / "configs" / "task_homo.yaml").read_text())
    src = task["datasetConfig"]["dataSources"]
    src["nodes"][0].update(uri="bq://my-project.raw.nodes",
                           featureColumns=[f"f_{i}" for i in range(features)])
    src["edges"][0]["uri"] = "bq://my-project.raw.edges"
    task["datasetConfig"].pop("dataRootUri", None)
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(tmp_path / "task.yaml"),
                              str(REPO / "configs" / "resource_local.yaml"))
    ns, es = cfg.dataset.node_sources[0], cfg.dataset.edge_sources[0]
    shapes = {ns.uri: TableShape(N, {ns.id_column: 8, **{c: 8 for c in ns.feature_columns}}),
              es.uri: TableShape(E, {es.src_column: 8, es.dst_column: 8})}
    return cfg, shapes


@pytest.mark.parametrize("features", [D, 0])
def test_the_worked_example_statement_by_statement(tmp_path, features):
    cfg, shapes = _task(tmp_path, features)
    assert cfg.trainer.storage.storage_args.sample_edge_direction == "in"
    f = 8 * features
    nodes = (N * 8  # ids checked
             + 3 * N * 8  # numbered
             + N * f  # features checked
             + (N * (8 + f) + N * 24 if features else 0)  # joined once to (int_id, part, raw_id)
             + N * 16  # id map exported
             + N * (16 + f))  # node files exported (int_id, part, features)
    edges = (E * 16  # endpoints checked for nulls
             + E * 16 + 2 * N * 16  # mapped: endpoints, and the id table for each end
             + E * 8  # counted per partition
             + E * 24  # exported (src, dst, part)
             + E * 16 + E * 8 + E * 24)  # labels placed by source, counted, exported
    costs = engine_costs(cfg, shapes)
    assert [round(c.bytes) for c in costs] == [nodes, edges]
    total = (nodes + edges) / TIB
    assert cost_lines(costs)[-1].endswith(
        f"total = {total:.6f} TiB, about ${total * PRICE_PER_TIB_USD:.2f} at $6.25 per TiB "
        "on-demand (US; the first TiB each month is free)")


def test_string_and_array_columns_share_what_the_table_size_leaves():
    widths = column_bytes([("id", "STRING", False), ("n", "INT64", False),
                           ("f", "FLOAT64", True)], rows=10, table_bytes=10 * (8 + 12 + 40))
    assert widths == {"n": 8, "id": 26.0, "f": 26.0}


def test_the_dry_run_names_each_source_statement_and_what_it_would_bill(tmp_path):
    """``pipeline plan``'s dry run (pipeline.bigquery_dry_run): one statement per source table,
    each the engine's own check on that table; the service's answers printed per statement, a
    failed one with its message; the 'use the estimate' line only when every answer is 0."""
    from graphstore.partition.bigquery_edges import endpoint_check_sql
    from graphstore.partition.bigquery_numbering import id_check_sql
    from pipeline.bigquery_dry_run import DryRun, dry_run_lines, source_statements

    cfg, _ = _task(tmp_path, 2)
    ns, es = cfg.dataset.node_sources[0], cfg.dataset.edge_sources[0]
    nodes, edges = source_statements(cfg)
    assert nodes.sql == id_check_sql("my-project.raw.nodes", ns.id_column)
    assert edges.sql == endpoint_check_sql("my-project.raw.edges", es.src_column, es.dst_column)
    assert ns.uri in nodes.purpose and es.uri in edges.purpose
    billed = dry_run_lines([DryRun(nodes, 1_200_000_000), DryRun(edges, None, "Access Denied")])
    assert billed[1].split()[:2] == ["1,200,000,000", "B"] and nodes.purpose in billed[1]
    assert billed[2].split()[0] == "failed" and billed[2].endswith(": Access Denied")
    assert len(billed) == 3  # a billed answer: the dry run's figure stands, no 0-bytes line
    zero = dry_run_lines([DryRun(nodes, 0), DryRun(edges, 0)])
    assert zero[-1].strip().startswith("the service reported 0 bytes for every statement")
