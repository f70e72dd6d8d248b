#!/usr/bin/env python3
"""Print a pip constraints file pinning every runtime dependency to its declared lower bound.

    python3 .ci/lower_bounds.py [pyproject.toml] > constraints.txt
    pip install -c constraints.txt -e '.[test]'

Reads [project].dependencies and the `embedded` extra (the servers the tests default to; not
the test extra's tools): `name[extras]>=X; marker` becomes `name==X; marker`. A runtime
dependency without a `>=` bound is an error, so the pins always cover every dependency the
package declares (.ci/run installs the package at these pins and
runs a test subset there: a lower bound in pyproject.toml is a version that works).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?P<specs>[^;]*?)\s*(?:;\s*(?P<marker>.+?))?\s*$"
)
LOWER = re.compile(r">=\s*(?P<version>[^,\s]+)")


def constraints(pyproject: Path) -> list[str]:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    lines = []
    project = data["project"]
    extras = project.get("optional-dependencies", {})
    for requirement in [*project["dependencies"], *extras.get("embedded", [])]:
        match = REQUIREMENT.match(requirement)
        lower = LOWER.search(match.group("specs")) if match else None
        if match is None or lower is None:
            sys.exit(f"lower_bounds: no '>=' lower bound in dependency {requirement!r}")
        marker = match.group("marker")
        pin = f"{match.group('name')}=={lower.group('version')}"
        lines.append(f"{pin}; {marker}" if marker else pin)
    return lines


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    pyproject = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "pyproject.toml"
    print("\n".join(constraints(pyproject)))


if __name__ == "__main__":
    main()
