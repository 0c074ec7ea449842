"""The run folder layout (graphstore.formats.run_paths.RunPaths), the run-id rule (run.json first, the
folder name only for a folder without one) and the one choice of a stage's config sections."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.runtime.errors import UsageError
from graphstore.formats.run_paths import RUN_RECORD, RunPaths, read_run_id, read_run_record
from graphstore.config.stage import stage_resources, stage_section

REPO = Path(__file__).resolve().parents[2]


def test_every_path_of_a_local_run_folder():
    p = RunPaths("/runs/r1/")  # a trailing slash is dropped
    assert p.run_dir == "/runs/r1"
    assert (p.config_dir, p.task_config, p.resource_config, p.run_record) == (
        "/runs/r1/config", "/runs/r1/config/task.yaml", "/runs/r1/config/resource.yaml",
        "/runs/r1/config/run.json")
    assert (p.shards, p.checkpoint, p.model, p.metrics) == (
        "/runs/r1/shards", "/runs/r1/checkpoint", "/runs/r1/checkpoint/model.pt",
        "/runs/r1/checkpoint/metrics.json")
    assert p.embeddings("user") == "/runs/r1/embeddings/user"
    assert p.export("item") == "/runs/r1/export/item"
    assert p.export_rows("item") == "/runs/r1/export/item/rows.parquet"
    assert (p.report_dir, p.report_html, p.report_markdown, p.report_image("loss")) == (
        "/runs/r1/report", "/runs/r1/report/report.html", "/runs/r1/report/report.md",
        "/runs/r1/report/loss.png")
    assert p.tensorboard == "/runs/r1/tensorboard"
    assert p.logs("train") == "/runs/r1/logs/train"
    assert p.stage_records == "/runs/r1/_stages"
    assert p.stage_record("export-user") == "/runs/r1/_stages/export-user.json"
    assert p.readiness("infer", "job7") == "/runs/r1/_graphstore/infer/job7"
    assert p.folder_name == "r1"
    assert "/".join(RUN_RECORD) == "config/run.json"


def test_gcs_run_folders_get_the_same_layout():
    p = RunPaths("gs://bucket/runs/r1/")
    assert p.model == "gs://bucket/runs/r1/checkpoint/model.pt"
    assert p.embeddings("user") == "gs://bucket/runs/r1/embeddings/user"
    assert p.run_record == "gs://bucket/runs/r1/config/run.json"
    assert p.folder_name == "r1"
    assert RunPaths.of_run("gs://bucket/runs", "r2").run_dir == "gs://bucket/runs/r2"


def test_paths_stay_inside_the_run_folder_and_the_value_is_frozen():
    p = RunPaths("runs/r1")
    for bad in ("", ".", "..", "a/b", "../x", "a\\b"):
        with pytest.raises(ValueError, match="single path segment"):
            p.embeddings(bad)
    with pytest.raises(ValueError, match="single path segment"):
        p.logs("../train")
    with pytest.raises(ValueError, match="single path segment"):
        p.readiness("train", "a/b")
    for bad_dir in ("", "/", "gs://"):
        with pytest.raises(ValueError, match="names no folder"):
            RunPaths(bad_dir)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.run_dir = "elsewhere"  # type: ignore[misc]
    with pytest.raises(UsageError, match="run id"):
        RunPaths.of_run("runs", "../etc")
    assert RunPaths("runs/r1") == RunPaths("runs/r1/")


def _record(run_dir: Path, record: object) -> None:
    (run_dir / "config").mkdir(parents=True, exist_ok=True)
    (run_dir / "config" / "run.json").write_text(json.dumps(record))


def test_the_run_id_comes_from_run_json_not_from_the_folder_name(tmp_path):
    renamed = tmp_path / "copy-of-r1"  # a run folder copied or renamed keeps its id
    _record(renamed, {"run_id": "r1", "started_at": "2026-11-29T03:15:00+00:00"})
    assert read_run_id(str(renamed)) == "r1"
    assert read_run_id(str(renamed) + "/") == "r1"
    assert read_run_record(str(renamed))["started_at"] == "2026-11-29T03:15:00+00:00"


def test_a_folder_without_run_json_falls_back_to_its_checked_name(tmp_path):
    hand_made = tmp_path / "my-run.2"
    hand_made.mkdir()
    assert read_run_record(str(hand_made)) is None
    assert read_run_id(str(hand_made)) == "my-run.2"
    bad = tmp_path / "my run"  # not a valid run id: the user must name one
    bad.mkdir()
    with pytest.raises(UsageError, match=r"has no config/run.json.*'my run'.*--run-id"):
        read_run_id(str(bad))


@pytest.mark.parametrize("content", ["not json {", "[1, 2]", '"r1"'])
def test_a_run_json_that_is_not_a_record_is_refused_naming_the_file(tmp_path, content):
    (tmp_path / "r1" / "config").mkdir(parents=True)
    (tmp_path / "r1" / "config" / "run.json").write_text(content)
    with pytest.raises(UsageError, match=r"r1/config/run.json is not a run record"):
        read_run_id(str(tmp_path / "r1"))


@pytest.mark.parametrize("record", [{}, {"run_id": "../x"}, {"run_id": 7}])
def test_a_run_json_without_a_valid_run_id_is_refused_naming_the_file(tmp_path, record):
    _record(tmp_path / "r1", record)
    with pytest.raises(UsageError, match=r"r1/config/run.json: run_id"):
        read_run_id(str(tmp_path / "r1"))


def test_the_pipeline_writes_the_record_that_read_run_id_reads(tmp_path):
    from pipeline.stages import freeze

    task = (REPO / "configs" / "task_hetero.yaml").read_text()
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    run_dir, run_id, _ = freeze(task, res, str(tmp_path / "runs"), "", run_date="2026-11-29T03:15:00")
    record = json.loads(Path(RunPaths(run_dir).run_record).read_text())
    assert read_run_id(run_dir) == record["run_id"] == run_id
    renamed = tmp_path / "moved"
    Path(run_dir).rename(renamed)
    assert read_run_id(str(renamed)) == record["run_id"]


def test_export_stores_the_run_id_of_run_json(tmp_path):
    """components.export / export_run without --run-id: run.json's id, else the folder name."""
    import duckdb

    from graphstore.export import export_run
    from tests.embedding_runs import build_graph, make_run

    graph = build_graph(tmp_path / "graph")
    run = make_run(graph, tmp_path / "runs", "renamed-folder")
    _record(run, {"run_id": "r-from-record"})
    export_run(graph["task"], str(run), node_types=["item"])
    hand_made = make_run(graph, tmp_path / "runs", "hand-made")
    export_run(graph["task"], str(hand_made), node_types=["item"])
    con = duckdb.connect(str(tmp_path / "runs" / "warehouse" / "warehouse.duckdb"), read_only=True)
    try:
        ids = con.execute("SELECT DISTINCT run_id FROM embeddings_item ORDER BY 1").fetchall()
    finally:
        con.close()
    assert ids == [("hand-made",), ("r-from-record",)]


