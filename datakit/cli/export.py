"""`datakit export`: write a run's token caches in a trainer's own format (Megatron-LM, Hugging Face
datasets, MosaicML streaming, nanoGPT), with the tokenizer, weights and provenance beside them. What is
exported comes from a plan: the manifest's, or the one a run published under the prefix."""

from __future__ import annotations

import json
import os
import sys

import click

from .common import EXIT_BAD_INPUT, load, resolve_prefix


def _plan(target: str, prefix: str | None):
    """(plan, prefix) for TARGET: a manifest's plan over its prefix, or the plan published under TARGET."""
    from datakit.pipeline import build_plan
    from datakit.stages.plan import read_plan

    if os.path.isfile(target):
        m = load(target, check_uris=False)
        root = resolve_prefix(m, prefix)
        return build_plan(m, root, write_cache=False), root
    plan = read_plan(target)
    if plan is None:
        raise ValueError(f"no plan.json under {target}: run `datakit run` there, or pass the manifest")
    return plan, target


@click.command("export")
@click.argument("target")
@click.option("--format", "fmt", required=True, type=click.Choice(["megatron", "hf", "mds", "nanogpt"]))
@click.option("--split", type=click.Choice(["train", "validation"]), help="One split (default: both).")
@click.option("--to", "dest", required=True, help="Output directory or URL (s3://, gs://, ...).")
@click.option("--seq-len", type=click.IntRange(min=1),
              help="hf only: rows of exactly N tokens packed from the documents (default: one row per document).")
@click.option("--prefix", help="With a MANIFEST: its output root (default: the manifest's `prefix`).")
@click.option("--backend", type=click.Choice(["local", "ray", "inline"]), default="local")
@click.option("--workers", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the provenance record as JSON.")
def export(target, fmt, split, dest, seq_len, prefix, backend, workers, as_json) -> None:
    """Export TARGET's token caches (TARGET: a manifest, or a run's output prefix) in FORMAT to DEST.

    megatron: <split>/<component>.bin/.idx and the --data-path string; hf: <split>/<component>/ for
    datasets.load_from_disk, and <split>/<component>/parquet/*.parquet for load_dataset("parquet");
    mds: <split>/<component>/ for streaming.StreamingDataset; nanogpt: train.bin / val.bin. Every
    export has export.json (weights, provenance) and tokenizer.json."""
    from datakit.export import export as run_export
    from datakit.pipeline import exec_config
    from datakit.stages.export import request_from_plan

    try:
        plan, root = _plan(target, prefix)
        splits = (split,) if split else ("train", "validation")
        req = request_from_plan(plan, root, fmt, dest, splits, seq_len)
        record = run_export(req, exec_config(dest if "://" in dest else os.path.abspath(dest), backend, workers))
    except ValueError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    record.pop("counters", None)
    if as_json:
        click.echo(json.dumps(record))
        return
    click.echo(f"{fmt} export of {', '.join(c.name for c in req.components)} -> {dest} (export.json, tokenizer.json)")
    for s, info in record["splits"].items():
        if info.get("data_path"):
            click.echo(f"{s} --data-path {info['data_path']}")
