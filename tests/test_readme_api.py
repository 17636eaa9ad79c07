"""The README's "Python API" snippet runs verbatim (issue 22 item 4)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(600)


def readme_snippet() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python API section holds one python block"
    return blocks[0]


def test_the_readme_python_snippet_runs_verbatim(ray_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(readme_snippet(), "README.md", "exec"), {"__name__": "__readme__"})  # noqa: S102 - our own README
    printed = out.getvalue()
    assert "RunSummary('demo-mlp-digits': simulate completed, 300 steps" in printed
    assert "completed" in printed and "Report(comparison: 2 dir(s)" in printed
    assert (tmp_path / "runs" / "compare.html").is_file() and (tmp_path / "runs" / "demo" / "summary.json").is_file()


def test_the_readme_is_a_guide_whose_links_lead_somewhere() -> None:
    """Issue 42 item 4: the README is a guide (at most 250 lines); the reference lives in docs/, and
    every local link of the README names a file that exists."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)\)", text)
    local = [x for x in links if "://" not in x]
    assert "docs/commands.md" in local and "docs/own-loop.md" in local
    missing = [x for x in local if not (REPO / x).exists()]
    assert not missing, missing
    first = text.split("## Your first job", 1)[1].split("\n## ", 1)[0]
    spec = re.findall(r"```yaml\n(.*?)```", first, flags=re.S)[0]
    import yaml

    from spotwise.config import spec_from_dict

    job = spec_from_dict(yaml.safe_load(spec))  # the guide's spec loads as it is
    assert job.workload.family == "resnet18" and job.cluster.instance_type == "p3.2xlarge"
