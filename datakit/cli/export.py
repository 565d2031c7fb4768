"""`datakit export`: write a run's token caches in a trainer's own format (Megatron-LM, Hugging Face
datasets, MosaicML streaming, nanoGPT), with the tokenizer, weights and provenance beside them."""

from __future__ import annotations

import json
import os
import sys

import click

from .common import EXIT_BAD_INPUT, load


def _from_manifest(path: str, prefix: str | None):
    """Components of a manifest's mixture whose caches are built, with their weights and step identities."""
    from datakit.export import Component
    from datakit.mix.show import build_graph
    from datakit.steps import step_status

    from .common import resolve_prefix

    m = load(path, check_uris=False)
    graph = build_graph(m, resolve_prefix(m, prefix))
    rows = {r["name"]: r for r in step_status(list(graph.tokens.values()), graph.prefix)}
    missing = sorted(n for n, s in graph.tokens.items() if rows[s.name]["state"] != "SUCCESS")
    if missing or not graph.tokens:
        raise ValueError(f"token caches are not built for: {', '.join(missing) or 'any source'}; "
                         f"run `datakit run {path}` first")
    comps = tuple(Component(n, rows[s.name]["path"], s.dirname, float(graph.weights.get(n, 0.0)))
                  for n, s in sorted(graph.tokens.items()))
    steps = {r["name"]: r["identity"] for r in rows.values()}
    return comps, steps


@click.command("export")
@click.argument("target")
@click.option("--format", "fmt", required=True, type=click.Choice(["megatron", "hf", "mds", "nanogpt"]))
@click.option("--split", type=click.Choice(["train", "validation"]), help="One split (default: both).")
@click.option("--to", "dest", required=True, help="Output directory or URL (s3://, gs://, ...).")
@click.option("--prefix", help="With a MANIFEST: its output root (default: the manifest's `prefix`).")
@click.option("--backend", type=click.Choice(["local", "ray", "inline"]), default="local")
@click.option("--workers", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the provenance record as JSON.")
def export(target, fmt, split, dest, prefix, backend, workers, as_json) -> None:
    """Export TARGET's token caches (TARGET: a manifest, or a run's output prefix) in FORMAT to DEST.

    megatron: <split>/<component>.bin/.idx and the --data-path string; hf: <split>/<component>/ for
    datasets.load_from_disk; mds: <split>/<component>/ for streaming.StreamingDataset; nanogpt:
    train.bin / val.bin. Every export has export.json (weights, provenance) and tokenizer.json."""
    from datakit.export import ExportRequest
    from datakit.export import export as run_export
    from datakit.export.discover import caches_under
    from datakit.pipeline import exec_config

    try:
        if os.path.isfile(target):
            comps, steps = _from_manifest(target, prefix)
        else:
            comps, steps = caches_under(target)
        req = ExportRequest(fmt, dest, comps, (split,) if split else ("train", "validation"), steps)
        cfg = exec_config(dest if "://" in dest else os.path.abspath(dest), backend, workers)
        record = run_export(req, cfg)
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    record.pop("counters", None)
    if as_json:
        click.echo(json.dumps(record))
        return
    click.echo(f"{fmt} export of {', '.join(c.name for c in comps)} -> {dest} (export.json, tokenizer.json)")
    for s, info in record["splits"].items():
        if info.get("data_path"):
            click.echo(f"{s} --data-path {info['data_path']}")
