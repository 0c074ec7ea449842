"""Sizing before spending: does each storage machine hold its partition? (``pipeline plan``, ``submit``)

:func:`partition_loads` counts what each storage machine will hold (graphstore.planning.sizing): exactly
from a shard set's manifest (``--shards``; only ``CURRENT`` and ``manifest.json`` are read), or
estimated from the raw tables' row counts before partitioning (graphstore.io.table_rows: Parquet
footers, BigQuery metadata). :func:`check` (pure) compares the estimate with the resource
config: for each stage (train, infer) the storage pool's machine type (memory from
graphstore.config.machine_types) and boot disk (a Vertex config without a storage pool is not sized),
for a local config this machine's memory; in replicated mode, the compute pool's boot disk
against the graph files every compute machine copies (graphstore.planning.sizing.graph_file_bytes); and the partition task's memory against the DuckDB budget
(``memoryLimitMb``). Its report lists the measured coefficients it used; a config that cannot fit
is a list of :class:`~graphstore.config.Problem` naming the key to change (``submit`` refuses it
with exit 2, before anything is sent).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from graphstore.config import machine_types
from graphstore.config import Problem, ResourceConfig, StageResources, TaskConfig
from graphstore.planning.sizing import (
    GIB, IMAGE_DISK_GB, MEASURED, MEMORY_MARGIN, MIB, SYSTEM_RESERVE_MIB, GraphCounts,
    PartitionLoad, TableCounts, disk_needed_bytes, graph_file_bytes, loads_from_manifest,
    loads_from_tables, memory_needed_bytes,
)

STAGE_KEYS = {"train": ("trainer_resource_config", "vertex_ai_graph_store_trainer_config"),
              "infer": ("inferencer_resource_config", "vertex_ai_graph_store_inferencer_config")}


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What :func:`check` found: the report's lines (in print order) and the problems."""

    lines: tuple[str, ...]
    problems: tuple[Problem, ...]

    @property
    def fits(self) -> bool:
        return not self.problems


class SizesUnknown(Exception):
    """The sizes cannot be read here (a templated uri, no access); the message says which."""


def partition_loads(task: TaskConfig, num_partitions: int,
                    shards_uri: str | None = None) -> tuple[list[PartitionLoad], str]:
    """``(one PartitionLoad per partition, where the counts came from)``. Raises
    SizesUnknown when a raw table's uri holds a ``{...}`` template (resolved per run)."""
    if shards_uri:
        from graphstore.formats.shards.reader import ShardSet

        with ShardSet.open(shards_uri) as shards:
            size = os.path.getsize(os.path.join(shards.root, "manifest.json"))
            return (loads_from_manifest(shards.manifest, size),
                    f"the manifest of {shards.source_uri} (exact counts)")
    from graphstore.io.table_rows import count_rows

    sources = [*task.dataset.node_sources, *task.dataset.edge_sources]
    templated = [s.uri for s in sources if "{" in s.uri]
    if templated:
        raise SizesUnknown(f"{templated[0]} is resolved per run ({{...}}); give --shards, or plan "
                           "with a resolved --set datasetConfig.dataRootUri=...")
    counts = TableCounts(
        nodes={s.node_type: count_rows(s.uri, s.format) for s in task.dataset.node_sources},
        edges={str(s.edge_type): count_rows(s.uri, s.format) for s in task.dataset.edge_sources})
    total = sum(counts.edges.values())
    return (loads_from_tables(task, num_partitions, counts),
            f"the raw tables' row counts ({total:,} edges; estimated: an even split over "
            f"{num_partitions} partitions)")


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


def _gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def model_lines() -> list[str]:
    """The memory model and its allowances, as the report states them."""
    m = MEASURED
    return [f"memory model: peak = {m.base_mib:,.0f} MiB + {m.bytes_per_edge:.1f} B/edge + "
            f"{m.bytes_per_label:.1f} B/label + {m.bytes_per_owned_node:.1f} B/owned node + "
            f"{m.bytes_per_feature_value:.1f} "
            f"B/feature value + {m.per_compute_process_mib:,.0f} MiB per compute process "
            "beyond the first",
            f"  measured: {m.measured}",
            f"  a machine needs peak x {MEMORY_MARGIN} + {SYSTEM_RESERVE_MIB} MiB (system); a boot "
            f"disk needs {IMAGE_DISK_GB} GB (OS and image, an allowance) + the partition's shard "
            "files"]


