"""Run one format over an export request: the per-component or per-shard writers as tasks on the
engine backend (``datakit.shuffle``: a process pool locally, Ray on a cluster), then the per-directory
metadata, the tokenizer copy and the provenance record, last."""

from __future__ import annotations

from typing import Any, Callable

from datakit.core.fsio import makedirs
from datakit.shuffle import Dataset, ExecConfig

from . import hf, mds, megatron, nanogpt
from .inputs import Component, ExportRequest, ShardRef, check_tokenizers, ledger_facts, normalized_weights, rel, \
    shard_refs
from .provenance import copy_tokenizer, provenance, write_provenance

FORMATS = ("megatron", "hf", "mds", "nanogpt")


def _parallel(fn: Callable[[Any], Any], items: list, exec_config: ExecConfig | None) -> list:
    """``fn`` over ``items`` on the engine backend, results in order (one task per item)."""
    if not items:
        return []
    return Dataset.from_items(items, num_shards=len(items)).map(fn).collect(exec_config)


def _with_docs(req: ExportRequest, split: str) -> list[tuple[Component, dict]]:
    """The components that have documents in ``split`` (an empty one has nothing a reader could open)."""
    out = [(c, ledger_facts(c, split)) for c in sorted(req.components, key=lambda c: c.name)]
    return [(c, f) for c, f in out if f["docs"] > 0]


def _megatron_task(item: tuple[Component, str, str]) -> dict:
    return megatron.write_component(*item)


def _megatron(req: ExportRequest, split: str, exec_config: ExecConfig | None) -> dict:
    done = _parallel(_megatron_task, [(c, split, req.dest) for c, _ in _with_docs(req, split)], exec_config)
    written = {d["component"]: d["docs"] for d in done}
    return {"components": {d["component"]: d for d in done},
            "data_path": megatron.data_path(req.dest, split, normalized_weights(req.components), written)}


def _hf_task(job: hf.HfShard) -> dict:
    return hf.write_shard(job)


def _mds_task(item: tuple[ShardRef, str, str]) -> list[dict]:
    return mds.write_shard(*item)


def _dtype(facts: dict) -> str:
    return "uint16" if facts["vocab_size"] <= 1 << 16 else "uint32"


def _hf(req: ExportRequest, split: str, exec_config: ExecConfig | None) -> dict:
    jobs, dirs = [], {}
    for c, facts in _with_docs(req, split):
        dirs[c.name] = (rel(req.dest, split, c.name), _dtype(facts), c.step, facts)
        jobs += hf.shard_jobs(shard_refs(c, split), dirs[c.name][0], dirs[c.name][1], req.seq_len)
    done = _parallel(_hf_task, jobs, exec_config)
    out = {}
    for name, (path, dtype, step, facts) in dirs.items():
        files = [d for j, d in zip(jobs, done) if j.ref.component == name]
        hf.write_metadata(path, [f["file"] for f in files], dtype, fingerprint=f"{step}-{split}")
        rows, tokens = sum(f["rows"] for f in files), sum(f["tokens"] for f in files)
        out[name] = {"dir": f"{split}/{name}", "parquet": f"{split}/{name}/{hf.PARQUET_DIR}", "files": len(files),
                     "docs": facts["docs"], "rows": rows, "tokens": tokens, "seq_len": req.seq_len,
                     "dropped_tokens": facts["tokens"] - tokens}
    return {"components": out}


def _mds(req: ExportRequest, split: str, exec_config: ExecConfig | None) -> dict:
    jobs, dirs = [], {}
    for c, facts in _with_docs(req, split):
        dirs[c.name] = rel(req.dest, split, c.name)
        jobs += [(r, dirs[c.name], _dtype(facts)) for r in shard_refs(c, split)]
    done = _parallel(_mds_task, jobs, exec_config)
    out = {}
    for name, path in dirs.items():
        entries = [e for (r, *_), es in zip(jobs, done) if r.component == name for e in es]
        mds.write_index(path, entries)
        out[name] = {"dir": f"{split}/{name}", "shards": len(entries), "docs": sum(e["samples"] for e in entries)}
    return {"components": out}


def _nanogpt(req: ExportRequest, split: str, exec_config: ExecConfig | None) -> dict:
    return nanogpt.write_split(req, split)


WRITERS: dict[str, Callable[[ExportRequest, str, ExecConfig | None], dict]] = {
    "megatron": _megatron, "hf": _hf, "mds": _mds, "nanogpt": _nanogpt}


def export(req: ExportRequest, exec_config: ExecConfig | None = None) -> dict:
    """Write ``req``'s splits in its format under ``req.dest``; the result: the provenance record, plus
    ``counters`` (documents and tokens read from the caches)."""
    if req.fmt not in WRITERS:
        raise ValueError(f"unknown export format {req.fmt!r}; formats: {', '.join(FORMATS)}")
    tokenizer = check_tokenizers(req)
    makedirs(req.dest)
    splits = {s: WRITERS[req.fmt](req, s, exec_config) for s in req.splits}
    copy_tokenizer(req)
    record = provenance(req, tokenizer, splits)
    write_provenance(req, record)
    totals = [ledger_facts(c, s) for c in req.components for s in req.splits]
    return {**record, "counters": {"export/docs": sum(t["docs"] for t in totals),
                                   "export/tokens": sum(t["tokens"] for t in totals)}}
