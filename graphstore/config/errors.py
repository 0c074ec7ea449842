"""Config problems and the one exception that carries all of them.

Loading a config never stops at the first mistake: every problem found in a file (or in a task /
resource pair) is collected as a :class:`Problem` and raised together as one :class:`ConfigError`,
whose text lists one problem per line in the form ``file[:line]: dotted.path: message``.

Error lines stay short whatever the user wrote: every message that quotes a user's value quotes it
through :func:`graphstore.runtime.errors.show` (at most :data:`VALUE_CHARS` characters), each rendered
line is cut at :data:`LINE_CHARS`, and at most :data:`MAX_PROBLEMS_SHOWN` problems are listed
(the count of the rest follows). ``ConfigError.problems`` still holds every problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from graphstore.runtime.errors import VALUE_CHARS, UsageError, clip, show

__all__ = ["VALUE_CHARS", "LINE_CHARS", "MAX_PROBLEMS_SHOWN", "Problem", "ConfigError", "clip", "show"]

LINE_CHARS = 400
"""The most characters of one rendered problem line (a backstop: values are already cut)."""

MAX_PROBLEMS_SHOWN = 50
"""The most problems one ConfigError lists; the rest are counted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One thing the user must fix in a config file.

    Attributes:
        file: The config file as the user named it (or ``<overrides>`` for a ``--set`` that fits no file).
        path: Dotted key path inside the file, e.g. ``graphMetadata.edgeTypes[1].dstNodeType``;
            empty when the problem concerns the whole file.
        value: ``repr`` of the offending value, or ``None`` when the key is missing.
        message: What is wrong and, where possible, how to fix it. Usually starts with ``value``.
        line: 1-based line number, when known (YAML syntax errors, duplicate keys).
    """

    file: str
    path: str
    value: str | None
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return clip(text, LINE_CHARS)


class ConfigError(UsageError):
    """One or more config problems; exit code 2. ``problems`` holds every one that was found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("ConfigError needs at least one Problem")
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [str(p) for p in self.problems[:MAX_PROBLEMS_SHOWN]]
        if len(self.problems) == 1:
            return lines[0]
        more = len(self.problems) - len(lines)
        if more:
            lines.append(f"... and {more} more problem{'s' if more > 1 else ''} (fix these first)")
        return f"{len(self.problems)} config problems:\n" + "\n".join(lines)

    def __reduce__(self):  # keep picklable across process boundaries
        return (type(self), (self.problems,))
