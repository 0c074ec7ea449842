"""Config files that are broken or hostile: not UTF-8, too large, YAML alias bombs, recursive or
deep values, huge values. Each gives one short problem line (exit 2 from the CLI), fast, never a
traceback (graphstore.config._yaml, graphstore.config._raw, graphstore.runtime.errors.show)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from graphstore.config import ConfigError, load_config_pair, load_task_config

from tests.unit.test_config import BASE_RES, BASE_TASK, fresh, write

# the documented limits (docs/configs.md, "Limits of a config file")
MAX_CONFIG_BYTES = 1 << 20
MAX_ALIAS_EXPANSION = 100_000
MAX_DEPTH = 64
VALUE_CHARS = 80  # graphstore.runtime.errors.show
LINE_CHARS = 400  # graphstore.config.errors


def _only_problem(path: Path) -> str:
    with pytest.raises(ConfigError) as exc:
        load_task_config(path)
    assert len(exc.value.problems) == 1, str(exc.value)
    return str(exc.value)


def _billion_laughs(levels: int = 9, fan_out: int = 10) -> str:
    """~1 KB of YAML whose trainerArgs expand to fan_out ** levels values."""
    lines = ["    l0: &l0 [" + ", ".join(["lol"] * fan_out) + "]"]
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan_out) + "]")
    return "\n".join(lines) + "\n"


def test_config_file_over_1_mib_is_refused_unread(tmp_path: Path) -> None:
    text = yaml.safe_dump(fresh(BASE_TASK), sort_keys=False)
    task = tmp_path / "task.yaml"
    task.write_text(text + "# " + "x" * MAX_CONFIG_BYTES + "\n")
    assert _only_problem(task) == (f"{task}: is larger than 1 MiB, the most a config file may have; "
                                   "keep data in data files and name them in the config")
    task.write_text(text + "# " + "x" * (MAX_CONFIG_BYTES - len(text) - 3) + "\n")
    assert task.stat().st_size == MAX_CONFIG_BYTES
    load_task_config(task)  # exactly the limit is fine


@pytest.mark.timeout(1)
def test_yaml_alias_bomb_is_refused_within_a_second(tmp_path: Path) -> None:
    """A 1 KB billion-laughs document inside trainerArgs made validate spin for minutes."""
    text = yaml.safe_dump(fresh(BASE_TASK), sort_keys=False).replace(
        "  trainerArgs:\n", "  trainerArgs:\n" + _billion_laughs(), 1)
    assert len(text.encode()) < 4096
    task = write(tmp_path / "task.yaml", text)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as exc:
        load_task_config(task)
    assert time.perf_counter() - t0 < 1.0
    assert str(exc.value) == (f"{task}: refused: YAML aliases expand to more than {MAX_ALIAS_EXPANSION} "
                              "extra values (an alias bomb?); write the values out or use fewer aliases")
    # aliases within the limit still work
    text = yaml.safe_dump(fresh(BASE_TASK), sort_keys=False)
    trainer_nn = "  trainerArgs:\n    num_neighbors:\n    - 10\n    - 5\n"
    assert trainer_nn in text
    text = text.replace(trainer_nn, "  trainerArgs:\n    num_neighbors: &nn [4, 2]\n").replace(
        "  command: python -m components.infer\n",
        "  command: python -m components.infer\n  inferencerArgs: {num_neighbors: *nn}\n")
    task = load_task_config(write(tmp_path / "task.yaml", text))
    assert task.trainer.trainer_args["num_neighbors"] == (4, 2)
    assert task.inferencer.inferencer_args["num_neighbors"] == (4, 2)


@pytest.mark.timeout(1)
def test_alias_bomb_in_a_set_override_is_refused(tmp_path: Path) -> None:
    task = write(tmp_path / "task.yaml", fresh(BASE_TASK))
    bomb = "{" + _billion_laughs().replace("\n", ",").replace("    ", "").rstrip(",") + "}"
    with pytest.raises(ConfigError) as exc:
        load_task_config(task, overrides=(f"trainerConfig.trainerArgs.x={bomb}",))
    assert "has a value that is refused: YAML aliases expand to more than" in str(exc.value)
    assert len(str(exc.value)) < 400


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    text = yaml.safe_dump(fresh(BASE_TASK), sort_keys=False).replace(
        "  trainerArgs:\n", "  trainerArgs:\n    loop: &loop [1, *loop]\n", 1)
    task = write(tmp_path / "task.yaml", text)
    message = _only_problem(task)
    assert message.startswith(f"{task}: refused: a YAML alias refers to its own anchor (line ")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
def test_values_nested_too_deeply_are_refused(tmp_path: Path, depth: int) -> None:
    task = write(tmp_path / "task.yaml", "a: " + "[" * depth + "]" * depth + "\n")
    assert _only_problem(task) == f"{task}: refused: values are nested more than {MAX_DEPTH} levels deep"


def test_an_int_too_long_to_convert_is_a_problem(tmp_path: Path) -> None:
    task = write(tmp_path / "task.yaml", "graphStoreRuntimeConfig: {randomSeed: " + "9" * 5000 + "}\n")
    message = _only_problem(task)
    assert message.startswith(f"{task}: refused: a value cannot be read: Exceeds the limit")
    assert len(message) < 300


def test_limits_are_the_documented_ones() -> None:
    from graphstore.runtime import errors
    from graphstore.config import _yaml
    from graphstore.config import errors as config_errors

    assert (_yaml.MAX_CONFIG_BYTES, _yaml.MAX_ALIAS_EXPANSION, _yaml.MAX_DEPTH) == (
        MAX_CONFIG_BYTES, MAX_ALIAS_EXPANSION, MAX_DEPTH)
    assert (errors.VALUE_CHARS, config_errors.LINE_CHARS) == (VALUE_CHARS, LINE_CHARS)


def test_show_cuts_every_kind_of_value() -> None:
    from graphstore.runtime.errors import show

    assert show("ab") == "'ab'"
    long = show("x" * 200_000)
    assert long.startswith("'xxx") and long.endswith("... (200000 chars)")
    assert len(long) == VALUE_CHARS
    assert len(show(list(range(100_000)))) <= VALUE_CHARS
    assert len(show({"k" * 500: ["v" * 500] * 500})) <= VALUE_CHARS
    loop: list = []
    loop.append(loop)
    assert len(show(loop)) <= VALUE_CHARS


def test_many_problems_are_capped(tmp_path: Path) -> None:
    data = fresh(BASE_TASK)
    data["datasetConfig"]["dataSources"]["nodes"][0]["featureColumns"] = list(range(1000))
    with pytest.raises(ConfigError) as exc:
        load_config_pair(write(tmp_path / "task.yaml", data), write(tmp_path / "res.yaml", fresh(BASE_RES)))
    assert len(exc.value.problems) == 1000
    text = str(exc.value)
    assert text.startswith("1000 config problems:\n")
    assert text.splitlines()[-1] == "... and 950 more problems (fix these first)"
    assert len(text.splitlines()) == 52
