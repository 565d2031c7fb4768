"""`datakit mix`: show a manifest's mixture, and search for a better one with proxy models."""

from __future__ import annotations

import dataclasses
import json
import sys

import click

from .common import EXIT_BAD_INPUT, EXIT_FAILED, exit_on_disk_error, load, require_writable, resolve_prefix


@click.group()
def mix() -> None:
    """Data mixtures: counts, weights and epochs per component; a proxy-model mixture search."""


@mix.command()
@click.argument("manifest")
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--warn-epochs", type=float, help="Warn above this many epochs (default: mixture.warn_epochs, 4).")
@click.option("--json", "as_json", is_flag=True)
def show(manifest, prefix, warn_epochs, as_json) -> None:
    """Per component of MANIFEST's training mixture: documents, tokens, proportional and manifest
    weights, the weight and epochs for the training budget. Reads the built token caches."""
    from datakit.pipeline import build_plan
    from datakit.report.mix_show import format_view, mix_view

    m = load(manifest, check_uris=False)
    out = resolve_prefix(m, prefix)
    try:
        view = mix_view(m, build_plan(m, out, write_cache=False), out, warn_epochs=warn_epochs)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if as_json:
        click.echo(json.dumps(view.to_dict()))
    else:
        click.echo("\n".join(format_view(view, manifest)))
    sys.exit(EXIT_BAD_INPUT if view.missing else 0)


def _with_search(m, proxies: int | None, seed: int | None, target: tuple[str, ...]):
    """The manifest with its mixture.search, the options applied (a search section made from them when
    the manifest has none)."""
    from datakit.mix.config import MixtureConfig, SearchConfig, TargetSpec

    mixcfg = m.sections.get("mixture") or MixtureConfig()
    search = mixcfg.search
    if search is None:
        if not target:
            raise click.UsageError("the manifest has no mixture.search: give --target COMPONENT (a validation split)")
        search = SearchConfig(target=TargetSpec(validation=tuple(target)))
    elif target:
        search = dataclasses.replace(search, target=TargetSpec(validation=tuple(target)))
    if proxies is not None:
        search = dataclasses.replace(search, proxies=proxies)
    if seed is not None:
        search = dataclasses.replace(search, seed=seed)
    mixcfg = dataclasses.replace(mixcfg, search=search)
    return dataclasses.replace(m, sections={**m.sections, "mixture": mixcfg})


@mix.command()
@click.argument("manifest")
@click.option("--prefix", help="Output root (default: the manifest's `prefix`).")
@click.option("--proxies", type=int, help="Round one's proxy runs (default: mixture.search.proxies, 8).")
@click.option("--seed", type=int, help="Sampling seed (default: mixture.search.seed).")
@click.option("--target", multiple=True, help="Target component (its validation split); repeatable.")
@click.option("--out", "out_file", help="Also write the mixture file here (include it: mixture: {file: PATH}).")
@click.option("--backend", type=click.Choice(["local", "ray", "inline"]), help="Execution backend.")
@click.option("--workers", type=int)
def search(manifest, prefix, proxies, seed, target, out_file, backend, workers) -> None:
    """Search MANIFEST's mixture: rounds of proxies (from token-proportional on), seed repeats for the
    noise, a fit trusted only where proxies were trained, the candidate verified beside proportional
    under several seeds; returns the candidate only when it beats proportional by more than the noise,
    else proportional, and says why. Builds the token caches first if needed; finished proxies are
    reused on a rerun."""
    from datakit import pipeline
    from datakit.core import fsio
    from datakit.core.results import MixtureResult
    from datakit.report.events import event_lines
    from datakit.report.mix_search_text import summary_lines
    from datakit.stages.mixture_steps import MIXTURE_FILE
    from datakit.steps import collect_steps
    from datakit.core.fsio import PrefixNotWritable

    m = _with_search(load(manifest), proxies, seed, target)
    out = resolve_prefix(m, prefix)
    remedy = "choose a writable --prefix (or fix its permissions) and rerun"
    require_writable(out, remedy)  # before planning, which caches input fingerprints under the prefix
    try:
        plan = pipeline.build_plan(m, out)
        wanted = collect_steps([s for s in plan.runnable if s.name == plan.mixture])
        by_name = {s.name: s for s in wanted}
        summary = pipeline.run(m, prefix=out, plan=plan, steps=wanted, backend=backend, workers=workers,
                               on_event=lambda ev: [click.echo(line, err=True) for line in event_lines(ev, by_name)])
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (OSError, PrefixNotWritable) as e:
        exit_on_disk_error(e, out, remedy)
        raise
    if not summary.ok:
        click.echo(f"error: the search failed: {json.dumps(summary.to_dict()['steps'][-1].get('error'))}", err=True)
        sys.exit(EXIT_FAILED)
    rec = summary.records[plan.mixture]
    text = fsio.open_read(rec.path(MIXTURE_FILE)).read().decode()
    if out_file:
        try:
            fsio.atomic_write_bytes(out_file, text.encode())
        except OSError as e:
            exit_on_disk_error(e, out_file, f"choose a writable --out (the mixture is at {rec.path(MIXTURE_FILE)})")
            raise
    click.echo(f"mixture file: {out_file or rec.path(MIXTURE_FILE)}")
    click.echo("\n".join(summary_lines(MixtureResult.of(rec))))
