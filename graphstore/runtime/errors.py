"""Exception types shared by every stage, and the exit code each maps to.

Exit codes (the contract every entrypoint follows):
  0  success
  2  usage error: something the user must fix before rerunning (a config key, a CLI flag,
     a missing input file, a bad input row or column)
  1  runtime failure: the inputs were valid but the run failed (a dead server, an I/O error,
     a timeout)
Messages name the thing to fix (file, dotted config key, row, column) on one line, and quote a
user's value only through :func:`show`, so that a huge value cannot make a huge message.
"""

from __future__ import annotations

import reprlib
from typing import Any


class GraphstoreError(Exception):
    """Base of every error we raise on purpose. Subclasses set ``exit_code``."""

    exit_code: int = 1


class UsageError(GraphstoreError):
    """The user must change an input (flag, config, data file) to proceed. Exit code 2."""

    exit_code = 2


class InputDataError(UsageError):
    """A raw input table is missing, malformed or inconsistent with the config."""


class RuntimeFailure(GraphstoreError):
    """Valid inputs, failed run (dead process, timeout, I/O failure). Exit code 1."""

    exit_code = 1


VALUE_CHARS = 80
"""The most characters of a user's value (its repr) that an error message quotes."""

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = VALUE_CHARS
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 8


def clip(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start, ``...`` and its length,
    in at most ``limit`` characters (invariant: ``len(clip(t, n)) <= max(n, 20)``)."""
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text)} chars)"
    return text[:max(limit - len(suffix), 0)] + suffix


def show(value: Any) -> str:
    """How every error message quotes a user's value: its repr, in at most :data:`VALUE_CHARS`
    characters (a cut string says how long it was).

    Bounded work whatever the value (``reprlib`` stops at a few levels and items), so a huge
    string or a deeply expanded list costs no more than a short one.
    """
    if isinstance(value, str) and len(value) > VALUE_CHARS:
        suffix = f"... ({len(value)} chars)"
        return repr(value[:VALUE_CHARS])[:VALUE_CHARS - len(suffix)] + suffix
    return clip(_REPR.repr(value))
