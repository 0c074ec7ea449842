"""Load task and resource configs: YAML -> overrides -> typed, checked, frozen models.

Order of precedence (later wins): the values in the file, then each ``key.path=value`` override in
the order given (values parsed as YAML, so ``a.b=[1,2]`` gives a list; ``a.b[0].c=x`` indexes a
list). Every problem of a file (and, for a pair, of both files plus the cross-file checks) is
collected and raised as one :class:`~graphstore.config.errors.ConfigError` (exit code 2).

No torch / PyG / GLT import here or anywhere in :mod:`graphstore.config`: the pipeline imports it.
"""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any, Mapping, Sequence, TypeVar

from pydantic import ValidationError

from graphstore.config._fields import Bad, FileModel, did_you_mean
from graphstore.config._problems import Collector, add_validation_errors
from graphstore.config._raw import NOT_LOADED, apply_override, parse_override, read_yaml, tokens_to_path
from graphstore.config.default_args import (
    DEFAULT_INFERENCER_MODULE, DEFAULT_TRAINER_MODULE, runs_module,
)
from graphstore.config.errors import ConfigError, Problem, clip, show
from graphstore.config.resource_schema import ResourceConfig
from graphstore.config.schema import TaskConfig

PathLike = str | os.PathLike[str]
M = TypeVar("M", bound=FileModel)
_NO_ORIGINS: Mapping[str, str] = MappingProxyType({})
TASK_KEYS = tuple(TaskConfig.yaml_keys())
RESOURCE_KEYS = tuple(ResourceConfig.yaml_keys())


def _load_raw(col: Collector, path: PathLike, overrides: Sequence[str],
              origins: Mapping[str, str]) -> Any:
    """Read the YAML and apply overrides; NOT_LOADED when the file itself is unusable.

    A problem at or below an overridden key names the override, or ``origins[text]`` (how the
    user gave it, e.g. a command-line flag) when the override came from there.
    """
    raw = read_yaml(col, path)
    if raw is NOT_LOADED:
        return NOT_LOADED
    for text in overrides:
        try:
            tokens, value = parse_override(text)
            raw = apply_override(raw, tokens, value)
        except Bad as exc:
            key = clip(text.partition("=")[0].strip())
            col.add(key, text, f"bad override {show(text)}: it {exc.why}")
            continue
        col.override_notes[tokens_to_path(tokens)] = (f"set by {origins[text]}" if text in origins
                                                      else f"set by override {show(text)}")
    return raw


def _load(model: type[M], col: Collector, path: PathLike, overrides: Sequence[str],
          origins: Mapping[str, str] = _NO_ORIGINS) -> M | None:
    """Read, override and validate one file as ``model``; ``None`` after recording its problems.

    Relative uris in it resolve against its folder (validation context ``base_dir``).
    """
    raw = _load_raw(col, path, overrides, origins)
    if raw is NOT_LOADED:
        return None
    source = os.path.abspath(os.fspath(path))
    try:
        config = model.model_validate(raw, by_alias=True, by_name=False,
                                      context={"base_dir": os.path.dirname(source)})
    except ValidationError as exc:
        add_validation_errors(col, exc, model, raw)
        return None
    config._source_path = source
    return config


def _raise_if_any(*collectors: Collector) -> None:
    problems = [p for c in collectors for p in c.problems]
    if problems:
        raise ConfigError(problems)


def load_task_config(path: PathLike, overrides: Sequence[str] = ()) -> TaskConfig:
    """Load, override, type and check a task config.

    Args:
        path: The task YAML file. Relative uris inside it resolve against its folder.
        overrides: ``key.path=value`` strings applied to the raw YAML before typing.

    Raises:
        ConfigError: listing every problem found (missing file, YAML syntax, keys, types, rules).
    """
    col = Collector(os.fspath(path))
    task = _load(TaskConfig, col, path, overrides)
    _raise_if_any(col)
    return task


def load_resource_config(path: PathLike, overrides: Sequence[str] = ()) -> ResourceConfig:
    """Load, override, type and check a resource config (see :func:`load_task_config`)."""
    col = Collector(os.fspath(path))
    res = _load(ResourceConfig, col, path, overrides)
    _raise_if_any(col)
    return res


def route_overrides(overrides: Sequence[str], col: Collector) -> tuple[list[str], list[str]]:
    """Split overrides by their first key: task top-level keys vs resource top-level keys.

    An override whose first key is neither is recorded in ``col`` as a problem.
    """
    task_ov: list[str] = []
    res_ov: list[str] = []
    for text in overrides:
        try:
            head = parse_override(text)[0][0]
        except Bad as exc:
            col.add(clip(text.partition("=")[0].strip()), text, f"bad override {show(text)}: it {exc.why}")
            continue
        if head in TASK_KEYS:
            task_ov.append(text)
        elif head in RESOURCE_KEYS:
            res_ov.append(text)
        else:
            hint = did_you_mean(head, TASK_KEYS + RESOURCE_KEYS)
            col.add(clip(str(head)), text, f"bad override {show(text)}: {show(head)} is not a top-level key of the "
                    f"task config ({', '.join(TASK_KEYS)}) or of the resource config "
                    f"({', '.join(RESOURCE_KEYS)}){hint}")
    return task_ov, res_ov


