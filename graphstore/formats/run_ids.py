"""Run ids: the one rule for what a run id may be, and the one place a fresh one is made.

A run id names the run's folder (``<run-root>/<run-id>``), is stored in every warehouse row and
labels cloud jobs. It is a :class:`RunId`, made only by :meth:`RunId.parse` (where an id enters:
``pipeline run`` / ``submit`` flags, the pipeline's freeze task and the stage tasks' parameter,
a run record, export's argument) or :meth:`RunId.new`; code that holds a ``RunId`` never checks
it again. The rule: 1-128 letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit
(so never a path: no ``/``, no ``..`` segment). Fresh ids are the UTC time plus a random suffix,
so two runs started in the same second get different ids; the run folder is still claimed
exclusively (pipeline.stages.claim_run_folder), so no run ever reuses another's folder by
accident.
"""

from __future__ import annotations

import datetime
import re
import secrets

from graphstore.runtime.errors import UsageError

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RunId(str):
    """A run id that follows the rule (module docs); a ``str`` everywhere it is used (paths,
    labels, query parameters, JSON)."""

    __slots__ = ()

    @classmethod
    def parse(cls, text: object, where: str = "run id") -> RunId:
        """``text`` as a RunId; UsageError naming ``where`` when it breaks the rule."""
        if isinstance(text, RunId):
            return text
        if not isinstance(text, str) or not _RUN_ID.match(text):
            shown = repr(text)[:80]
            raise UsageError(f"{where} {shown}: use 1-128 letters, digits, '.', '_' or '-', "
                             "starting with a letter or digit")
        return cls(text)

    @classmethod
    def new(cls, now: datetime.datetime | None = None) -> RunId:
        """A fresh run id: ``20261129T031500Z-3f9a`` (UTC time, then 4 random hex digits)."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        return cls(f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}")


__all__ = ["RunId"]
