"""A small engine demo on data every Python machine has: word counts over the standard library's sources.

It exercises the full data plane (file listing, fused row ops, a shuffle with a map-side combiner, the
external merge, a parquet sink) and prints the stage table, so a fresh checkout shows the engine working
in seconds.
"""

from __future__ import annotations

import re
import sysconfig

from datakit.shuffle import Dataset, ExecConfig, format_stats

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]+")


def _words(doc: dict) -> list[dict]:
    return [{"word": w, "n": 1} for w in _WORD.findall(doc["text"])]


def _count(word: str, rows) -> dict:
    return {"word": word, "n": sum(r["n"] for r in rows)}


def run_demo(out_dir: str, workers: int | None = None, backend: str = "local") -> dict:
    stdlib = sysconfig.get_paths()["stdlib"]
    ds = (
        Dataset.from_files(f"{stdlib}/*.py")
        .read_text()
        .flat_map(_words)
        .group_by(lambda r: r["word"], _count, combiner=_count, num_shards=4)
        .write_parquet(f"{out_dir}/wordcount/part-{{shard:05d}}-of-{{total:05d}}.parquet")
    )
    result = ds.run(ExecConfig(backend=backend, max_workers=workers, progress=None))
    import duckdb

    top = duckdb.sql(
        f"select word, n from read_parquet('{out_dir}/wordcount/*.parquet') order by n desc, word limit 5"
    ).fetchall()
    return {"files": result.items, "stats": format_stats(result.stats), "top": top}
