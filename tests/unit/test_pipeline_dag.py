"""The KFP pipeline: compiled structure, stage selection, placeholders and frozen configs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from graphstore.config import load_config_pair
from graphstore.runtime.errors import UsageError
from graphstore.formats.stage_records import STAGES, StageRecord, read_records
from pipeline.stages import freeze, recorded, resolve_placeholders, stage_range

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("kfp") / "pipeline.yaml"
    proc = subprocess.run([sys.executable, "-m", "pipeline", "compile", "--output", str(out),
                           "--image", "europe-docker.pkg.dev/p/r/graphstore:1"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(out.read_text())


def _executors(spec: dict, dag: dict, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str, dict]]:
    """(names of the enclosing condition/loop tasks, display name, task) for every executor."""
    found = []
    for task in dag["tasks"].values():
        comp = spec["components"][task["componentRef"]["name"]]
        name = task["taskInfo"]["name"]
        if "dag" in comp:
            found += _executors(spec, comp["dag"], path + (name,))
        else:
            found.append((path, name, task))
    return found


def test_compiled_pipeline_has_the_parameters_and_image(compiled):
    params = compiled["root"]["inputDefinitions"]["parameters"]
    assert set(params) == {"task_config", "resource_config", "run_root", "run_id", "run_date",
                           "start_at", "stop_after", "graph_store_image", "resume"}
    assert params["resume"]["defaultValue"] is False
    assert params["start_at"]["defaultValue"] == "partition"
    assert params["stop_after"]["defaultValue"] == "export"
    assert params["graph_store_image"]["defaultValue"] == "europe-docker.pkg.dev/p/r/graphstore:1"
    images = {e["container"]["image"] for e in compiled["deploymentSpec"]["executors"].values()}
    assert images == {"europe-docker.pkg.dev/p/r/graphstore:1"}


def test_each_start_branch_chains_the_later_stages_under_stop_after(compiled):
    executors = _executors(compiled, compiled["root"]["dag"], ())
    top = [name for path, name, _ in executors if not path]
    assert top == ["freeze-configs"]
    for k, first in enumerate(STAGES):
        branch = f"start-at-{first}"
        chain = sorted(((path, name) for path, name, _ in executors if branch in path),
                       key=lambda pn: len(pn[0]))  # outer to inner
        assert [name for _, name in chain] == list(STAGES[k:]), branch
        for j, (path, name) in enumerate(chain):
            inner = path[path.index(branch) + 1:]
            # stage j of the chain sits inside "after-<each earlier stage of the chain>", in order
            afters = [p for p in inner if p.startswith("after-")]
            assert afters == [f"after-{s}" for s in STAGES[k:k + j]], (branch, name, path)
            if name == "export":
                assert any(p.startswith("for-loop") for p in inner)
    conditions = json.dumps(compiled)
    assert "inputs.parameter_values['pipelinechannel--stop_after'] != 'train'" in conditions


def test_stage_range_and_placeholders():
    assert stage_range("train", "infer") == ("train", "infer")
    assert stage_range("partition", "export") == STAGES
    with pytest.raises(UsageError, match="comes after"):
        stage_range("export", "train")
    with pytest.raises(UsageError, match="--start-at must be one of"):
        stage_range("fit", "export")
    text = "uri: gs://b/raw/{run_date}/edges.parquet  # {run_id} {run_time} {other}"
    assert resolve_placeholders(text, {"run_date": "2026-11-29", "run_id": "r1", "run_time": "031500"}) == (
        "uri: gs://b/raw/2026-11-29/edges.parquet  # r1 031500 {other}")


def test_freeze_resolves_placeholders_and_writes_valid_configs(tmp_path):
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["datasetConfig"]["dataRootUri"] = str(tmp_path / "raw" / "{run_date}")
    task["exportConfig"]["modelVersion"] = "v{run_time}"
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    run_dir, run_id, node_types = freeze(yaml.safe_dump(task), res, str(tmp_path / "runs"), "",
                                         run_date="2026-11-29T03:15:00")
    assert run_dir.endswith("/" + run_id)  # the id it made is the one it hands the stages
    assert re.fullmatch(re.escape(str(tmp_path / "runs" / "20261129T031500Z-")) + "[0-9a-f]{4}",
                        run_dir), run_dir
    assert node_types == ["user", "item"]
    frozen, _ = load_config_pair(f"{run_dir}/config/task.yaml", f"{run_dir}/config/resource.yaml")
    assert frozen.dataset.data_root_uri == str(tmp_path / "raw" / "2026-11-29")
    assert frozen.export.model_version == "v031500"
    record = json.loads(Path(run_dir, "config", "run.json").read_text())
    assert record["run_id"] == Path(run_dir).name and record["run_date"] == "2026-11-29"
    task["graphMetadata"]["nodeTypes"].append("bad type")
    with pytest.raises(Exception, match="nodeTypes"):
        freeze(yaml.safe_dump(task), res, str(tmp_path / "runs"), "r2")


def test_a_stage_record_says_running_from_its_start_then_ok_or_failed(tmp_path):
    run = str(tmp_path / "run")
    with recorded(run, "export", node_type="user") as record:
        (during,) = read_records(run)
        record.update(rows=3)
    assert during == StageRecord(stage="export", status="running", node_type="user")
    (done,) = read_records(run)
    assert (done.status, done.rows, done.node_type) == ("ok", 3, "user")
    assert done.seconds is not None and done.seconds >= 0
    with pytest.raises(ValueError), recorded(run, "train"):
        raise ValueError("bad batch")
    failed = [r for r in read_records(run) if r.stage == "train"]
    assert failed[0].status == "failed" and "bad batch" in failed[0].error


def test_fresh_run_ids_of_the_same_second_differ_and_folders_are_claimed_once(tmp_path):
    """Issue 11 item 7: two runs started in the same second once shared one folder."""
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    task = (REPO / "configs" / "task_hetero.yaml").read_text()
    root = str(tmp_path / "runs")
    dirs = {freeze(task, res, root, "", run_date="2026-11-29T03:15:00")[0] for _ in range(5)}
    assert len(dirs) == 5
    for d in dirs:
        assert json.loads(Path(d, "config", "run.json").read_text())["run_id"] == Path(d).name


def test_a_run_folder_holding_another_run_is_refused_unless_resumed(tmp_path):
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    task = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task["exportConfig"]["modelVersion"] = "v{run_time}"
    root = str(tmp_path / "runs")
    run_dir, _, _ = freeze(yaml.safe_dump(task), res, root, "r1", run_date="2026-11-29T03:15:00")
    first = Path(run_dir, "config", "run.json").read_text()
    with pytest.raises(UsageError, match="already holds run r1.*--start-at"):
        freeze(yaml.safe_dump(task), res, root, "r1", run_date="2026-11-30T04:00:00")
    assert Path(run_dir, "config", "run.json").read_text() == first
    # resuming keeps the run's own record and placeholder values
    freeze(yaml.safe_dump(task), res, root, "r1", run_date="2026-11-30T04:00:00", resume=True)
    assert Path(run_dir, "config", "run.json").read_text() == first
    frozen, _ = load_config_pair(f"{run_dir}/config/task.yaml", f"{run_dir}/config/resource.yaml")
    assert frozen.export.model_version == "v031500"
    # a folder of somebody else's is never a run folder of ours
    (tmp_path / "runs" / "theirs").mkdir()
    (tmp_path / "runs" / "theirs" / "notes.txt").write_text("keep")
    with pytest.raises(UsageError, match="not a run folder of ours"):
        freeze(yaml.safe_dump(task), res, root, "theirs", resume=True)
    assert sorted(p.name for p in (tmp_path / "runs" / "theirs").iterdir()) == ["notes.txt"]
