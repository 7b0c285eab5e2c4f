"""A tool the pages tell you to run with ``python -m`` is installed by the install they
name (issue 47, item 9: ``python -m build`` was named in the deploy docs while ``build``
was in no extra)."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata, util

from tests.docs.readme import ROOT, pages

STANDARD = set(sys.stdlib_module_names)


def _named_modules() -> set[str]:
    found: set[str] = set()
    for page in pages():
        found |= set(re.findall(r"python3? -m ([A-Za-z_][\w.]*)", page.read_text()))
    return found


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower() for spec in wanted}


def test_the_pages_name_python_m_build() -> None:
    assert "build" in _named_modules()


def test_every_module_run_with_python_m_is_declared_and_installed() -> None:
    declared, distributions = _declared(), metadata.packages_distributions()
    for module in sorted(_named_modules()):
        top = module.split(".")[0]
        assert util.find_spec(top) is not None, f"python -m {module}: not installed"
        if top in STANDARD or top == "airlock":
            continue
        owners = {d.lower() for d in distributions.get(top, [])}
        assert owners & declared, f"python -m {module}: {owners or top} is in no extra"
