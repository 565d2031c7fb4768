"""`datakit validate` and `datakit run`: check a manifest; run its pipeline or print the dry-run plan."""

from __future__ import annotations

import json
import sys

import click

from .common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_on_disk_error, load, resolve_prefix


@click.command()
@click.argument("manifest", required=False)
def validate(manifest: str | None) -> None:
    """Check MANIFEST (all errors at once, with file:line:column) without running anything: the schema,
    then every stage's refusal (what `run` would refuse before touching the prefix). Imports no user code."""
    from datakit import pipeline

    m = load(manifest)
    try:
        pipeline.check_manifest(m)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(f"{m.path}: ok ({len(m.sources)} sources)")


def _print_summary(summary: dict, prefix: str, wide: bool) -> None:
    from datakit.report.text import format_summary

    click.echo(format_summary(summary, prefix, wide), err=True)


def _step_names(values: tuple[str, ...]) -> list[str]:
    """Step names from repeated options, each of which may also list several names with commas."""
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


@click.command()
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
@click.option("--fast", is_flag=True,
              help="Skip a built step when its output files have their recorded sizes, without re-hashing "
                   "them (default: every output's content is checked before it is trusted).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout: one JSON summary object.")
@click.option("--wide", is_flag=True, help="The summary's full step table (every output's path), however wide.")
def run(manifest, prefix, backend, workers, ray_address, mirror, dry_run, only, force, fast, as_json, wide) -> None:
    """Run the pipeline of MANIFEST (default: the embedded small corpus), skipping built steps."""
    from datakit import pipeline
    from datakit.steps import ConfigError
    from datakit.core.fsio import PrefixNotWritable, StoreUnavailable

    m = load(manifest)
    out = resolve_prefix(m, prefix, manifest is not None)
    if manifest is None and not as_json:  # where the default lives, so it can be read, copied, validated
        click.echo(f"datakit run: the embedded default manifest {m.path} -> {out}", err=True)
    try:
        pipeline.check_manifest(m)  # a manifest no stage can run is refused before the prefix is touched
        if not dry_run:  # a prefix that cannot be written costs one line, before anything is planned
            from datakit.core.fsio import check_writable, store_url

            check_writable(store_url(out))
        plan = pipeline.build_plan(m, out, write_cache=not dry_run)
    except (ValueError, FileNotFoundError, ImportError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except StoreUnavailable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_FAILED)
    except (OSError, PrefixNotWritable) as e:
        exit_on_disk_error(e, out)
        raise

    from datakit.report.events import event_lines

    by_name = {s.name: s for s in plan.runnable}

    def on_event(ev: dict) -> None:
        for line in event_lines(ev, by_name) if not as_json else ():
            click.echo(line, err=True)

    try:
        summary = pipeline.run(m, prefix=out, plan=plan, backend=backend, workers=workers, mirror=mirror,
                               dry_run=dry_run, only=_step_names(only) or None, force=_step_names(force),
                               on_event=on_event, fast=fast,
                               progress=not as_json and sys.stderr.isatty(),
                               backend_options={"address": ray_address} if ray_address else {})
    except (ValueError, ConfigError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except StoreUnavailable as e:  # before any step ran (the plan, the prefix): one line, no traceback
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_FAILED)
    except (OSError, PrefixNotWritable) as e:
        exit_on_disk_error(e, out)
        raise
    except KeyboardInterrupt:
        click.echo("interrupted: finished steps are kept; rerun the same command to resume.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    d = summary.to_dict()
    if dry_run and not as_json:
        _print_plan(d["steps"], plan.notes)
    elif not as_json:
        _print_summary(d, out, wide)
    if as_json:
        keys = ("name", "status", "output", "wall_s", "counters", "reason", "error") + (("plan",) if dry_run else ())
        steps_out = [{k: s.get(k) for k in keys} for s in d["steps"]]
        click.echo(json.dumps({"status": d["status"], "prefix": out, "steps": steps_out, "data": d["data"]}))
    sys.exit(EXIT_OK if summary.ok else EXIT_FAILED)


def _plan_line(plan: dict | None) -> str | None:
    """What a step takes from its earlier build, in words: ``reused``; ``incremental`` with the earlier
    build's documents and the input files it recomputes, with the documents the changed and removed ones
    held where that build counted them per file (documents of new files are not known before they are
    read, so they are said as files); or a full build."""
    if not plan:
        return None
    if plan["mode"] == "full" and plan.get("earlier_version"):
        return (f"full build ({plan['earlier']} is of stage version {plan['earlier_version']}: nothing of it is "
                "taken)")
    if plan["mode"] != "incremental":
        return "reused" if plan["mode"] == "reused" else "full build (nothing to take from an earlier build)"
    docs = plan.get("earlier_documents")
    line = f"incremental from {plan['earlier']}" + (f" ({docs:,} documents)" if isinstance(docs, int) else "")
    files = plan.get("files")
    if files:
        held = {k: f" ({files[f'{k}_documents']:,} documents)" if f"{k}_documents" in files else ""
                for k in ("changed", "removed")}
        line += (f": {files['changed']} changed{held['changed']}, {files['removed']} removed{held['removed']} "
                 f"of {files['total']} files recomputed")
        if files["new"]:
            line += f", + {files['new']} new files not yet read"
    return line + "; the rest is taken"


def _print_plan(steps: list[dict], notes: dict[str, str]) -> None:
    """The dry-run plan: what would run and why, what it takes from its earlier build, what would be
    skipped and where it already is, and what a stage notes about a step (which tokenizer is pinned)."""
    for s in steps:
        click.echo(f"{s['status']:<11} {s['name']:<32} {s.get('output') or ''}")
        if s.get("reason"):
            click.echo(f"{'':<11} {'':<32} why: {s['reason']}")
        if s["status"] == "would_run" and _plan_line(s.get("plan")):
            click.echo(f"{'':<11} {'':<32} plan: {_plan_line(s.get('plan'))}")
        if notes.get(s["name"]):
            click.echo(f"{'':<11} {'':<32} note: {notes[s['name']]}")
    n = sum(s["status"] == "would_run" for s in steps)
    click.echo(f"{n} of {len(steps)} steps would run" if n else f"nothing to rebuild: all {len(steps)} steps are built")
