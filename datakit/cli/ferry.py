"""`datakit ferry ...`: run, validate, report, install-cron (registered by datakit/cli/__init__.py).

Exit codes: 0 ok, 1 the run or a check failed, 2 bad input (manifest, arguments, not a run dir),
3 another ferry holds the lock, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys

import click

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, exit_on_disk_error, require_writable

DEFAULT_PREFIX = "ferry-out"


def _envelopes(path: str | None):
    from datakit.ferry.envelopes import load_envelopes

    try:
        return load_envelopes(path)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


@click.group()
def ferry() -> None:
    """The daily smoke ferry: run the whole pipeline on a small real corpus and validate every stage."""


@ferry.command("run")
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True,
              help="Ferry root: runs/<run-id>/, history.jsonl, status.json, report.html, ferry.lock.")
@click.option("--run-id", help="Name of this run's directory (default: UTC timestamp).")
@click.option("--keep-days", type=float, default=14, show_default=True, help="Delete runs older than this.")
@click.option("--workers", type=int, help="Worker processes (default: the manifest's, else one per core).")
@click.option("--manifest", type=click.Path(dir_okay=False),
              help="Run this manifest instead of the bundled smoke corpus (an ad-hoc ferry on your data).")
@click.option("--envelopes", "envelopes_path", type=click.Path(dir_okay=False),
              help="YAML file overriding the validator's drop-fraction envelopes.")
@click.option("--no-report", is_flag=True, help="Do not rebuild report.html after the run.")
def run_cmd(prefix, run_id, keep_days, workers, manifest, envelopes_path, no_report) -> None:
    """Run the bundled manifest end to end into PREFIX/runs/RUN_ID, validate, record, report.

    Progress goes to stderr; the last stdout line is a JSON summary (run_id, status, failing)."""
    from datakit.ferry.lock import FerryLocked
    from datakit.ferry.run import FerryInputError, FerryOptions, check_options, run_ferry

    opts = FerryOptions(prefix=prefix, run_id=run_id, keep_days=keep_days, workers=workers, manifest=manifest,
                        envelopes=_envelopes(envelopes_path), report=not no_report)
    remedy = "choose a writable --prefix (or fix its permissions) and rerun"
    try:
        check_options(opts)  # a bad option costs one line and leaves the prefix untouched
        require_writable(prefix, remedy)
        outcome = run_ferry(opts)
    except OSError as e:
        exit_on_disk_error(e, prefix, remedy)
        raise
    except FerryInputError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except FerryLocked as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_LOCKED)
    click.echo(json.dumps({"run_id": outcome.run_id, "status": outcome.status, "run_dir": outcome.run_dir,
                           "failing": outcome.failing, "wall_s": outcome.record.get("wall_s")}))
    sys.exit(outcome.exit_code)


@ferry.command("validate")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--manifest", type=click.Path(dir_okay=False),
              help="For a prefix made by `datakit run MANIFEST`: the manifest it ran (default: the manifest its "
                   "plan.json names, or for ./datakit-out the embedded default).")
@click.option("--envelopes", "envelopes_path", type=click.Path(dir_okay=False),
              help="YAML file overriding the drop-fraction envelopes.")
@click.option("--json", "as_json", is_flag=True, help="Print the full structured result as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="List every check, not only failures.")
def validate_cmd(run_dir, manifest, envelopes_path, as_json, verbose) -> None:
    """Check RUN_DIR stage by stage; exit non-zero naming the first failing stage and check."""
    from datakit.ferry.validate import validate_run

    if not os.path.isdir(run_dir):
        click.echo(f"error: {run_dir}: no such directory", err=True)
        sys.exit(EXIT_BAD_INPUT)
    env = _envelopes(envelopes_path)
    try:
        v = validate_run(run_dir, env, manifest=manifest)
    except (FileNotFoundError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if as_json:
        click.echo(json.dumps(v.to_dict(), default=str))
    else:
        for c in v.checks:
            if verbose or c.status == "failed":
                click.echo(f"{c.status:<7} {c}")
        counts = v.to_dict()["counts"]
        tail = f"{counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
        if v.ok:
            click.echo(f"OK: {v.run_dir} ({tail})")
        else:
            f = v.first_failure
            click.echo(f"FAILED: {f.stage}: {f.check}: {f.message} ({tail})" if f
                       else f"FAILED: no checks ran ({tail})")
    sys.exit(EXIT_OK if v.ok else EXIT_FAILED)


@ferry.command("report")
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help="Ferry root holding history.jsonl.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Output HTML (default PREFIX/report.html).")
@click.option("--limit", type=int, default=30, show_default=True, help="Runs shown.")
def report_cmd(prefix, out_file, limit) -> None:
    """Write a static HTML page of the last runs (status, times, loss curve, dedup counts)."""
    from datakit.ferry.report import write_report

    if not os.path.isdir(prefix):
        click.echo(f"error: {prefix}: no such directory (no ferry has run there)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        click.echo(write_report(prefix, out_file, limit=limit))
    except OSError as e:
        exit_on_disk_error(e, out_file or os.path.join(prefix, "report.html"),
                           "pass --out FILE on a writable disk (the ferry prefix is only read)")
        raise


@ferry.command("install-cron")
@click.option("--time", "at", default="06:30", show_default=True, help="Daily start, HH:MM local time.")
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help="Ferry root the scheduled runs use.")
@click.option("--log", "log_file", type=click.Path(dir_okay=False), help="Log file (default PREFIX/ferry.log).")
@click.option("--remove", is_flag=True, help="Remove this prefix's entry instead.")
@click.option("--systemd", is_flag=True, help="Print a systemd .service + .timer pair instead of using crontab.")
@click.option("--keep-days", type=float, help="Passed to `ferry run`.")
@click.option("--workers", type=int, help="Passed to `ferry run`.")
def install_cron_cmd(at, prefix, log_file, remove, systemd, keep_days, workers) -> None:
    """Install (or --remove) one daily crontab entry running the ferry under flock, logging to a file."""
    from datakit.ferry.cron import CronError, Schedule, format_systemd, install_cron, remove_cron, systemd_units

    try:
        schedule = Schedule.parse(at)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    extra: tuple[str, ...] = ()
    if keep_days is not None:
        extra += ("--keep-days", f"{keep_days:g}")
    if workers is not None:
        extra += ("--workers", str(workers))
    if systemd:
        if remove:
            click.echo("# systemctl --user disable --now datakit-ferry.timer && "
                       "rm ~/.config/systemd/user/datakit-ferry.{service,timer}")
            return
        click.echo(format_systemd(systemd_units(prefix, schedule, log_file, extra)))
        return
    try:
        if remove:
            n = remove_cron(prefix)
            click.echo(f"removed {n} ferry entr{'y' if n == 1 else 'ies'} for {os.path.abspath(prefix)}"
                       if n else f"no ferry entry for {os.path.abspath(prefix)}; crontab unchanged")
            return
        line, changed = install_cron(prefix, schedule, log_file, extra)
    except CronError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(("installed: " if changed else "already installed: ") + line)


__all__ = ["ferry", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_LOCKED"]
