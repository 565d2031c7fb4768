"""`datakit cache inspect PATH`: what is in a token cache (totals, per-source counts, a decoded sample).

PATH may be one split directory (holding ledger.json), a cache directory (train/ + validation/), or
any directory above several caches (e.g. a run prefix): every ledger.json up to four levels down is
reported. Unfinished caches are listed too, marked as such, instead of failing: inspecting a crashed
build is exactly when an operator needs this.
"""

from __future__ import annotations

import os
import re
from typing import Any

from datakit.core.layout import TokenCacheDir
from datakit.tokenize import cache as C

__all__ = ["inspect_cache", "format_inspect"]

_SAMPLE_CHARS = 300
_MAX_DEPTH = 4


def _find_split_dirs(path: str) -> list[str]:
    path = path.rstrip("/")
    if C.exists(C.join(path, C.LEDGER_FILE)):
        return [path]
    if C.is_local(path) and not os.path.isdir(C.local_path(path)):
        raise FileNotFoundError(f"no such cache directory: {path}")
    found = []
    for rel in C.walk(path):  # one listing on object stores
        folders = rel.split("/")[:-1]
        if (rel.rsplit("/", 1)[-1] == C.LEDGER_FILE and folders and len(folders) <= _MAX_DEPTH
                and not any(f.startswith(".") for f in folders)):
            found.append(C.join(path, *folders))
    return sorted(found)


def _sample(split_dir: str, ledger: dict) -> tuple[str | None, str | None]:
    """Decoded text of the first document, or (None, reason)."""
    if not ledger.get("total_docs"):
        return None, "no documents"
    tok_file = C.join(split_dir, ledger.get("tokenizer_file", TokenCacheDir.TOKENIZER_FROM_SPLIT))
    tok_file = os.path.normpath(tok_file) if C.is_local(tok_file) else tok_file
    if not C.exists(tok_file):
        return None, f"tokenizer file {tok_file} not found"
    from datakit.tokenize.tokenizer import load_tokenizer

    tok, ident = load_tokenizer(tok_file)
    if ident.sha256 != ledger["tokenizer"]["sha256"]:
        return None, f"tokenizer at {tok_file} does not match the ledger's sha256"
    cache = C.TokenCache(split_dir, ledger)
    ids = cache.doc_tokens(0).tolist()
    specials = {ledger["tokenizer"]["eos_id"], ledger["tokenizer"].get("bos_id")}
    ids = [i for i in ids if i not in specials]
    text = tok.decode(ids, skip_special_tokens=False)
    if len(text) > _SAMPLE_CHARS:
        text = text[:_SAMPLE_CHARS] + "..."
    return text, None


_STEP_DIR = re.compile(r"^(?P<name>.+)-[0-9a-f]{10}$")


def _current_only(dirs: list[str]) -> tuple[list[str], list[str]]:
    """Under a run prefix, each tokenize step may have several builds (one per identity); only the newest
    of each step name counts, so totals never add an outdated build to the current one."""
    newest: dict[str, tuple[float, str]] = {}
    step_of: dict[str, str] = {}
    for d in dirs:
        parts = d.rstrip("/").split("/")
        step = next((("/".join(parts[: i + 1]), m["name"]) for i in range(len(parts) - 1, -1, -1)
                     if (m := _STEP_DIR.match(parts[i]))), None)
        if step is None:
            continue
        step_dir, name = step
        step_of[d] = step_dir
        try:
            t = os.stat(os.path.join(C.local_path(step_dir), ".status")).st_mtime if C.is_local(step_dir) else 0.0
        except OSError:
            t = 0.0
        if name not in newest or t > newest[name][0]:
            newest[name] = (t, step_dir)
    current = {v[1] for v in newest.values()}
    kept = [d for d in dirs if d not in step_of or step_of[d] in current]
    return kept, sorted({step_of[d] for d in dirs if d in step_of and step_of[d] not in current})


