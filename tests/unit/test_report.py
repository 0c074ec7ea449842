"""The run report (graphstore.training.report) and its inputs (report_inputs), without a browser
(tests/integration/test_report_browser.py opens it in Chromium)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from graphstore.formats.run_paths import RunPaths
from graphstore.formats.stage_records import StageRecord
from graphstore.training.report import PLOTS, render, write_report
from graphstore.training.report_inputs import (
    build_projection, earlier_stages, node_attribute, project,
)
from tests import report_data

REPO = Path(__file__).resolve().parents[2]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_render_has_every_plot_and_the_comparison_table():
    pngs, md, page = render(report_data.inputs())
    assert list(pngs) == list(PLOTS)
    assert all(w > 200 and h > 100 for w, h in map(png_size, pngs.values()))
    # the metrics vs baselines table, in both forms
    for who, mrr in (("model", "0.2100"), ("popularity", "0.0300"), ("bpr", "0.0500"),
                     ("lightgcn", "0.0600")):
        assert re.search(rf"\| {who} \| {mrr} \|", md), md
        assert f"<td>{who}</td><td>{mrr}</td>" in page
    assert "500 candidates per pair" in md and "loader wait share (whole run) | 31.0%" in md
    # the full-ranking table beside it: recall@20 and NDCG@20 of the model and each baseline
    assert "full ranking: every one of 1682 label nodes" in md
    for who, recall, ndcg in (("model", "0.3150", "0.2100"), ("lightgcn", "0.0900", "0.0600")):
        assert f"| {who} | {recall} | {ndcg} | 90 |" in md, md
    assert "| pipeline: partition | 1.5 |" in md and "| train: training steps | 40.3 |" in md
    # the Markdown links the plots beside it; the HTML embeds them
    assert [f"![{n}]({n}.png)" in md for n in PLOTS] == [True] * len(PLOTS)
    uris = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(uris) == len(PLOTS)
    assert [base64.b64decode(u) for u in uris] == list(pngs.values())


def test_without_validation_the_report_says_so_and_drops_that_plot():
    pngs, md, _ = render(report_data.inputs(with_validation=False))
    assert "validation" not in pngs and "No validation pass ran" in md


def test_write_report_replaces_an_earlier_one(tmp_path: Path):
    run = tmp_path / "run"
    paths = RunPaths(str(run))
    assert write_report(str(run), report_data.inputs()) == paths.report_html
    names = sorted(p.name for p in (run / "report").iterdir())
    assert names == sorted([f"{n}.png" for n in PLOTS] + ["report.html", "report.md"])
    write_report(str(run), report_data.inputs(with_validation=False))
    assert not (run / "report" / "validation.png").exists()
    assert "No validation pass ran" in (run / "report" / "report.md").read_text()


def test_projection_finds_the_planted_axis():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(200, 8)) * 0.1)
    x[:, 3] += torch.from_numpy(np.repeat([-5.0, 5.0], 100))
    points, (first, second) = project(x)
    assert points.shape == (200, 2) and first > 0.9 and first + second <= 1.0 + 1e-9
    assert (np.sign(points[:100, 0]) != np.sign(points[100:, 0])).all() or \
        abs(points[:100, 0].mean() - points[100:, 0].mean()) > 8
    assert project(torch.zeros(1, 4))[0].shape == (1, 2)


def test_the_community_attribute_comes_from_the_generators_truth_file(tmp_path: Path):
    from graphstore.config import load_config_pair
    from graphstore.tools.datagen import DatasetSpec, generate_dataset
    from graphstore.partition import partition_graph
    from graphstore.formats.shards.reader import ShardSet

    data = tmp_path / "data"
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=3), str(data))
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(data)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(task))
    cfg, _ = load_config_pair(str(tmp_path / "t.yaml"), str(REPO / "configs" / "resource_local.yaml"))
    shards = tmp_path / "shards"
    partition_graph(cfg, num_partitions=2, output_uri=str(shards))
    id_map = ShardSet.open(str(shards)).id_map("item").to_pydict()
    truth = pq.read_table(data / "truth" / "communities_item.parquet").to_pydict()
    by_raw = dict(zip(truth["item_id"], truth["community"]))
    ids = torch.tensor([0, 5, 17, 3])
    name, values = node_attribute(str(data), str(shards), "item", ids)
    assert name == "community"
    assert values.tolist() == [by_raw[id_map["raw_id"][i]] for i in ids.tolist()]
    # no truth file (a user's data): no attribute; the projection is coloured by popularity
    assert node_attribute(str(tmp_path), str(shards), "item", ids) is None
    assert node_attribute(None, str(shards), "item", ids) is None
    p = build_projection("item", ids, torch.randn(4, 8), None, torch.tensor([0, 1, 2, 3, 4, 9] * 5))
    assert not p.categorical and p.attribute.startswith("log(1 + training positives)")
    assert p.values.tolist() == pytest.approx(np.log1p([0, 9, 9, 3]).tolist())


def test_earlier_stages_are_read_from_the_run_folder(tmp_path: Path):
    stages = tmp_path / "_stages"
    stages.mkdir()
    (stages / "partition.json").write_text('{"stage": "partition", "status": "ok", "seconds": 2.0}')
    (stages / "train.json").write_text('{"stage": "train", "status": "running"}')
    (stages / "broken.json").write_text('{"stage": ')
    assert earlier_stages(str(tmp_path)) == [StageRecord(stage="partition", status="ok",
                                                         seconds=2.0)]
    assert earlier_stages(str(tmp_path / "none")) == []
