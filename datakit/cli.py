"""The `datakit` command line.

Exit codes: 0 ok, 1 a step failed, 2 bad input (manifest, arguments), 130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
import time

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


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"datakit run: {summary['status']}")
    for col in ("step", "status", "wall_s", "output"):
        table.add_column(col)
    for s in summary["steps"]:
        table.add_row(s["name"], s["status"], f"{s.get('wall_s') or 0:.1f}", s.get("output") or "")
    Console(stderr=True).print(table)
    for s in summary["steps"]:
        if s.get("error"):
            click.echo(f"\n{s['name']} failed:\n{s['error']}", err=True)


@main.command()
@click.argument("manifest", required=False)
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--backend", type=click.Choice(["local", "ray", "inline"]), help="Execution backend.")
@click.option("--workers", type=int, help="Worker processes (default: one per core).")
@click.option("--ray-address", help="Ray cluster address (with --backend ray).")
@click.option("--mirror", help="Read-only prefix searched for already-built steps.")
@click.option("--dry-run", is_flag=True, help="Print the plan and what would be skipped; touch nothing.")
@click.option("--only", multiple=True, help="Run only this step (repeatable); its deps must be built.")
@click.option("--force", multiple=True, help="Rebuild this step even if built (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout: one JSON summary object.")
def run(manifest, prefix, backend, workers, ray_address, mirror, dry_run, only, force, as_json) -> None:
    """Run the pipeline of MANIFEST (default: the embedded small corpus), skipping built steps."""
    from datakit import pipeline
    from datakit.steps import ConfigError

    m = _load(manifest)
    out = _resolve_prefix(m, prefix, manifest is not None)
    try:
        steps = pipeline.build_steps(m, out, write_cache=not dry_run)
    except (ValueError, FileNotFoundError, ImportError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)

    def on_event(ev: dict) -> None:
        if not as_json and ev.get("event") in ("step_started", "step_succeeded", "step_skipped", "step_failed"):
            extra = f" ({ev['wall_s']:.1f}s)" if ev.get("wall_s") is not None else ""
            why = f": {ev['reason']}" if ev.get("event") == "step_started" and ev.get("reason") else ""
            click.echo(f"[{time.strftime('%H:%M:%S')}] {ev['event'].replace('step_', '')}: {ev.get('step')}{extra}{why}",
                       err=True)

    try:
        summary = pipeline.run(m, prefix=out, steps=steps, backend=backend, workers=workers, mirror=mirror,
                               dry_run=dry_run, only=list(only) or None, force=list(force), on_event=on_event,
                               progress=not as_json and sys.stderr.isatty(),
                               backend_options={"address": ray_address} if ray_address else {})
    except (ValueError, ConfigError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("interrupted: finished steps are kept; rerun the same command to resume.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    d = summary.to_dict()
    if dry_run and not as_json:
        _print_plan(d["steps"])
    elif not as_json:
        _print_summary(d)
    if as_json:
        keys = ("name", "status", "output", "wall_s", "counters", "reason")
        steps_out = [{k: s.get(k) for k in keys} for s in d["steps"]]
        click.echo(json.dumps({"status": d["status"], "prefix": out, "steps": steps_out}))
    sys.exit(EXIT_OK if summary.ok else EXIT_FAILED)


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
    """Show each step's state, time and path."""
    from datakit.pipeline import build_steps
    from datakit.steps import step_status

    m = _load(manifest, check_uris=False)
    out = _resolve_prefix(m, prefix, manifest is not None)
    rows = step_status(build_steps(m, out, write_cache=False), out, mirror=mirror or m.mirror)
    if as_json:
        click.echo(json.dumps(rows, default=str))
        return
    for r in rows:
        click.echo(f"{r['state']:<8} {r['name']:<32} {r.get('time') or '':<26} {r['path']}")


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

if __name__ == "__main__":
    sys.exit(main())