def inspect_cache(path: str) -> dict:
    """Summary of every token cache split found at/under ``path`` (see module docstring); under a run
    prefix, only the newest build of each tokenize step counts (the others are listed as outdated)."""
    dirs, outdated = _current_only(_find_split_dirs(path))
    if not dirs:
        raise FileNotFoundError(f"no token cache ({C.LEDGER_FILE}) found at or under {path}")
    caches: list[dict[str, Any]] = []
    sources: dict[str, dict[str, dict]] = {}
    totals: dict[str, dict[str, int]] = {}
    for d in dirs:
        try:
            ledger = C.read_json(C.join(d, C.LEDGER_FILE))
        except (ValueError, OSError) as e:
            caches.append({"path": d, "finished": False, "error": f"unreadable ledger: {e}"})
            continue
        if ledger.get("format") != C.CACHE_FORMAT:
            continue
        entry: dict[str, Any] = {
            "path": d,
            "name": ledger.get("name"),
            "split": ledger.get("split"),
            "finished": bool(ledger.get("finished")),
            "num_shards": ledger.get("num_shards"),
            "dtype": ledger.get("dtype"),
            "vocab_size": ledger.get("vocab_size"),
            "tokenizer": ledger.get("tokenizer"),
            "total_docs": ledger.get("total_docs", 0),
            "total_tokens": ledger.get("total_tokens", 0),
            "total_bytes": ledger.get("total_bytes", 0),
            "bad_records": ledger.get("bad_records", 0),
        }
        if entry["total_tokens"]:
            entry["bytes_per_token"] = round(entry["total_bytes"] / entry["total_tokens"], 4)
        if entry["total_docs"]:
            entry["tokens_per_doc"] = round(entry["total_tokens"] / entry["total_docs"], 2)
        if entry["finished"]:
            try:
                entry["sample"], why = _sample(d, ledger)
                if why:
                    entry["sample_note"] = why
            except C.CacheNotReady as e:
                entry["finished"] = False
                entry["error"] = str(e)
            split = entry["split"] or "?"
            for src in ledger.get("sources") or [entry["name"]]:
                sources.setdefault(src, {})[split] = {
                    k: entry[k] for k in ("total_docs", "total_tokens", "total_bytes")
                }
            t = totals.setdefault(split, {"total_docs": 0, "total_tokens": 0, "total_bytes": 0})
            for k in t:
                t[k] += entry[k]
        caches.append(entry)
    return {"path": path, "caches": caches, "sources": sources, "totals": totals, "outdated": outdated}


def _n(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) else str(x)


def format_inspect(info: dict) -> str:
    """Human-readable text for :func:`inspect_cache`'s dict."""
    lines = [f"token caches under {info['path']}"]
    if info.get("outdated"):
        lines.append(f"  ({len(info['outdated'])} outdated build(s) not counted: {', '.join(info['outdated'])}; "
                     "`datakit gc` removes them)")
    for split, t in sorted(info["totals"].items()):
        lines.append(f"  total {split:<10} docs {_n(t['total_docs']):>14}  tokens {_n(t['total_tokens']):>16}"
                     f"  bytes {_n(t['total_bytes']):>16}")
    if info["sources"]:
        lines.append("per source:")
        for src, per in sorted(info["sources"].items()):
            for split, t in sorted(per.items()):
                lines.append(f"  {src:<20} {split:<10} docs {_n(t['total_docs']):>12}  tokens "
                             f"{_n(t['total_tokens']):>14}  bytes {_n(t['total_bytes']):>14}")
    for c in info["caches"]:
        lines.append("")
        state = "finished" if c.get("finished") else "UNFINISHED"
        lines.append(f"{c['path']}  [{state}]")
        if c.get("error"):
            lines.append(f"  error: {c['error']}")
        if "num_shards" not in c:
            continue
        tk = c.get("tokenizer") or {}
        lines.append(f"  source {c.get('name')}  split {c.get('split')}  shards {c.get('num_shards')}  "
                     f"dtype {c.get('dtype')}  vocab {c.get('vocab_size')}")
        lines.append(f"  tokenizer sha256 {str(tk.get('sha256'))[:16]}...  eos {tk.get('eos_id')}  "
                     f"bos {tk.get('bos_id')}")
        lines.append(f"  docs {_n(c['total_docs'])}  tokens {_n(c['total_tokens'])}  bytes {_n(c['total_bytes'])}"
                     + (f"  bytes/token {c['bytes_per_token']}" if "bytes_per_token" in c else "")
                     + (f"  bad records {c['bad_records']}" if c.get("bad_records") else ""))
        if c.get("sample") is not None:
            sample = c["sample"].replace("\n", "\\n")
            lines.append(f"  sample (doc 0): {sample}")
        elif c.get("sample_note"):
            lines.append(f"  sample: ({c['sample_note']})")
    return "\n".join(lines)