def with_resource_defaults(task: TaskConfig, res: ResourceConfig) -> TaskConfig:
    """``task`` with the defaults the resource config gives it: ``exportConfig.bigqueryDataset``
    from ``common_compute_config.embedding_bq_dataset_name`` when the task sets none (the task's
    own value wins). The result is what a run freezes, so later stages need no resource lookup."""
    export, default = task.export, res.shared.embedding_bq_dataset_name
    if export.warehouse != "bigquery" or export.bigquery_dataset is not None or default is None:
        return task
    return task.model_copy(update={"export": export.model_copy(update={"bigquery_dataset": default})})


def check_pair(task: TaskConfig, res: ResourceConfig, tcol: Collector, resource_file: str) -> None:
    """Cross-file checks; problems are recorded against the task file (``tcol``). ``task`` is
    the one :func:`with_resource_defaults` returned."""
    export = task.export
    if export.warehouse == "bigquery" and export.bigquery_dataset is None:
        tcol.add("exportConfig.bigqueryDataset", None,
                 "missing: warehouse 'bigquery' needs a dataset; set it here or in "
                 f"shared_resource_config.common_compute_config.embedding_bq_dataset_name "
                 f"({resource_file})", missing=True)
    if export.warehouse == "bigquery" and export.bigquery_project is None and res.shared.project is None:
        tcol.add("exportConfig.bigqueryProject", None,
                 "missing: warehouse 'bigquery' needs a project; set it here or in "
                 f"shared_resource_config.common_compute_config.project ({resource_file})",
                 missing=True)
    if task.hard_negative_edge_types and res.trainer.replicated:
        tcol.bad("taskMetadata.nodeAnchorBasedLinkPredictionTaskMetadata.hardNegativeEdgeTypes",
                 [str(et) for et in task.hard_negative_edge_types.values()],
                 f"is not supported in replicated mode yet ({resource_file} trains with mode: "
                 "replicated): remove it, or train in graph-store or colocated mode")
    for key, cfg, args, stage, module in (
            ("trainerConfig.trainerArgs", task.trainer, task.trainer.trainer_args, res.trainer,
             DEFAULT_TRAINER_MODULE),
            ("inferencerConfig.inferencerArgs", task.inferencer, task.inferencer.inferencer_args,
             res.inferencer, DEFAULT_INFERENCER_MODULE)):
        if args.get("sampling_workers") == 0 and not stage.replicated and not stage.colocated \
                and runs_module(cfg.command, module):
            tcol.bad(f"{key}.sampling_workers", 0,
                     f"needs >= 1 in graph-store mode ({resource_file}: sampling runs in workers "
                     "on each storage server); 0, sampling inline, is replicated mode's")
    num = task.dataset.partition.num_partitions
    if num is not None and num != res.num_partitions and not res.trainer.replicated:
        tcol.bad("datasetConfig.partitionConfig.numPartitions", num,
                 f"differs from the resource config's storage count {res.num_partitions} (one "
                 "partition per storage process); remove it or make them equal")


def load_config_pair(task_path: PathLike, resource_path: PathLike, overrides: Sequence[str] = (),
                     *, origins: Mapping[str, str] = _NO_ORIGINS) -> tuple[TaskConfig, ResourceConfig]:
    """Load a task and a resource config together, with overrides routed by their first key.

    Runs both files' checks and the cross-file checks (BigQuery dataset and project, partition
    count, no hard negatives in replicated mode), fills the task's defaults from the resource
    config (:func:`with_resource_defaults`), and raises ONE :class:`ConfigError` listing every
    problem of both files. ``origins`` maps an override to how the user gave it when that was
    not ``--set`` (e.g. ``{"datasetConfig.partitionConfig.numPartitions=3": "--num-partitions
    3"}``), so a problem names the flag.
    """
    ocol = Collector("<overrides>")
    task_ov, res_ov = route_overrides(overrides, ocol)
    tcol, rcol = Collector(os.fspath(task_path)), Collector(os.fspath(resource_path))
    task = _load(TaskConfig, tcol, task_path, task_ov, origins)
    res = _load(ResourceConfig, rcol, resource_path, res_ov, origins)
    if task is not None and res is not None:
        task = with_resource_defaults(task, res)
        check_pair(task, res, tcol, rcol.file)
    _raise_if_any(ocol, tcol, rcol)
    return task, res


__all__ = ["load_task_config", "load_resource_config", "load_config_pair", "ConfigError", "Problem"]
