"""The `datakit` command line.

Exit codes: 0 ok, 1 a step failed, 2 bad input (manifest, arguments), 3 another ferry holds the
ferry lock (`datakit ferry run`), 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import json
import os
import sys

import click

from datakit import __version__

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def default_manifest() -> str:
    """The embedded default: a real small corpus every Python machine has (see datakit/ferry/)."""
    from datakit.defaults import default_manifest_path

    return default_manifest_path()


def _load(manifest_path: str | None, *, check_uris: bool = True):
    from datakit.manifest import ManifestInvalid
    from datakit.pipeline import load_manifest

    path = manifest_path or default_manifest()
    try:
        return load_manifest(path, check_uris=check_uris)
    except ManifestInvalid as e:
        for err in e.errors:
            click.echo(str(err), err=True)
        click.echo(f"{len(e.errors)} error(s) in {path}; nothing was run.", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except FileNotFoundError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)


@click.group()
@click.version_option(__version__, prog_name="datakit")
def main() -> None:
    """datakit: manifest-driven pretraining data pipelines (fetch, normalize, dedup, tokenize, train)."""


@main.command()
@click.argument("manifest", required=False)
def validate(manifest: str | None) -> None:
    """Check MANIFEST (all errors at once, with file:line:column) without running anything."""
    m = _load(manifest)
    click.echo(f"{m.path}: ok ({len(m.sources)} sources)")


def _resolve_prefix(m, prefix: str | None, manifest_given: bool = True) -> str:
    """--prefix, else the manifest's prefix; the embedded default writes to ./datakit-out."""
    if prefix:
        return prefix
    return m.prefix if manifest_given else os.path.abspath("datakit-out")


def _print_summary(summary: dict, prefix: str) -> None:
    from datakit.report.text import format_summary

    click.echo(format_summary(summary, prefix), err=True)


def _step_names(values: tuple[str, ...]) -> list[str]:
    """Step names from repeated options, each of which may also list several names with commas."""
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


@main.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--backend", type=click.Choice(["local", "ray", "inline"]), help="Execution backend.")
@click.option("--workers", type=int, help="Worker processes (default: one per core).")
@click.option("--ray-address", help="Ray cluster address (with --backend ray).")
@click.option("--mirror", help="Read-only prefix searched for already-built steps.")
@click.option("--dry-run", is_flag=True, help="Print the plan and what would be skipped; touch nothing.")
@click.option("--only", multiple=True,
              help="Run only these steps (repeatable, or comma-separated: a,b); their deps must be built.")