def test_one_function_chooses_a_stages_config_sections():
    task, res = load_config_pair(str(REPO / "configs" / "task_hetero.yaml"),
                                 str(REPO / "configs" / "resource_local.yaml"))
    assert stage_resources(res, "train") is res.trainer
    assert stage_resources(res, "infer") is res.inferencer
    assert stage_section(task, "train") is task.trainer
    assert stage_section(task, "infer") is task.inferencer
    for bad in ("partition", "export", "Train"):
        with pytest.raises(ValueError, match="stage must be one of train, infer"):
            stage_resources(res, bad)
        with pytest.raises(ValueError, match="stage must be one of train, infer"):
            stage_section(task, bad)


LAYOUT_NAMES = ("model.pt", "metrics.json", "run.json", "rows.parquet", "_stages", "_graphstore",
                "report.html", "report.md")
"""File and folder names of the run folder that only graphstore/formats/run_paths.py may spell."""


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string constant in ``path`` that is not a docstring."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_run_folder_names_are_spelled_only_in_run_paths():
    found = []
    for folder in ("graphstore", "pipeline", "components"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path == REPO / "graphstore" / "formats" / "run_paths.py":
                continue
            for line, value in _string_literals(path):
                if value in LAYOUT_NAMES or any(value.startswith(n + "/") or value.endswith("/" + n)
                                                for n in LAYOUT_NAMES):
                    found.append(f"{path.relative_to(REPO)}:{line}: {value!r}")
    assert not found, "use graphstore.formats.run_paths.RunPaths instead of spelling these:\n" + "\n".join(found)


def test_the_frozen_configs_of_a_run_are_where_run_paths_says(tmp_path):
    from pipeline.stages import config_paths, freeze

    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    run_dir, _, _ = freeze(yaml.safe_dump(task), res, str(tmp_path / "runs"), "r1")
    paths = RunPaths.of_run(str(tmp_path / "runs"), "r1")
    assert run_dir == paths.run_dir
    assert config_paths(run_dir) == (paths.task_config, paths.resource_config)
    assert Path(paths.task_config).is_file() and Path(paths.resource_config).is_file()


def test_stage_records_round_trip_in_stage_order_and_refuse_what_they_are_not(tmp_path):
    from graphstore.formats.stage_records import StageRecord, read_records, write_record

    run = str(tmp_path)
    export = StageRecord(stage="export", status="ok", node_type="user", seconds=1.5, rows=7,
                         table="embeddings_user", where="/w")
    train = StageRecord(stage="train").with_(status="failed", error="boom",
                                             metrics={"model": {"mrr": 0.2}})
    write_record(run, export)
    write_record(run, train)
    assert sorted(p.name for p in (tmp_path / "_stages").iterdir()) == ["export-user.json",
                                                                         "train.json"]
    assert read_records(run) == [train, export]  # stage order, not file order
    assert json.loads((tmp_path / "_stages" / "train.json").read_text()) == {
        "stage": "train", "status": "failed", "error": "boom", "metrics": {"model": {"mrr": 0.2}}}
    with pytest.raises(TypeError):
        train.with_(rowz=3)  # a field that does not exist
    with pytest.raises(ValueError, match="status 'done'"):
        StageRecord(stage="train", status="done")
    (tmp_path / "_stages" / "partition.json").write_text('{"stage": ')  # half-written
    with pytest.raises(ValueError, match="partition.json: not a stage record"):
        read_records(run)
    assert read_records(run, skip_unreadable=True) == [train, export]
    assert read_records(str(tmp_path / "none")) == []
