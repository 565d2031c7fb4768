"""`datakit ferry install-cron`: idempotent install, removal of exactly our line, systemd units.

`crontab` is replaced (through DATAKIT_CRONTAB, the documented knob) by a small script that keeps the
table in a file with crontab's own contract (-l prints it or fails with "no crontab for ...", `-` reads
it from stdin): the install/remove logic under test is the real one, and the machine's real crontab is
never touched.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from datakit.cli.ferry import ferry
from datakit.ferry.cron import TAG, Schedule

FAKE_CRONTAB = """\
#!{python}
import os, sys
table = os.environ["FAKE_CRONTAB_FILE"]
args = sys.argv[1:]
if args == ["-l"]:
    if not os.path.exists(table):
        sys.stderr.write("no crontab for tester\\n")
        sys.exit(1)
    sys.stdout.write(open(table).read())
elif args == ["-"]:
    data = sys.stdin.read()
    open(table + ".tmp", "w").write(data)
    os.replace(table + ".tmp", table)
else:
    sys.stderr.write("fake crontab: unsupported arguments %r\\n" % (args,))
    sys.exit(2)
"""


@pytest.fixture
def fake_crontab(tmp_path, monkeypatch) -> Path:
    script = tmp_path / "crontab"
    script.write_text(FAKE_CRONTAB.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    table = tmp_path / "table"
    monkeypatch.setenv("DATAKIT_CRONTAB", str(script))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    return table


def _invoke(*args: str):
    return CliRunner().invoke(ferry, list(args), catch_exceptions=False)


def _ours(table: Path) -> list[str]:
    return [ln for ln in table.read_text().splitlines() if TAG in ln]


def test_install_is_idempotent_and_keeps_other_entries(fake_crontab: Path, tmp_path: Path) -> None:
    fake_crontab.write_text("MAILTO=ops@example.org\n0 1 * * * /usr/bin/backup --nightly\n")
    prefix = tmp_path / "ferry out"  # a space: the command must be quoted
    r1 = _invoke("install-cron", "--prefix", str(prefix), "--time", "06:30")
    assert r1.exit_code == 0 and r1.output.startswith("installed: ")
    r2 = _invoke("install-cron", "--prefix", str(prefix), "--time", "06:30")
    assert r2.exit_code == 0 and r2.output.startswith("already installed: ")
    lines = fake_crontab.read_text().splitlines()
    assert lines[:2] == ["MAILTO=ops@example.org", "0 1 * * * /usr/bin/backup --nightly"]
    (line,) = _ours(fake_crontab)
    assert line.startswith("30 6 * * * ")
    # The command cron hands to sh: under flock -n on the cron lock, our interpreter, log appended.
    words = shlex.split(line.split(" ", 5)[5], comments=True)
    assert words[:3] == ["mkdir", "-p", str(prefix)]
    i = words.index("flock")
    assert words[i + 1:i + 3] == ["-n", str(prefix / "ferry.cron.lock")]
    assert words[i + 3:i + 10] == [sys.executable, "-m", "datakit.cli", "ferry", "run", "--prefix", str(prefix)]
    assert words[-3:] == [">>", str(prefix / "ferry.log"), "2>&1"]
    assert line.rstrip().endswith(f"{TAG} prefix={prefix}")


def test_new_time_replaces_the_entry_and_other_prefixes_coexist(fake_crontab: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _invoke("install-cron", "--prefix", str(a), "--time", "06:30")
    _invoke("install-cron", "--prefix", str(b), "--time", "07:00")
    r = _invoke("install-cron", "--prefix", str(a), "--time", "05:05", "--keep-days", "3", "--workers", "2")
    assert r.exit_code == 0 and r.output.startswith("installed: ")
    ours = _ours(fake_crontab)
    assert len(ours) == 2
    line_a = next(ln for ln in ours if ln.endswith(f"prefix={a}"))
    assert line_a.startswith("5 5 * * * ") and "--keep-days 3 --workers 2" in line_a
    assert any(ln.startswith("0 7 * * * ") and ln.endswith(f"prefix={b}") for ln in ours)


def test_remove_deletes_only_our_line(fake_crontab: Path, tmp_path: Path) -> None:
    fake_crontab.write_text("0 1 * * * /usr/bin/backup\n")
    prefix = tmp_path / "p"
    _invoke("install-cron", "--prefix", str(prefix))
    r = _invoke("install-cron", "--prefix", str(prefix), "--remove")
    assert r.exit_code == 0 and "removed 1 ferry entry" in r.output
    assert fake_crontab.read_text() == "0 1 * * * /usr/bin/backup\n"
    r = _invoke("install-cron", "--prefix", str(prefix), "--remove")
    assert r.exit_code == 0 and "no ferry entry" in r.output
    assert fake_crontab.read_text() == "0 1 * * * /usr/bin/backup\n"


def test_remove_last_entry_leaves_empty_table(fake_crontab: Path, tmp_path: Path) -> None:
    _invoke("install-cron", "--prefix", str(tmp_path / "p"))
    assert len(_ours(fake_crontab)) == 1
    _invoke("install-cron", "--prefix", str(tmp_path / "p"), "--remove")
    assert fake_crontab.read_text() == ""


def test_missing_crontab_program_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DATAKIT_CRONTAB", str(tmp_path / "no-such-crontab"))
    r = CliRunner().invoke(ferry, ["install-cron", "--prefix", str(tmp_path)])
    assert r.exit_code == 2
    assert "not found" in r.output and "apt-get install cron" in r.output and "--systemd" in r.output


def test_failing_crontab_program_is_reported(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "crontab"
    script.write_text("#!/bin/sh\necho 'crontab: permission denied' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("DATAKIT_CRONTAB", str(script))
    r = CliRunner().invoke(ferry, ["install-cron", "--prefix", str(tmp_path)])
    assert r.exit_code == 2 and "permission denied" in r.output


@pytest.mark.parametrize("bad", ["6:3", "24:00", "noon", "06:60"])
def test_bad_time_is_rejected(bad: str, fake_crontab: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(ferry, ["install-cron", "--prefix", str(tmp_path), "--time", bad])
    assert r.exit_code == 2 and "HH:MM" in r.output
    assert not fake_crontab.exists()


def test_systemd_prints_service_and_timer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DATAKIT_CRONTAB", str(tmp_path / "must-not-be-called"))
    r = _invoke("install-cron", "--systemd", "--prefix", str(tmp_path / "p"), "--time", "07:15")
    assert r.exit_code == 0
    out = r.output
    assert "# ---- datakit-ferry.service" in out and "# ---- datakit-ferry.timer" in out
    assert "OnCalendar=*-*-* 07:15:00" in out and "Persistent=true" in out
    assert f"ExecStart={sys.executable} -m datakit.cli ferry run --prefix {tmp_path / 'p'}" in out
    assert f"StandardOutput=append:{tmp_path / 'p' / 'ferry.log'}" in out


def test_schedule_parse() -> None:
    assert str(Schedule.parse("6:05")) == "06:05"
    assert Schedule.parse("23:59") == Schedule(23, 59)
    with pytest.raises(ValueError, match="HH:MM"):
        Schedule.parse("25:00")


def test_percent_in_paths_is_escaped_for_cron(fake_crontab: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "100%"
    _invoke("install-cron", "--prefix", str(prefix))
    (line,) = _ours(fake_crontab)
    command = line.split(" ", 5)[5]
    assert "%" not in command.replace("\\%", "")


def test_fake_crontab_is_executable_python(fake_crontab: Path) -> None:
    """Guard for the stand-in itself: it must behave like crontab for a missing table."""
    import subprocess

    r = subprocess.run([os.environ["DATAKIT_CRONTAB"], "-l"], capture_output=True, text=True)
    assert r.returncode == 1 and "no crontab" in r.stderr
