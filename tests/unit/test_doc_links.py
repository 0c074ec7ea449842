"""Every relative link in README.md and docs/*.md resolves to a file (or folder) inside the
repository, and every ``#anchor`` to a heading of the file it points at: a user's clone has
nothing outside the repository (no ``../shared/``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)[0] * len(match.group(2))
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            continue
        lines.append((number, line))
    return lines


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline link, image and reference definition."""
    found = []
    for number, line in prose_lines(text):
        line = _INLINE_CODE.sub("", line)  # `[x](y)` in code is no link
        found += [(number, m.group(1)) for m in _LINK.finditer(line)]
        ref = _REFERENCE.match(line)
        if ref:
            found.append((number, ref.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (``-`` and ``_`` kept),
    spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings (duplicates numbered as GitHub does)."""
    seen: dict[str, int] = {}
    result = set()
    for _, line in prose_lines(path.read_text()):
        match = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(doc: Path) -> list[str]:
    """Why each relative link of ``doc`` does not resolve inside the repository."""
    problems = []
    for number, target in links(doc.read_text()):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s):, mailto:, ...: not a file of ours
        path_part, _, anchor = target.partition("#")
        resolved = (doc.parent / path_part).resolve() if path_part else doc
        where = f"{doc.relative_to(REPO)}:{number}: {target}"
        if not resolved.is_relative_to(REPO):
            problems.append(f"{where}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{where}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_relative_links_resolve_inside_the_repository(doc):
    problems = broken_links(doc)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_finds_what_it_must(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n## Two words `here`\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/a.md) [anchor](docs/a.md#two-words-here) [self](#readme) ![img](docs/a.md)\n"
        "[out](../shared/DESIGN.md) [gone](docs/b.md) [bad anchor](docs/a.md#nope) "
        "[web](https://example.com/x.md)\n"
        "`[in code](nowhere.md)`\n```\n[in a fence](nowhere.md)\n```\n[ref]: docs/missing.md\n"
        "# README\n")
    problems = broken_links(doc)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "../shared/DESIGN.md: outside the repository", "docs/b.md: no such file",
        "docs/a.md#nope: no heading #nope in docs/a.md", "docs/missing.md: no such file"]
