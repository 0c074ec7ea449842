"""Both sides of the runtime contract: the pool layout the launcher / Vertex builder writes
(pipeline.topology) and the topology every process reads back (graphstore.runtime.env)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from graphstore.config import load_config_pair
from graphstore.runtime.env import ClusterTopology, is_loopback, split_address
from graphstore.runtime.errors import UsageError
from pipeline import topology
from pipeline.launch import local_env, plan_stage

REPO = Path(__file__).resolve().parents[2]


def hosts_for(layout: topology.Layout, fmt: str = "10.0.0.{rank}:2222") -> dict[str, list[str]]:
    hosts: dict[str, list[str]] = {pool.name: [] for pool in layout}
    for m in topology.machines(layout):
        hosts[m.pool].append(fmt.format(rank=m.rank))
    return hosts


# --- pipeline.topology --------------------------------------------------------------------------

@pytest.mark.parametrize("c,s", [(1, s) for s in range(1, 5)] + [(3, s) for s in range(1, 5)])
def test_pool_layout_orders_compute_then_storage(c: int, s: int) -> None:
    layout = topology.pool_layout(c, s)
    assert [(p.name, p.role, p.replicas, p.first_rank) for p in layout] == [
        ("workerpool0", "compute", 1, 0), ("workerpool1", "compute", c - 1, 1),
        ("workerpool2", "storage", s, c)]
    assert topology.world_size(layout) == c + s
    ranks = [topology.rank_of(layout, "workerpool0", 0)]
    ranks += [topology.rank_of(layout, "workerpool1", i) for i in range(c - 1)]
    ranks += [topology.rank_of(layout, "workerpool2", j) for j in range(s)]
    assert ranks == list(range(c + s))
    machines = topology.machines(layout)
    assert [(m.rank, m.role, m.role_index) for m in machines] == (
        [(i, "compute", i) for i in range(c)] + [(c + j, "storage", j) for j in range(s)])


def test_pool_layout_and_rank_of_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="num_compute_machines must be >= 1, got 0"):
        topology.pool_layout(0, 2)
    with pytest.raises(ValueError, match="num_storage_machines must be >= 0"):
        topology.pool_layout(1, -1)
    layout = topology.pool_layout(1, 2)
    with pytest.raises(ValueError, match="workerpool1 has 0 replicas; index 0 is out of range"):
        topology.rank_of(layout, "workerpool1", 0)
    with pytest.raises(ValueError, match="workerpool2 has 2 replicas; index 2"):
        topology.rank_of(layout, "workerpool2", 2)
    with pytest.raises(ValueError, match="unknown pool 'workerpool3'"):
        topology.rank_of(layout, "workerpool3", 0)


def test_cluster_spec_omits_empty_pools_and_names_the_task() -> None:
    layout = topology.pool_layout(1, 2)
    spec = topology.cluster_spec(layout, hosts_for(layout), "workerpool2", 1, "job-a")
    assert spec == {"cluster": {"workerpool0": ["10.0.0.0:2222"],
                                "workerpool2": ["10.0.0.1:2222", "10.0.0.2:2222"]},
                    "environment": "cloud",
                    "task": {"type": "workerpool2", "index": 1, "trial": ""}, "job": "job-a"}
    layout3 = topology.pool_layout(3, 1)
    spec3 = topology.cluster_spec(layout3, hosts_for(layout3), "workerpool1", 0, "j")
    assert list(spec3["cluster"]) == ["workerpool0", "workerpool1", "workerpool2"]
    assert spec3["cluster"]["workerpool1"] == ["10.0.0.1:2222", "10.0.0.2:2222"]


def test_cluster_spec_rejects_wrong_host_counts_and_tasks() -> None:
    layout = topology.pool_layout(2, 2)
    hosts = hosts_for(layout)
    with pytest.raises(ValueError, match="workerpool2 has 2 replicas but 1 addresses"):
        topology.cluster_spec(layout, {**hosts, "workerpool2": hosts["workerpool2"][:1]},
                              "workerpool0", 0, "j")
    with pytest.raises(ValueError, match="workerpool1 has 1 replicas; index 1"):
        topology.cluster_spec(layout, hosts, "workerpool1", 1, "j")


@pytest.mark.parametrize("c,s", [(1, 1), (1, 4), (3, 1), (3, 2), (3, 4), (2, 0)])
def test_every_replica_reads_back_its_own_place(c: int, s: int) -> None:
    """The writer side (cluster_environ) and the reader side (from_env) agree for every replica."""
    layout = topology.pool_layout(c, s)
    hosts = hosts_for(layout)
    for m in topology.machines(layout):
        env = topology.cluster_environ(layout, hosts, m.pool, m.pool_index, "job-x", 29500)
        topo = ClusterTopology.from_env(env)
        assert (topo.rank, topo.role, topo.machine_index) == (m.rank, m.role, m.role_index)
        assert topo.world_size == c + s == int(env["WORLD_SIZE"])
        assert topo.compute_hosts == tuple(f"10.0.0.{r}" for r in range(c))
        assert topo.storage_hosts == tuple(f"10.0.0.{c + j}" for j in range(s))
        assert (topo.master_addr, topo.master_port, topo.job_name) == ("10.0.0.0", 29500, "job-x")
        assert not topo.is_local
        assert [topo.storage_rank(j) for j in range(s)] == list(range(c, c + s))


def test_loopback_cluster_is_local() -> None:
    layout = topology.pool_layout(1, 2)
    env = topology.cluster_environ(layout, hosts_for(layout, "127.0.0.1:{rank}000"), "workerpool2",
                                   0, "j", 40000)
    topo = ClusterTopology.from_env(env)
    assert topo.is_local and topo.master_addr == "127.0.0.1" and topo.rank == 1


def test_contract_args_and_split_command() -> None:
    assert topology.contract_args(task_config_path="/t.yaml", resource_config_path="/r.yaml",
                                  stage="infer", run_dir="/run") == [
        "--task-config", "/t.yaml", "--resource-config", "/r.yaml", "--stage", "infer",
        "--run-dir", "/run"]
    assert topology.split_command("python -m x --name 'a b'", "k") == [
        "python", "-m", "x", "--name", "a b"]
    with pytest.raises(UsageError, match="trainerConfig.command: cannot split"):
        topology.split_command("python 'unclosed", "trainerConfig.command")
    with pytest.raises(UsageError, match="k: the command is empty"):
        topology.split_command("  ", "k")


def test_plan_stage_starts_storage_first_with_the_contract(tmp_path: Path) -> None:
    task, res = load_config_pair(REPO / "configs" / "task_homo.yaml",
                                 REPO / "configs" / "resource_local.yaml",
                                 ("trainer_resource_config.local_graph_store_config."
                                  "num_compute_machines=2",))
    specs = plan_stage(task, res, stage="train", run_dir=tmp_path, contract=["--stage", "train"],
                       ports=[1001, 1002, 1003, 1004, 1005], job_name="j",
                       extra_env=local_env({}, "lo"))
    assert [(s.label, s.rank) for s in specs] == [
        ("storage 0", 2), ("storage 1", 3), ("compute 0/2", 0), ("compute 1/2", 1)]
    assert specs[0].argv == (sys.executable, "-m", "components.storage", "--stage", "train")
    assert specs[2].argv == (sys.executable, "-m", "components.train", "--stage", "train")
    assert specs[2].config_key == "trainerConfig.command"
    assert specs[0].config_key == "trainerConfig.graphStoreStorageConfig.command"
    assert specs[1].log_path == tmp_path / "logs" / "train" / "storage_1.log"
    assert specs[3].env["MASTER_PORT"] == "1005" and specs[3].env["RANK"] == "1"
    assert json.loads(specs[3].env["CLUSTER_SPEC"])["cluster"]["workerpool2"] == [
        "127.0.0.1:1003", "127.0.0.1:1004"]
    assert specs[0].env["GLOO_SOCKET_IFNAME"] == "lo" and specs[0].env["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in local_env({"OMP_NUM_THREADS": "4"}, "lo")


def test_plan_stage_refuses_vertex_resources(tmp_path: Path) -> None:
    task, res = load_config_pair(REPO / "configs" / "task_homo.yaml",
                                 REPO / "configs" / "resource_vertex.yaml")
    with pytest.raises(UsageError, match="use `python -m pipeline submit` for Vertex AI"):
        plan_stage(task, res, stage="infer", run_dir=tmp_path, contract=[], ports=[1] * 6,
                   job_name="j", extra_env={})


# --- graphstore.runtime.env ------------------------------------------------------------------------------

def good_env(c: int = 2, s: int = 2, pool: str = "workerpool2", index: int = 1) -> dict[str, str]:
    layout = topology.pool_layout(c, s)
    return topology.cluster_environ(layout, hosts_for(layout, "127.0.0.1:{rank}0000"), pool, index,
                                    "job", 29500)


def spec_edit(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, str]], None]:
    def apply(env: dict[str, str]) -> None:
        spec = json.loads(env["CLUSTER_SPEC"])
        edit(spec)
        env["CLUSTER_SPEC"] = json.dumps(spec)
    return apply


def set_var(name: str, value: str) -> Callable[[dict[str, str]], None]:
    return lambda env: env.__setitem__(name, value)


ENV_ERRORS: list[tuple[str, Callable[[dict[str, str]], None], str]] = [
    *[(f"missing {v}", lambda env, v=v: env.pop(v), f"{v} not set")
      for v in ("CLUSTER_SPEC", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")],
    ("empty RANK", set_var("RANK", " "), "RANK not set"),
    ("RANK text", set_var("RANK", "three"), "RANK='three' is not an integer"),
    ("RANK negative", set_var("RANK", "-1"), "RANK=-1 must be >= 0"),
    ("WORLD_SIZE zero", set_var("WORLD_SIZE", "0"), "WORLD_SIZE=0 must be >= 1"),
    ("MASTER_PORT range", set_var("MASTER_PORT", "70000"), "MASTER_PORT=70000 must be in 1..65535"),
    ("MASTER_PORT text", set_var("MASTER_PORT", "http"), "MASTER_PORT='http' is not an integer"),
    ("spec not JSON", set_var("CLUSTER_SPEC", "{cluster:"), "CLUSTER_SPEC is not valid JSON"),
    ("spec a list", set_var("CLUSTER_SPEC", "[]"), "CLUSTER_SPEC must be a JSON object; got '[]'"),
    ("no cluster", spec_edit(lambda s: s.pop("cluster")), 'CLUSTER_SPEC has no "cluster" object'),
    ("no workerpool0", spec_edit(lambda s: s["cluster"].pop("workerpool0")),
     'CLUSTER_SPEC has no "cluster.workerpool0" (the compute leader)'),
    ("two leaders", spec_edit(lambda s: s["cluster"]["workerpool0"].append("h:1")),
     "CLUSTER_SPEC cluster.workerpool0 must hold exactly 1 replica"),
    ("unknown pool", spec_edit(lambda s: s["cluster"].__setitem__("workerpool3", ["h:1"])),
     "CLUSTER_SPEC names pools ['workerpool3'] that graph-store jobs do not use"),
    ("pool not strings", spec_edit(lambda s: s["cluster"].__setitem__("workerpool2", [1, 2])),
     'CLUSTER_SPEC cluster.workerpool2 must be a list of "host:port" strings, got [1, 2]'),
    ("no task", spec_edit(lambda s: s.pop("task")), 'CLUSTER_SPEC has no "task" object'),
    ("task pool absent", spec_edit(lambda s: s["task"].__setitem__("type", "chief")),
     "CLUSTER_SPEC task.type 'chief' is not a pool of this cluster"),
    ("task index range", spec_edit(lambda s: s["task"].__setitem__("index", 2)),
     "CLUSTER_SPEC task.index 2 is not in 0..1 (pool workerpool2 has 2 replicas)"),
    ("task index text", spec_edit(lambda s: s["task"].__setitem__("index", "1")),
     "CLUSTER_SPEC task.index '1' is not in 0..1"),
    ("rank mismatch", set_var("RANK", "1"),
     "RANK=1 but the CLUSTER_SPEC task is workerpool2[1], which is rank 3"),
    ("world mismatch", set_var("WORLD_SIZE", "5"),
     "WORLD_SIZE=5 but CLUSTER_SPEC lists 4 replicas (2 compute + 2 storage)"),
]


@pytest.mark.parametrize("case,mutate,message", ENV_ERRORS, ids=[c[0] for c in ENV_ERRORS])
def test_from_env_names_the_bad_variable(case: str, mutate: Callable[[dict[str, str]], None],
                                         message: str) -> None:
    env = good_env()
    ClusterTopology.from_env(env)  # valid before the mutation
    mutate(env)
    with pytest.raises(UsageError) as info:
        ClusterTopology.from_env(env)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def test_from_env_reports_every_missing_variable_at_once() -> None:
    with pytest.raises(UsageError, match="CLUSTER_SPEC, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
                                         "not set; these are set by Vertex AI"):
        ClusterTopology.from_env({})


def test_from_env_accepts_vertex_shapes() -> None:
    """Vertex AI gives host names, a CustomJobSpec dict as "job", and its own MASTER_ADDR form."""
    spec = {"cluster": {"workerpool0": ["wp0-0:2222"], "workerpool2": ["wp2-0:2222", "wp2-1:2222"]},
            "environment": "cloud", "task": {"type": "workerpool0", "index": 0, "trial": ""},
            "job": {"displayName": "train-job", "workerPoolSpecs": []}}
    topo = ClusterTopology.from_env({"CLUSTER_SPEC": json.dumps(spec), "RANK": "0",
                                     "WORLD_SIZE": "3", "MASTER_ADDR": "cmle-training-wp0-0",
                                     "MASTER_PORT": "2222"})
    assert (topo.role, topo.rank, topo.job_name) == ("compute", 0, "train-job")
    assert topo.storage_hosts == ("wp2-0", "wp2-1") and not topo.is_local


def test_vertex_job_name_is_the_display_name_never_the_job_spec_json() -> None:
    """Vertex AI's "job" is the CustomJobSpec as a JSON string (no display name in it): the name
    is GRAPHSTORE_JOB_NAME, which pipeline.vertex sets on every pool; never the JSON text."""
    job_spec = json.dumps({"worker_pool_specs": [{"machine_spec": {"machine_type": "n1"}}]})
    spec = {"cluster": {"workerpool0": ["wp0-0:2222"]}, "environment": "cloud",
            "task": {"type": "workerpool0", "index": 0, "trial": ""}, "job": job_spec}
    env = {"CLUSTER_SPEC": json.dumps(spec), "RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "cmle-training-wp0-0", "MASTER_PORT": "2222"}
    assert ClusterTopology.from_env(env).job_name == ""
    named = ClusterTopology.from_env({**env, "GRAPHSTORE_JOB_NAME": "20261129T031500Z-3f9a-train"})
    assert named.job_name == "20261129T031500Z-3f9a-train"
    assert "job=20261129T031500Z-3f9a-train" in named.describe()


def test_topology_guards_its_invariants() -> None:
    base = dict(rank=2, world_size=3, master_addr="h", master_port=1, role="storage",
                machine_index=0, compute_hosts=("a", "b"), storage_hosts=("c",), job_name="j")
    ClusterTopology(**base)  # type: ignore[arg-type]
    for bad in ({"rank": 1}, {"world_size": 4}, {"machine_index": 1}, {"compute_hosts": ()}):
        with pytest.raises(ValueError, match="ClusterTopology"):
            ClusterTopology(**{**base, **bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("address,expected", [
    ("10.0.0.1:2222", ("10.0.0.1", 2222)), ("host", ("host", None)),
    ("[::1]:80", ("::1", 80)), ("::1", ("::1", None))])
def test_split_address(address: str, expected: tuple[str, int | None]) -> None:
    assert split_address(address) == expected


def test_is_loopback() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "localhost"]))
    assert not any(map(is_loopback, ["10.0.0.1", "wp0-0", "0.0.0.0"]))


def test_emulator_hosts_are_read_from_the_given_environment_only():
    from graphstore.runtime.env import emulator_hosts

    assert emulator_hosts({}) == {}
    assert emulator_hosts({"STORAGE_EMULATOR_HOST": " ", "BIGQUERY_EMULATOR_HOST": ""}) == {}
    assert emulator_hosts({"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9023",
                           "BIGQUERY_EMULATOR_HOST": "localhost:9050"}) == {
        "storage": "http://127.0.0.1:9023", "bigquery": "http://localhost:9050"}
