"""Exception types shared by every stage, and the exit code each maps to.

Exit codes (the contract every entrypoint follows):
  0  success
  2  usage error: something the user must fix before rerunning (a config key, a CLI flag,
     a missing input file, a bad input row or column)
  1  runtime failure: the inputs were valid but the run failed (a dead server, an I/O error,
     a timeout)
Messages name the thing to fix (file, dotted config key, row, column) on one line.
"""

from __future__ import annotations


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