def _table(loads: list[PartitionLoad], compute: int) -> list[str]:
    rows = [f"{'partition':>9} {'edges':>15} {'labels':>14} {'nodes':>13} {'feature vals':>15} "
            f"{'est. peak':>11} {'needs mem':>11} {'shard files':>11} {'needs disk':>11}"]
    if len(loads) > 8 and len({(x.edges, x.labels, x.nodes_owned) for x in loads}) == 1:
        loads = loads[:1]  # an even split: one row stands for all
        rows[0] = rows[0].replace("partition", "each part")
    for load in loads:
        rows.append(f"{load.partition:>9} {load.edges:>15,} {load.labels:>14,} {load.nodes_owned:>13,} "
                    f"{load.feature_values:>15,} {_gib(MEASURED.peak_bytes(load, compute)):>11} "
                    f"{_gib(memory_needed_bytes(load, compute)):>11} {_gb(load.shard_bytes):>11} "
                    f"{_gb(disk_needed_bytes(load)):>11}")
    return rows


def _pool_problems(res_file: str, where: str, pool, loads: list[PartitionLoad], compute: int,
                   what: str) -> tuple[str, list[Problem]]:
    """The verdict line and the problems of one Vertex pool holding ``loads``."""
    kind = machine_types.lookup(pool.machine_type)
    need_mem = max(memory_needed_bytes(load, compute) for load in loads)
    need_disk = max(disk_needed_bytes(load) for load in loads)
    worst = max(loads, key=lambda load: memory_needed_bytes(load, compute)).partition
    have_mem, have_disk = kind.memory_mib * MIB, pool.boot_disk_size_gb * 10**9
    problems = []
    if need_mem > have_mem:
        better = machine_types.smallest_holding(-(-need_mem // MIB))
        hint = (f"use {better.name} ({better.memory_gib:,.0f} GiB)" if better else
                "no machine type we know holds it")
        problems.append(Problem(file=res_file, path=f"{where}.machine_type",
                                value=repr(pool.machine_type), message=(
            f"{pool.machine_type} has {_gib(have_mem)} of memory but {what} {worst} needs "
            f"{_gib(need_mem)} (`pipeline plan`); {hint}, or more num_replicas (re-partition)")))
    if need_disk > have_disk:
        problems.append(Problem(file=res_file, path=f"{where}.boot_disk_size_gb",
                                value=str(pool.boot_disk_size_gb), message=(
            f"{pool.boot_disk_size_gb} GB cannot hold the image and a partition's shard files: "
            f"{_gb(need_disk)} needed (`pipeline plan`); set boot_disk_size_gb to at least "
            f"{-(-need_disk // 10**9)}")))
    verdict = "fits" if not problems else "DOES NOT FIT"
    line = (f"{pool.machine_type} ({kind.memory_gib:,.0f} GiB, {pool.boot_disk_type} "
            f"{pool.boot_disk_size_gb} GB) x{pool.num_replicas}: {verdict} (needs up to "
            f"{_gib(need_mem)} memory, {_gb(need_disk)} disk)")
    return line, problems


def cheapest_line(loads: list[PartitionLoad], compute: int) -> str:
    """The cheapest machine type we know a price of whose memory holds every partition."""
    need = max(memory_needed_bytes(load, compute) for load in loads)
    kind = machine_types.cheapest_holding(-(-need // MIB))
    if kind is None:
        return (f"cheapest storage machine that holds a partition ({_gib(need)}): none we know a "
                "price of (add machines: more partitions)")
    price = machine_types.hourly_price_usd(kind)
    return (f"cheapest storage machine that holds a partition ({_gib(need)}): {kind.name} "
            f"({kind.memory_gib:,.0f} GiB, {kind.vcpus} vCPUs), ${price:,.2f}/h each, "
            f"${price * len(loads):,.2f}/h for {len(loads)} (Compute Engine list price; "
            "graphstore.config.machine_types.PRICE_SOURCE)")


def _count_problems(res: ResourceConfig, loads: list[PartitionLoad], res_file: str, what: str,
                    fix: str) -> list[Problem]:
    """The problem of a partition count the resource config's storage pool does not serve."""
    if len(loads) == res.num_partitions or res.trainer.replicated:
        return []
    count_key = ".".join((STAGE_KEYS["train"][0], *res.trainer.count_loc))
    return [Problem(file=res_file, path=count_key, value=str(res.num_partitions), message=(
        f"{what} {len(loads)} partitions but the resource config serves {res.num_partitions}; "
        f"{fix} {len(loads)}"))]


def check_counts(counts: GraphCounts, res: ResourceConfig, loads: list[PartitionLoad], *,
                 res_file: str) -> Plan:
    """The plan of a graph given by counts alone on ``res``'s storage (``pipeline plan --nodes``):
    the model, one row per partition (one for an even split), each stage's storage pool, and the
    cheapest machine type that holds a partition."""
    lines = [f"plan: sizes from counts: {counts.nodes:,} nodes, {counts.edges:,} stored edges, "
             f"{counts.feature_dim} features per node, {counts.labels:,} labels; an even split "
             f"over {len(loads)} partitions (estimated)", *model_lines()]
    compute = res.trainer.num_compute_machines * res.trainer.procs_per_compute
    lines += _table(loads, compute)
    problems = _count_problems(res, loads, res_file, "the plan splits the graph over",
                               "to run it, set the storage count to")
    for stage, stage_res in (("train", res.trainer), ("infer", res.inferencer)):
        if stage_res.replicated:
            lines.append(f"{stage}: replicated mode: no storage machines")
            continue
        stage_lines, stage_problems = _stage(stage, stage_res, loads, res_file, None)
        lines += stage_lines
        problems += stage_problems
    lines.append(cheapest_line(loads, compute))
    lines.append("plan: fits" if not problems else
                 f"plan: {len(problems)} problem{'s' if len(problems) > 1 else ''}")
    return Plan(lines=tuple(lines), problems=tuple(problems))


def _size(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else _gb(n)


def replicated_graph_bytes(task: TaskConfig, loads: list[PartitionLoad]) -> int:
    """The upper bound of graphstore.planning.sizing.graph_file_bytes for ``task``'s graph."""
    ds, graph = task.dataset, task.graph_metadata
    types = sum(2 if ds.partition.add_reverse_edges and et.src_node_type != et.dst_node_type
                else 1 for et in graph.edge_types)
    train_view = task.trainer.storage.storage_args.splitter_cls_path is not None
    return graph_file_bytes(loads, edge_types=types,
                            supervision_types=len(task.supervision_edge_types),
                            train_view=train_view)


def _replicated_stage(stage: str, stage_res: StageResources, graph_bytes: int,
                      res_file: str) -> tuple[list[str], list[Problem]]:
    """Replicated mode: every compute machine holds the graph files on its disk (copied from a
    gs:// run folder onto the boot disk); they are memory-mapped, so memory is page cache."""
    if stage_res.vertex is None:
        return [f"{stage}: local, replicated: the graph files take up to {_size(graph_bytes)} in the "
                "run folder (memory-mapped: page cache, not process memory)"], []
    section, vertex_key = STAGE_KEYS[stage]
    pool = stage_res.vertex.compute_pool
    need = IMAGE_DISK_GB * 10**9 + graph_bytes
    ok = need <= pool.boot_disk_size_gb * 10**9
    line = (f"{stage}: replicated, compute pool {pool.machine_type} ({pool.boot_disk_type} "
            f"{pool.boot_disk_size_gb} GB) x{pool.num_replicas}: {'fits' if ok else 'DOES NOT FIT'} "
            f"(each machine copies the graph files, up to {_size(graph_bytes)}, onto its boot disk: "
            f"needs {_gb(need)} with the image)")
    problems = [] if ok else [Problem(
        file=res_file, path=f"{section}.{vertex_key}.compute_pool.boot_disk_size_gb",
        value=str(pool.boot_disk_size_gb), message=(
            f"{pool.boot_disk_size_gb} GB cannot hold the image and the graph files of replicated "
            f"mode: {_gb(need)} needed (`pipeline plan`); set boot_disk_size_gb to at least "
            f"{-(-need // 10**9)}, or use mode graph_store (the graph does not fit a worker's "
            "disk)"))]
    return [line], problems


def _stage(stage: str, stage_res: StageResources, loads: list[PartitionLoad], res_file: str,
           machine_memory_bytes: int | None) -> tuple[list[str], list[Problem]]:
    compute = stage_res.num_compute_machines * stage_res.procs_per_compute
    section, vertex_key = STAGE_KEYS[stage]
    if stage_res.vertex is None:
        need = sum(memory_needed_bytes(load, compute) for load in loads)
        if machine_memory_bytes is None:
            return [f"{stage}: local, {len(loads)} partitions on this machine: needs "
                    f"{_gib(need)}"], []
        ok = need <= machine_memory_bytes
        line = (f"{stage}: local, {len(loads)} partitions on this machine: needs {_gib(need)} of "
                f"its {_gib(machine_memory_bytes)}: {'fits' if ok else 'DOES NOT FIT'}")
        problems = [] if ok else [Problem(
            file=res_file, path=f"{section}.local_graph_store_config", value=None, message=(
                f"the {len(loads)} partitions need {_gib(need)} together (`pipeline plan`) but "
                f"this machine has {_gib(machine_memory_bytes)}"))]
        return [line], problems
    if stage_res.vertex.graph_store_pool is None:  # no storage machines: nothing served to size
        return [f"{stage}: no storage pool: the compute machines hold the graph themselves (not "
                "sized by this plan)"], []
    where = f"{section}.{vertex_key}.graph_store_pool"
    line, problems = _pool_problems(res_file, where, stage_res.vertex.graph_store_pool, loads,
                                    compute, "partition")
    return [f"{stage}: storage pool {line}, serving {compute} compute processes"], problems


def check(task: TaskConfig, res: ResourceConfig, loads: list[PartitionLoad], source: str, *,
          task_file: str, res_file: str, machine_memory_bytes: int | None = None) -> Plan:
    """The plan of ``loads`` on ``res`` (module docs); ``machine_memory_bytes`` is this machine's
    memory, for a local resource config (None: not checked)."""
    lines = [f"plan: sizes from {source}", *model_lines()]
    problems = _count_problems(res, loads, res_file, "the shard set has",
                               "re-partition, or set the storage count to")
    compute = res.trainer.num_compute_machines * res.trainer.procs_per_compute
    lines += _table(loads, compute)
    graph_bytes = replicated_graph_bytes(task, loads) if res.trainer.replicated else 0
    for stage, stage_res in (("train", res.trainer), ("infer", res.inferencer)):
        if stage_res.replicated:
            stage_lines, stage_problems = _replicated_stage(stage, stage_res, graph_bytes, res_file)
        else:
            stage_lines, stage_problems = _stage(stage, stage_res, loads, res_file,
                                                 machine_memory_bytes)
        lines += stage_lines
        problems += stage_problems
    if res.trainer.vertex is not None:
        limit_mb = task.dataset.partition.memory_limit_mb
        have = res.partition_task.memory_gb * 10**9
        ok = limit_mb * MIB < have
        lines.append(f"partition task: {res.partition_task.memory_gb} GB memory, DuckDB budget "
                     f"memoryLimitMb {limit_mb:,}: {'fits' if ok else 'DOES NOT FIT'}")
        if not ok:
            problems.append(Problem(file=res_file, path="partition_resource_config.memory_gb",
                                    value=str(res.partition_task.memory_gb), message=(
                f"{res.partition_task.memory_gb} GB cannot hold the partitioner's "
                f"datasetConfig.partitionConfig.memoryLimitMb = {limit_mb} MB of {task_file}; "
                "raise memory_gb or lower memoryLimitMb")))
    if not res.trainer.replicated:
        lines.append(cheapest_line(loads, compute))
    lines.append("plan: fits" if not problems else
                 f"plan: {len(problems)} problem{'s' if len(problems) > 1 else ''}")
    return Plan(lines=tuple(lines), problems=tuple(problems))


def this_machine_memory_bytes() -> int:
    """Physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

