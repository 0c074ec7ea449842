"""Run ids: the one rule for what a run id may be, and how a fresh one is made.

A run id names the run's folder (``<run-root>/<run-id>``), is stored in every warehouse row and
labels cloud jobs, so it is checked where it enters (``pipeline run`` / ``submit`` flags, the
pipeline's freeze task, export) with :func:`check_run_id`: 1-128 letters, digits, ``.``, ``_``,
``-``, starting with a letter or digit (so never a path: no ``/``, no ``..`` segment).
Fresh ids are the UTC time plus a random suffix (:func:`new_run_id`), so two runs started in
the same second get different ids; the run folder is still claimed exclusively
(pipeline.stages.claim_run_folder), so no run ever reuses another's folder by accident.
"""

from __future__ import annotations

import datetime
import re
import secrets

from graphstore.runtime.errors import UsageError

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: object, where: str = "run id") -> str:
    """``run_id`` when it follows the rule above; UsageError naming ``where`` otherwise."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        shown = repr(run_id)[:80]
        raise UsageError(f"{where} {shown}: use 1-128 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return run_id


def new_run_id(now: datetime.datetime | None = None) -> str:
    """A fresh run id: ``20261129T031500Z-3f9a`` (UTC time, then 4 random hex digits)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"
