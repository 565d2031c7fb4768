"""Schedule the ferry: one tagged line in the user's crontab, or a systemd user timer.

The crontab entry ends with a comment tag naming the prefix, so installing twice replaces the line
instead of adding a second one, and ``--remove`` deletes exactly that line and nothing else of the
user's crontab. The entry runs the ferry under ``flock -n`` on ``<prefix>/ferry.cron.lock`` and
appends stdout and stderr to a log file. The ferry also locks ``<prefix>/ferry.lock`` itself (that one
stops a manual run from overlapping the cron one); the cron lock is a separate file on purpose: flock(1)
keeps its lock while the child runs, so the child could never take the same file's lock.

The crontab program is ``$DATAKIT_CRONTAB`` (default ``crontab``): tests point it at a stand-in that
keeps the table in a file, so they exercise the real read-modify-write without touching a real crontab.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

TAG = "# datakit-ferry"
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


class CronError(RuntimeError):
    """The crontab program is missing or failed; the message says what to do."""


@dataclass(frozen=True)
class Schedule:
    hour: int
    minute: int

    @classmethod
    def parse(cls, hhmm: str) -> "Schedule":
        m = _TIME.match(hhmm.strip())
        if not m:
            raise ValueError(f"--time {hhmm!r}: expected HH:MM in 24-hour local time, e.g. 06:30")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.hour:02d}:{self.minute:02d}"


def ferry_command(prefix: str, extra_args: tuple[str, ...] = ()) -> list[str]:
    """argv that runs the ferry with this interpreter (cron's PATH knows nothing of the virtualenv)."""
    return [sys.executable, "-m", "datakit.cli", "ferry", "run", "--prefix", prefix, *extra_args]


def tag_for(prefix: str) -> str:
    """The comment that marks our line. cron turns an unescaped '%' into a newline anywhere in the
    command field, trailing comment included, so it is escaped here too."""
    return f"{TAG} prefix={prefix}".replace("%", "\\%")


def cron_line(prefix: str, schedule: Schedule, log_file: str, extra_args: tuple[str, ...] = ()) -> str:
    lock = os.path.join(prefix, "ferry.cron.lock")
    cmd = " ".join(shlex.quote(a) for a in ferry_command(prefix, extra_args))
    shell = (f"mkdir -p {shlex.quote(prefix)} && flock -n {shlex.quote(lock)} {cmd} "
             f">> {shlex.quote(log_file)} 2>&1")
    # '%' is a newline in a crontab command unless escaped; escape it everywhere in the command.
    shell = shell.replace("%", "\\%")
    return f"{schedule.minute} {schedule.hour} * * * {shell}  {tag_for(prefix)}"


def crontab_program() -> list[str]:
    prog = os.environ.get("DATAKIT_CRONTAB", "crontab")
    argv = shlex.split(prog)
    if not argv or shutil.which(argv[0]) is None:
        raise CronError(f"crontab program {prog!r} not found: install cron (Debian: apt-get install cron) "
                        "or use --systemd for a systemd user timer")
    return argv


def read_crontab() -> str:
    """The current user crontab ('' when the user has none)."""
    r = subprocess.run([*crontab_program(), "-l"], capture_output=True, text=True)
    if r.returncode == 0:
        return r.stdout
    if "no crontab" in (r.stderr or "").lower():
        return ""
    raise CronError(f"`crontab -l` failed ({r.returncode}): {r.stderr.strip()}")


def write_crontab(text: str) -> None:
    r = subprocess.run([*crontab_program(), "-"], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise CronError(f"`crontab -` failed ({r.returncode}): {r.stderr.strip()}")


def _without(text: str, prefix: str) -> tuple[list[str], int]:
    tag = tag_for(prefix)
    lines = text.splitlines()
    kept = [ln for ln in lines if not ln.rstrip().endswith(tag)]
    return kept, len(lines) - len(kept)


def install_cron(prefix: str, schedule: Schedule, log_file: str | None = None,
                 extra_args: tuple[str, ...] = ()) -> tuple[str, bool]:
    """Install (or replace) the prefix's entry. Returns (the line, whether the crontab changed)."""
    prefix = os.path.abspath(prefix)
    log_file = os.path.abspath(log_file or os.path.join(prefix, "ferry.log"))
    line = cron_line(prefix, schedule, log_file, extra_args)
    current = read_crontab()
    kept, _ = _without(current, prefix)
    new = "\n".join([*kept, line]) + "\n"
    if new == current:
        return line, False
    write_crontab(new)
    return line, True


def remove_cron(prefix: str) -> int:
    """Remove the prefix's entry; returns how many lines were removed (0: there was none)."""
    prefix = os.path.abspath(prefix)
    current = read_crontab()
    kept, removed = _without(current, prefix)
    if removed:
        write_crontab("\n".join(kept) + "\n" if kept else "")
    return removed


def systemd_units(prefix: str, schedule: Schedule, log_file: str | None = None,
                  extra_args: tuple[str, ...] = ()) -> dict[str, str]:
    """A oneshot .service + a daily .timer (user units). systemd never starts a service that is still
    running, so the timer needs no flock; the ferry's own lock still guards against manual runs."""
    prefix = os.path.abspath(prefix)
    log_file = os.path.abspath(log_file or os.path.join(prefix, "ferry.log"))
    cmd = " ".join(shlex.quote(a) for a in ferry_command(prefix, extra_args))
    service = f"""\
[Unit]
Description=datakit daily smoke ferry ({prefix})

[Service]
Type=oneshot
ExecStartPre=/bin/mkdir -p {prefix}
ExecStart={cmd}
StandardOutput=append:{log_file}
StandardError=append:{log_file}
"""
    timer = f"""\
[Unit]
Description=Run the datakit smoke ferry daily at {schedule}

[Timer]
OnCalendar=*-*-* {schedule}:00
Persistent=true
Unit=datakit-ferry.service

[Install]
WantedBy=timers.target
"""
    return {"datakit-ferry.service": service, "datakit-ferry.timer": timer}


def format_systemd(units: dict[str, str]) -> str:
    out = ["# Save these under ~/.config/systemd/user/, then:",
           "#   systemctl --user daemon-reload && systemctl --user enable --now datakit-ferry.timer",
           "#   loginctl enable-linger $USER   # run while you are logged out", ""]
    for name, body in units.items():
        out += [f"# ---- {name}", body]
    return "\n".join(out)