@click.option("--force", multiple=True, help="Rebuild these steps even if built (repeatable, or comma-separated).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout: one JSON summary object.")
def run(manifest, prefix, backend, workers, ray_address, mirror, dry_run, only, force, as_json) -> None:
    """Run the pipeline of MANIFEST (default: the embedded small corpus), skipping built steps."""
    from datakit import pipeline
    from datakit.steps import ConfigError
    from datakit.core.fsio import PrefixNotWritable

    m = _load(manifest)
    out = _resolve_prefix(m, prefix, manifest is not None)
    try:
        pipeline.check_manifest(m)  # a manifest no stage can run is refused before the prefix is touched
        if not dry_run:  # a prefix that cannot be written costs one line, before anything is planned
            from datakit.core.fsio import check_writable, store_url

            check_writable(store_url(out))
        steps = pipeline.build_steps(m, out, write_cache=not dry_run)
    except (ValueError, FileNotFoundError, ImportError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (OSError, PrefixNotWritable) as e:
        _exit_on_disk_error(e, out)
        raise

    from datakit.report.events import event_lines

    by_name = {s.name: s for s in steps}

    def on_event(ev: dict) -> None:
        for line in event_lines(ev, by_name) if not as_json else ():
            click.echo(line, err=True)

    try:
        summary = pipeline.run(m, prefix=out, steps=steps, backend=backend, workers=workers, mirror=mirror,
                               dry_run=dry_run, only=_step_names(only) or None, force=_step_names(force),
                               on_event=on_event,
                               progress=not as_json and sys.stderr.isatty(),
                               backend_options={"address": ray_address} if ray_address else {})
    except (ValueError, ConfigError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (OSError, PrefixNotWritable) as e:
        _exit_on_disk_error(e, out)
        raise
    except KeyboardInterrupt:
        click.echo("interrupted: finished steps are kept; rerun the same command to resume.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    d = summary.to_dict()
    if dry_run and not as_json:
        _print_plan(d["steps"])
    elif not as_json:
        _print_summary(d, out)
    if as_json:
        keys = ("name", "status", "output", "wall_s", "counters", "reason", "error")
        steps_out = [{k: s.get(k) for k in keys} for s in d["steps"]]
        click.echo(json.dumps({"status": d["status"], "prefix": out, "steps": steps_out, "data": d["data"]}))
    sys.exit(EXIT_OK if summary.ok else EXIT_FAILED)


def _exit_on_disk_error(e: BaseException, prefix: str) -> None:
    """A prefix that cannot be written at all (read-only, no permission, full before anything ran):
    one line naming the path and what to do, exit 2. Returns for any other error (the caller re-raises)."""
    from datakit.core.fsio import PrefixNotWritable, disk_problem

    problem = e.problem if isinstance(e, PrefixNotWritable) else disk_problem(e)
    if problem is None:
        return
    click.echo(f"error: {problem.message(prefix)}", err=True)
    sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--deep", is_flag=True, help="Re-hash every output file (default: sizes, small files hashed).")
@click.option("--json", "as_json", is_flag=True)
def verify(manifest, prefix, deep, as_json) -> None:
    """Check every built step's outputs against the manifest it wrote (exit 1 when any is damaged)."""
    from datakit.pipeline import build_steps
    from datakit.steps.verify import verify_steps

    m = _load(manifest, check_uris=False)
    out = _resolve_prefix(m, prefix, manifest is not None)
    rows = verify_steps(build_steps(m, out, write_cache=False), out, deep=deep)
    if as_json:
        click.echo(json.dumps(rows))
    else:
        for r in rows:
            click.echo(f"{r['state']:<9} {r['name']:<32} {r['detail']}")
        bad = sum(r["state"] == "DAMAGED" for r in rows)
        click.echo(f"{bad} damaged step(s): rerun `datakit run` to rebuild them and what depends on them" if bad
                   else f"ok: every built step matches its output manifest ({'deep' if deep else 'sizes'})")
    sys.exit(EXIT_FAILED if any(r["state"] == "DAMAGED" for r in rows) else EXIT_OK)


def _print_plan(steps: list[dict]) -> None:
    """The dry-run plan: what would run and why, what would be skipped and where it already is."""
    for s in steps:
        click.echo(f"{s['status']:<11} {s['name']:<32} {s.get('output') or ''}")
        if s.get("reason"):
            click.echo(f"{'':<11} {'':<32} why: {s['reason']}")
    n = sum(s["status"] == "would_run" for s in steps)
    click.echo(f"{n} of {len(steps)} steps would run" if n else f"nothing to rebuild: all {len(steps)} steps are built")


@main.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--mirror", help="Read-only prefix searched for already-built steps.")
@click.option("--json", "as_json", is_flag=True)
def status(manifest, prefix, mirror, as_json) -> None:
    """Show each step of the current plan: its state, when, and its output (relative to the prefix)."""
    from datakit.pipeline import build_steps
    from datakit.report.summary import relative
    from datakit.steps import step_status

    m = _load(manifest, check_uris=False)
    out = _resolve_prefix(m, prefix, manifest is not None)
    rows = step_status(build_steps(m, out, write_cache=False), out, mirror=mirror or m.mirror)
    for r in rows:
        r["state"] = state_word(r)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        where = relative(r["path"], out) if r.get("location") != "mirror" else f"{r['path']} (mirror)"
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


@main.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True)
def gc(manifest, prefix, dry_run, as_json) -> None:
    """Remove step outputs under the prefix that MANIFEST's current plan no longer uses.

    Never touches a step a run is building (live lease), anything that is not a step dir, or a mirror."""
    from datakit.pipeline import build_steps
    from datakit.steps.gc import collect_garbage

    m = _load(manifest, check_uris=False)
    out = _resolve_prefix(m, prefix, manifest is not None)
    report = collect_garbage(build_steps(m, out, write_cache=False), out, dry_run=dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, **report.to_dict()}))
        return
    verb = "would remove" if dry_run else "removed"
    for name in report.removed:
        click.echo(f"{verb} {name}")
    for name in report.kept_running:
        click.echo(f"kept {name} (a run is building it)")
    click.echo(f"{verb} {len(report.removed)} outdated step output(s), {report.bytes_freed / 2**20:,.1f} MiB; "
               f"{len(report.current)} current kept")


@main.command()
@click.argument("target", required=False)
@click.option("--prefix", help="Output root, when TARGET is a manifest (default: the manifest's `prefix`).")
@click.option("--out", "out_file", help="Where to write the page (default: <prefix>/report.html).")
def report(target, prefix, out_file) -> None:
    """Write an HTML report of a run: TARGET is its prefix (every step's newest build) or its manifest
    (the current plan's steps); default: the embedded manifest's ./datakit-out."""
    from datakit.report.run_report import write_run_report

    if target and os.path.isdir(target):
        root, dirnames = target, None
    else:
        from datakit.pipeline import build_steps

        m = _load(target, check_uris=False)
        root = _resolve_prefix(m, prefix, target is not None)
        dirnames = [s.dirname for s in build_steps(m, root, write_cache=False)]
    if not os.path.isdir(root):
        click.echo(f"error: {root}: no such run prefix (run `datakit run` first, or point at a prefix)", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(write_run_report(root, out_file, dirnames))


@main.group()
def cache() -> None:
    """Token caches."""


@cache.command("inspect")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True)
def cache_inspect(path: str, as_json: bool) -> None:
    """Totals, per-source counts and a decoded sample of the token cache at PATH."""
    from datakit.tokenize.inspection import format_inspect, inspect_cache

    try:
        info = inspect_cache(path)
    except Exception as e:  # the cache layer's errors already say what is wrong and where
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(json.dumps(info, default=str) if as_json else format_inspect(info))


@main.command()
@click.option("--out", "out_dir", default="datakit-out/demo", show_default=True, help="Output directory.")
@click.option("--workers", type=int, default=None, help="Worker processes (default: one per core).")
@click.option("--backend", type=click.Choice(["local", "inline"]), default="local", show_default=True)
def demo(out_dir: str, workers: int | None, backend: str) -> None:
    """Word-count the Python standard library on the shuffle engine (a 10-second smoke test)."""
    from datakit.demo import run_demo

    res = run_demo(out_dir, workers, backend)
    click.echo(res["stats"], err=True)
    click.echo(f"wrote {len(res['files'])} parquet shards under {out_dir}/wordcount")
    for word, n in res["top"]:
        click.echo(f"  {word:<20} {n}")


from datakit.ferry.cli import ferry  # noqa: E402  (the group registers below the main group)

main.add_command(ferry)
from datakit.mix.cli import mix  # noqa: E402  (`datakit mix show|search`)

main.add_command(mix)

if __name__ == "__main__":
    sys.exit(main())
