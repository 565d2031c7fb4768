"""The scheduled-ferry workflow and the operator runbooks keep their promised shape."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from datakit.cli import main

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["When you're here", "TL;DR", "Before you touch anything", "Steps", "Verify", "Why"]
RUNBOOKS = ["daily-smoke-ferry.md", "ad-hoc-ferry-on-your-data.md", "recovering-a-failed-step.md",
            "choosing-dedup-parameters.md", "adding-a-source.md", "slow-or-memory-hungry-shuffle.md"]


def test_workflow_runs_ferry_daily_and_on_demand_and_uploads_the_report() -> None:
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "smoke-ferry.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads the bare key `on` as True
    assert re.fullmatch(r"\d+ \d+ \* \* \*", on["schedule"][0]["cron"])
    assert "workflow_dispatch" in on
    steps = wf["jobs"]["ferry"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "datakit ferry run" in runs and "datakit ferry report" in runs
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "report.html" in upload["with"]["path"]
    # Every datakit option the workflow passes exists (a renamed flag must break this test, not CI at 06:30).
    for line in runs.splitlines():
        if "datakit ferry" in line:
            words = shlex.split(line.replace("\\", ""))
            sub = words[words.index("ferry") + 1]
            help_text = CliRunner().invoke(main, ["ferry", sub, "--help"]).output
            for w in words:
                if w.startswith("--"):
                    assert w in help_text, f"workflow passes {w} to `datakit ferry {sub}`"


@pytest.mark.parametrize("name", RUNBOOKS)
def test_runbook_has_the_sections(name: str) -> None:
    text = (ROOT / "runbooks" / name).read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == SECTIONS, headings
    assert text.startswith("# ")


@pytest.mark.parametrize("name", RUNBOOKS)
def test_runbook_commands_exist(name: str) -> None:
    """`datakit <group> <cmd>` and its --options quoted in a runbook are real."""
    text = (ROOT / "runbooks" / name).read_text()
    for m in re.finditer(r"datakit (ferry [a-z-]+|validate|run|status|cache inspect)((?: [^\n`|#]*)?)", text):
        cmd = m.group(1).split()
        help_text = CliRunner().invoke(main, [*cmd, "--help"]).output
        assert "Usage:" in help_text, f"{name}: `datakit {m.group(1)}` is not a command"
        for opt in re.findall(r"(--[a-z][a-z-]+)", m.group(2)):
            assert opt in help_text, f"{name}: `datakit {m.group(1)}` has no option {opt}"
