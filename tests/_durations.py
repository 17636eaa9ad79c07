"""Write tests/durations.json (the seconds each test took) from a run's junit XML.

    .venv/bin/python -m pytest --junitxml=/tmp/junit.xml
    .venv/bin/python tests/_durations.py /tmp/junit.xml

tests/conftest.py reads the file to hand the longest xdist scopes out first; a test missing from it
counts as instant, so a stale file costs only balance, never a test.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET  # noqa: S405 - our own pytest's junit output
from pathlib import Path

MIN_S = 0.5  # shorter tests are noise for the ordering


def _ungrouped(name: str) -> str:
    """A test's name without an xdist_group suffix ("test_a[x]@multinode" -> "test_a[x]")."""
    head, at, group = name.rpartition("@")
    return head if at and "]" not in group and "[" not in group else name


def durations(junit: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):  # noqa: S314
        cls, name, t = case.get("classname", ""), case.get("name", ""), float(case.get("time", "0"))
        parts = cls.split(".")
        # "tests.test_x" -> tests/test_x.py; "tests.test_x.TestY" -> tests/test_x.py::TestY
        mod = next((i for i in range(len(parts), 0, -1) if Path("/".join(parts[:i]) + ".py").exists()), len(parts))
        # an xdist_group's "@group" suffix (tests/conftest.py _name_group) is not part of the test's id
        nodeid = "/".join(parts[:mod]) + ".py::" + "::".join([*parts[mod:], _ungrouped(name)])
        if t >= MIN_S:
            out[nodeid] = round(out.get(nodeid, 0.0) + t, 1)
    return dict(sorted(out.items()))


if __name__ == "__main__":
    target = Path(__file__).with_name("durations.json")
    target.write_text(json.dumps(durations(Path(sys.argv[1])), indent=0) + "\n")
    print(f"{target}: {len(json.loads(target.read_text()))} tests of {MIN_S} s or more")
