"""Config problems and the one exception that carries all of them.

Loading a config never stops at the first mistake: every problem found in a file (or in a task /
resource pair) is collected as a :class:`Problem` and raised together as one :class:`ConfigError`,
whose text lists one problem per line in the form ``file[:line]: dotted.path: message``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from graphstore.errors import UsageError


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
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(UsageError):
    """One or more config problems; exit code 2. ``problems`` holds every one that was found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        if not self.problems:
            raise ValueError("ConfigError needs at least one Problem")
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [str(p) for p in self.problems]
        if len(lines) == 1:
            return lines[0]
        return f"{len(lines)} config problems:\n" + "\n".join(lines)

    def __reduce__(self):  # keep picklable across process boundaries
        return (type(self), (self.problems,))
