"""Make every compiled task's Python process the container's main process, so signals reach it.

KFP compiles a lightweight component into a two-level shell command::

    sh -c '<make sure pip and kfp are there> && "$0" "$@"' sh -ec '<write the program>;
        python3 -m kfp.dsl.executor_main ... "$@"' <program> --executor_input ...

Neither shell ``exec``s its last command, so the task's Python runs as a grandchild of the
container's first process. When Vertex AI cancels a pipeline it stops the task's container with
SIGTERM to that first process; a shell there neither handles nor forwards it, so our Python never
learns of the cancel, and the CustomJob it launched (pipeline/custom_jobs.py cancels it on SIGTERM)
would run on until its own timeout. :func:`exec_task_commands` rewrites both last commands as
``exec``: the shell becomes the kfp executor, and the executor is the process the signal reaches.

The rewrite matches the exact text kfp (pinned in requirements) generates; when a kfp upgrade
changes it, :func:`exec_task_commands` raises instead of compiling a pipeline that would orphan
jobs silently (tests/unit/test_task_commands.py runs a compiled command and checks the pid).
"""

from __future__ import annotations

from typing import Any

# (what kfp writes, what we write instead); each must occur exactly once per task command
_REWRITES = (
    ('&& "$0" "$@"\n', '&& exec "$0" "$@"\n'),
    ("_KFP_RUNTIME=true python3 -m kfp.dsl.executor_main",
     "_KFP_RUNTIME=true exec python3 -m kfp.dsl.executor_main"),
)


class UnexpectedTaskCommand(RuntimeError):
    """A compiled task's command is not the shape this module knows how to rewrite."""


def exec_command(command: list[str], task: str = "?") -> list[str]:
    """``command`` (one executor's ``container.command``) with both shells' last command ``exec``'d.

    Idempotent: a command already rewritten is returned unchanged. Raises
    :class:`UnexpectedTaskCommand` naming ``task`` when kfp's text is not found exactly once.
    """
    script = "\n".join(command)
    out = list(command)
    for old, new in _REWRITES:
        if new in script:
            continue
        hits = [i for i, part in enumerate(out) if old in part]
        if len(hits) != 1 or out[hits[0]].count(old) != 1:
            raise UnexpectedTaskCommand(
                f"task {task}: kfp's command no longer contains {old.strip()!r} exactly once; "
                "pipeline/task_commands.py must be updated for this kfp version")
        out[hits[0]] = out[hits[0]].replace(old, new)
    return out


def exec_task_commands(spec: dict[str, Any]) -> dict[str, Any]:
    """Rewrite, in place, every executor of a compiled PipelineSpec (the YAML as a dict) with
    :func:`exec_command`; returns ``spec``. Executors without a ``command`` are refused."""
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    if not executors:
        raise UnexpectedTaskCommand("the compiled pipeline has no executors")
    for name, executor in executors.items():
        container = executor.get("container") or {}
        if "command" not in container:
            raise UnexpectedTaskCommand(f"task {name}: no container command")
        container["command"] = exec_command(container["command"], name)
    return spec
