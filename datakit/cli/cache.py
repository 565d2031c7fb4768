"""`datakit cache inspect`: a token cache's totals, per-source counts and a decoded sample."""

from __future__ import annotations

import json
import sys

import click

from .common import EXIT_BAD_INPUT


@click.group()
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
