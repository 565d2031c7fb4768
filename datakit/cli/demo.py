"""`datakit demo`: a word count of the Python standard library on the shuffle engine."""

from __future__ import annotations

import click

from .common import require_writable


@click.command()
@click.option("--out", "out_dir", default="datakit-out/demo", show_default=True, help="Output directory.")
@click.option("--workers", type=int, default=None, help="Worker processes (default: one per core).")
@click.option("--backend", type=click.Choice(["local", "inline"]), default="local", show_default=True)
def demo(out_dir: str, workers: int | None, backend: str) -> None:
    """Word-count the Python standard library on the shuffle engine (a 10-second smoke test)."""
    from datakit.demo import run_demo

    require_writable(out_dir, "choose a writable --out and rerun")
    res = run_demo(out_dir, workers, backend)
    click.echo(res["stats"], err=True)
    click.echo(f"wrote {len(res['files'])} parquet shards under {out_dir}/wordcount")
    for word, n in res["top"]:
        click.echo(f"  {word:<20} {n}")
