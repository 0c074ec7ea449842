"""The files generated from the config models (docs/configs.md, docs/schema/*.schema.json) are
current, and the JSON Schema accepts what the loader accepts (configs/*.yaml, the seed's string
forms) and refuses what it refuses (unknown keys, wrong types, bad names)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from graphstore.config import docs

from tests.unit.test_config import BASE_RES, BASE_TASK, VERTEX_RES, fresh

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def _schema(kind: str) -> dict[str, Any]:
    return json.loads((REPO / "docs" / "schema" / f"{kind}.schema.json").read_text())


def _errors(schema: dict[str, Any], value: Any, node: dict[str, Any] | None = None,
            path: str = "") -> list[str]:
    """The JSON Schema keywords our schemas use, checked the way an editor's YAML server does."""
    node = schema if node is None else node
    if "$ref" in node:
        return _errors(schema, value, schema["$defs"][node["$ref"].split("/")[-1]], path)
    if "anyOf" in node:
        found = [_errors(schema, value, sub, path) for sub in node["anyOf"]]
        return [] if [] in found else min(found, key=len)
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    kind = node.get("type")
    if kind in types and not isinstance(value, types[kind]):
        return [f"{path}: not {kind}"]
    if kind in ("integer", "number") and (isinstance(value, bool) or not isinstance(
            value, int if kind == "integer" else (int, float))):
        return [f"{path}: not {kind}"]
    out = []
    if "enum" in node and value not in node["enum"]:
        out.append(f"{path}: not in {node['enum']}")
    if "pattern" in node and not re.search(node["pattern"], value):
        out.append(f"{path}: does not match {node['pattern']}")
    if "not" in node and not _errors(schema, value, node["not"], path):
        out.append(f"{path}: matches {node['not']}")
    low, high = node.get("minimum", value), node.get("maximum", value)
    if isinstance(value, (int, float)) and not low <= value <= high:
        out.append(f"{path}: out of range")
    if isinstance(value, dict):
        props = node.get("properties", {})
        out += [f"{path}.{k}: missing" for k in node.get("required", ()) if k not in value]
        for key in value if "propertyNames" in node else ():
            out += _errors(schema, key, node["propertyNames"], f"{path}.{key}")
        for key, sub in value.items():
            if key in props:
                out += _errors(schema, sub, props[key], f"{path}.{key}")
            elif node.get("additionalProperties") is False:
                out.append(f"{path}.{key}: unknown key")
            elif isinstance(node.get("additionalProperties"), dict):
                out += _errors(schema, sub, node["additionalProperties"], f"{path}.{key}")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            out += _errors(schema, item, node["items"], f"{path}[{i}]")
    return out


# ---- the generated files are current ------------------------------------------------------------

def test_generated_files_are_current() -> None:
    stale = docs.stale_files(REPO)
    assert not stale, f"stale: {', '.join(stale)}; run: python -m pipeline schema --update-docs"


def test_stale_check_sees_an_edit_and_a_changed_description(tmp_path: Path, monkeypatch) -> None:
    for rel in (docs.TEMPLATE, *docs.GENERATED):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    assert docs.stale_files(tmp_path) == []
    edited = tmp_path / "docs" / "configs.md"
    edited.write_text(edited.read_text().replace("| `memoryLimitMb` |", "| `memoryLimitMB` |"))
    assert docs.stale_files(tmp_path) == ["docs/configs.md"]
    shutil.copy(REPO / "docs" / "configs.md", edited)
    from graphstore.config import PartitionConfig
    monkeypatch.setattr(PartitionConfig.model_fields["memory_limit_mb"], "description", "changed")
    assert docs.stale_files(tmp_path) == ["docs/configs.md"]


def test_every_documented_key_has_a_meaning() -> None:
    text = (REPO / "docs" / "configs.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 60
    assert [r for r in rows if r.endswith("|  |")] == []
    assert "<!-- keys:" not in text


# ---- the schema ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_configs_name_their_schema_and_fit_it(path: Path) -> None:
    kind = "task" if path.name.startswith("task_") else "resource"
    first = path.read_text().splitlines()[0]
    assert first == f"# yaml-language-server: $schema=../docs/schema/{kind}.schema.json"
    assert _errors(_schema(kind), yaml.safe_load(path.read_text())) == []


def test_schema_accepts_the_seed_string_forms_and_nulls() -> None:
    task = fresh(BASE_TASK)
    args = task["trainerConfig"]["graphStoreStorageConfig"]["storageArgs"]
    args["num_server_sessions"] = "1"
    args["splitter_kwargs"] = "{'sampling_direction': 'in', 'num_val': 0.1}"
    task["datasetConfig"]["partitionConfig"] = {"numPartitions": None, "addReverseEdges": "True",
                                                "memoryLimitMb": "4096"}
    task["graphStoreRuntimeConfig"] = {"rpcTimeoutS": "30.5", "randomSeed": "3"}
    task["exportConfig"] = None
    assert _errors(_schema("task"), task) == []
    assert _errors(_schema("resource"), fresh(BASE_RES)) == []
    assert _errors(_schema("resource"), fresh(VERTEX_RES)) == []


@pytest.mark.parametrize("kind,mutate,where", [
    ("task", lambda d: d["graphMetadata"].update(edgeType=[]), ".graphMetadata.edgeType: unknown key"),
    ("task", lambda d: d["inferencerConfig"].update(inferenceBatchSize=True),
     ".inferencerConfig.inferenceBatchSize"),
    ("task", lambda d: d["graphMetadata"]["edgeTypes"][0].update(relation="a__b"), ".relation: matches"),
    ("task", lambda d: d["datasetConfig"].update(partitionConfig={"memoryLimitMb": 64}), ".memoryLimitMb"),
    ("task", lambda d: d.pop("trainerConfig"), ".trainerConfig: missing"),
    ("resource", lambda d: d["shared_resource_config"].update(resource_labels={"Team": "x"}), ".Team"),
    ("resource", lambda d: d["trainer_resource_config"]["local_graph_store_config"].update(
        num_compute_machines=0), ".num_compute_machines: out of range"),
])
def test_schema_refuses_what_the_loader_refuses(kind: str, mutate, where: str) -> None:
    data = fresh(BASE_TASK if kind == "task" else BASE_RES)
    mutate(data)
    errors = _errors(_schema(kind), data)
    assert any(where in e for e in errors), errors


# ---- the command --------------------------------------------------------------------------------
