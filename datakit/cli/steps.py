"""`datakit status`, `verify` and `gc`: the current plan's steps as built under the prefix."""

from __future__ import annotations

import json
import sys

import click

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, exit_on_disk_error, load, resolve_prefix


def _plan(m, out: str):
    """The current plan, built without writing anything or importing user stage code; a plan no stage
    can build (a user stage whose source cannot be read) costs one line and exit 2."""
    from datakit.pipeline import build_plan

    try:
        return build_plan(m, out, write_cache=False)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


@click.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--fast", is_flag=True, help="Compare sizes only (small files hashed); default: every file's hash.")
@click.option("--deep", is_flag=True, hidden=True, help="Kept for old scripts: every file's hash is now the default.")
@click.option("--json", "as_json", is_flag=True)
def verify(manifest, prefix, fast, deep, as_json) -> None:
    """Check every built step's outputs against the manifest it wrote: content (xxh3-128), or sizes with
    --fast (exit 1 when any is damaged)."""
    from datakit.steps.verify import verify_steps

    m = load(manifest, check_uris=False)
    out = resolve_prefix(m, prefix, manifest is not None)
    rows = verify_steps(_plan(m, out).runnable, out, fast=fast)
    if as_json:
        click.echo(json.dumps(rows))
    else:
        for r in rows:
            click.echo(f"{r['state']:<9} {r['name']:<32} {r['detail']}")
        bad = sum(r["state"] == "DAMAGED" for r in rows)
        click.echo(f"{bad} damaged step(s): rerun `datakit run` to rebuild them and what depends on them" if bad
                   else f"ok: every built step matches its output manifest ({'sizes' if fast else 'content'})")
    sys.exit(EXIT_FAILED if any(r["state"] == "DAMAGED" for r in rows) else EXIT_OK)


@click.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--mirror", help="Read-only prefix searched for already-built steps.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--wide", is_flag=True, help="Each output's path relative to the prefix, however wide.")
def status(manifest, prefix, mirror, as_json, wide) -> None:
    """Show each step of the current plan: its state, when, and its identity (the output dir is
    <name>-<identity> under the prefix; --wide: the path)."""
    from datakit.report.summary import relative
    from datakit.steps import step_status

    m = load(manifest, check_uris=False)
    out = resolve_prefix(m, prefix, manifest is not None)
    plan = _plan(m, out)
    rows = step_status(list(plan.runnable), out, mirror=mirror or m.mirror)
    for r in rows:
        r["state"] = state_word(r)
        ref = plan.step(r["name"])
        if ref is not None:  # who built it and what it holds, from the plan
            r.update(stage=ref.stage, source=ref.source, kind=ref.kind)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        where = r["path"] if wide else r["identity"]
        if r.get("location") == "mirror":
            where += " (mirror)"
        elif wide:
            where = relative(where, out)
        click.echo(f"{r['state']:<11} {r['name']:<{width}}  {r.get('time') or '-':<20}  {where}")


def state_word(row: dict) -> str:
    """One vocabulary for step states in `run`, `status` and --json: succeeded, running, failed,
    interrupted (a Ctrl-C or a kill), missing (never built); a RUNNING step whose lease is dead or
    stale is a crashed run: interrupted."""
    state = (row.get("state") or "").upper()
    if state == "SUCCESS":
        return "succeeded"
    if state == "RUNNING":
        return "running" if row.get("lease") == "live" else "interrupted"
    if state == "FAILED":
        return "interrupted" if str(row.get("error") or "").startswith("interrupted") else "failed"
    return "missing" if state == "MISSING" else state.lower() or "missing"


@click.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True)
def gc(manifest, prefix, dry_run, as_json) -> None:
    """Remove step outputs under the prefix that MANIFEST's current plan no longer uses.

    Never touches a step dir a running run's plan names (built, being built or still to be read), a step
    a run is building (live lease), anything that is not a step dir, or a mirror."""
    from datakit.steps.gc import collect_garbage

    m = load(manifest, check_uris=False)
    out = resolve_prefix(m, prefix, manifest is not None)
    plan = _plan(m, out)
    try:
        report = collect_garbage(plan.runnable, out, dry_run=dry_run)
    except OSError as e:
        exit_on_disk_error(e, f"step outputs under {out}", "run gc where the prefix is writable "
                           "(`datakit gc --dry-run` lists what it would remove)", doing="remove")
        raise
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, **report.to_dict()}))
        return
    verb = "would remove" if dry_run else "removed"
    for name in report.removed:
        click.echo(f"{verb} {name}")
    runs = {r["run_id"]: r for r in report.runs}
    for run_id, names in report.kept_in_use.items():
        r = runs.get(run_id, {})
        click.echo(f"kept {len(names)} step dir(s) a running run ({run_id}, started {r.get('started')} on "
                   f"{r.get('host')}, pid {r.get('pid')}) still uses: {', '.join(names)}")
    for name in report.kept_running:
        click.echo(f"kept {name} (a run is building it)")
    click.echo(f"{verb} {len(report.removed)} outdated step output(s), {report.bytes_freed / 2**20:,.1f} MiB; "
               f"{len(report.current)} current kept")

