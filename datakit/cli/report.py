"""`datakit report`: the HTML report of a run."""

from __future__ import annotations

import os
import sys

import click

from .common import EXIT_BAD_INPUT, exit_on_disk_error, load, resolve_prefix


@click.command()
@click.argument("target", required=False)
@click.option("--prefix", help="Output root, when TARGET is a manifest (default: the manifest's `prefix`).")
@click.option("--out", "out_file", help="Where to write the page (default: <prefix>/report.html).")
def report(target, prefix, out_file) -> None:
    """Write an HTML report of a run: TARGET is its prefix (the plan its last run published) or its
    manifest (the current plan's steps); default: the embedded manifest's ./datakit-out."""
    from datakit.report.run_report import write_run_report

    if target and os.path.isdir(target):
        root, plan = target, None
    else:
        from datakit.pipeline import build_plan

        m = load(target, check_uris=False)
        root = resolve_prefix(m, prefix, target is not None)
        try:
            plan = build_plan(m, root, write_cache=False)
        except ValueError as e:  # a plan no stage can build: one line, as `datakit run` says it
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_BAD_INPUT)
    if not os.path.isdir(root):
        click.echo(f"error: {root}: no such run prefix (run `datakit run` first, or point at a prefix)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        click.echo(write_run_report(root, out_file, plan))
    except FileNotFoundError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except OSError as e:
        exit_on_disk_error(e, out_file or os.path.join(root, "report.html"),
                           "pass --out FILE on a writable disk (the run's prefix is only read)")
        raise
