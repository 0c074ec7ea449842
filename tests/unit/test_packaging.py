"""pyproject.toml declares the direct dependencies, and the lock agrees with it: every package of
requirements/base.txt (what the image and .venv install) is declared in pyproject.toml (a
dependency, or the ``ray`` extra) and the reverse, every test-only package of
requirements/test.txt is in the ``test`` extra, and each version requirements/constraints.txt
locks satisfies the declared range. The console script names a function that exists."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements(path: Path) -> dict[str, Requirement]:
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            found[canonicalize_name(req.name)] = req
    return found


def _locked() -> dict[str, str]:
    return {canonicalize_name(name): version for name, version in
            re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", (REPO / "requirements" / "constraints.txt")
                       .read_text(), flags=re.M)}


def _declared() -> tuple[dict[str, Requirement], dict[str, dict[str, Requirement]]]:
    project = _project()
    deps = {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}
    extras = {extra: {canonicalize_name(r.name): r for r in map(Requirement, reqs)}
              for extra, reqs in project["optional-dependencies"].items()}
    return deps, extras


def test_the_declared_dependencies_are_the_image_s_and_the_test_extra_the_test_packages():
    deps, extras = _declared()
    base = _requirements(REPO / "requirements" / "base.txt")
    assert sorted(base) == sorted({**deps, **extras["ray"]}), (
        "requirements/base.txt and pyproject.toml (dependencies + [ray]) list different packages")
    assert sorted(_requirements(REPO / "requirements" / "test.txt")) == sorted(extras["test"])
    assert extras["ray"]["ray"].extras == base["ray"].extras == {"data", "train"}


def test_every_locked_version_satisfies_its_declared_range():
    deps, extras = _declared()
    locked = _locked()
    declared = [*deps.values(), *(r for reqs in extras.values() for r in reqs.values())]
    missing = [r.name for r in declared if canonicalize_name(r.name) not in locked]
    assert not missing, f"not locked in requirements/constraints.txt: {missing}"
    outside = [f"{r} (locked {locked[canonicalize_name(r.name)]})" for r in declared
               if not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)]
    assert not outside, "locked versions outside pyproject.toml's ranges: " + ", ".join(outside)


def test_glt_s_forced_pins_are_exact():
    deps, _ = _declared()
    for name in ("torch", "graphlearn-torch", "torch-scatter", "torch-sparse"):
        (spec,) = deps[name].specifier
        assert spec.operator == "==", f"{name} must be pinned exactly (GLT 0.2.4 loads against it)"


def test_the_console_script_names_a_function():
    scripts = _project()["scripts"]
    module, _, function = scripts["graphstore-pipeline"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
