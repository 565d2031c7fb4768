"""`datakit explain`: why a document was removed, or where it went, from a run's own outputs."""

from __future__ import annotations

import json
import sys

import click

from .common import EXIT_BAD_INPUT, EXIT_FAILED, load, resolve_prefix


@click.command()
@click.argument("query")
@click.option("--prefix", help="The run's output root (default: the manifest's prefix; without a manifest "
                               "./datakit-out, where the embedded default writes).")
@click.option("--manifest", "manifest_path", help="Take the prefix from this manifest.")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(min=1),
              help="At most this many documents for a text excerpt.")
@click.option("--json", "as_json", is_flag=True, help="The traces as JSON.")
def explain(query, prefix, manifest_path, limit, as_json) -> None:
    """Why was a document removed? QUERY is a document id, SOURCE:FILE[:LINE] (its provenance) or a text
    excerpt. Prints the document's way through every step (kept, changed, removed: by which rule, the
    measured value and the setting; its duplicate cluster and the kept copy; its tokens), read from the
    run's outputs and its published plan; nothing is rerun. Exit 1 when nothing matches."""
    from datakit.report.explain import explain as run_explain
    from datakit.report.explain import render_text

    if not prefix:
        prefix = resolve_prefix(load(manifest_path, check_uris=False), None, manifest_path is not None)
    try:
        answer = run_explain(prefix, query, limit)
    except (FileNotFoundError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    click.echo(json.dumps(answer.to_dict(), indent=1, default=str) if as_json else render_text(answer))
    if not answer.traces:
        sys.exit(EXIT_FAILED)
