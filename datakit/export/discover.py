"""The token caches under a prefix, for `datakit export PREFIX` with no manifest: per source the newest
finished tokenize step (its artifact.json says the stage, the source and when it finished). Without a
manifest there are no manifest weights, so the components are weighted by their training tokens."""

from __future__ import annotations

import json

from datakit.core.fsio import exists, read_bytes
from datakit.core.layout import TokenCacheDir
from datakit.mix.plan import proportional
from datakit.tokenize.cache import listdir

from .inputs import Component, rel

TOKENIZE_STAGE = "tokenize"


def _artifact(step_dir: str) -> dict | None:
    path = rel(step_dir, "artifact.json")
    if not exists(path):
        return None
    art = json.loads(read_bytes(path))
    return art if art.get("status") == "SUCCESS" and art.get("stage") == TOKENIZE_STAGE else None


def caches_under(prefix: str) -> tuple[tuple[Component, ...], dict[str, str]]:
    """(components, steps name -> identity) of the newest finished token cache per source."""
    newest: dict[str, tuple[str, str, dict]] = {}
    for name in listdir(prefix):
        art = _artifact(rel(prefix, name)) if name.startswith(TOKENIZE_STAGE + "-") else None
        if art is None or not art.get("source"):
            continue
        seen = newest.get(art["source"])
        if seen is None or art.get("finished", "") > seen[1]:
            newest[art["source"]] = (name, art.get("finished", ""), art)
    if not newest:
        raise ValueError(f"no finished token cache under {prefix}: run the pipeline (datakit run) first")
    tokens = {src: int(art["result"]["splits"]["train"].get("tokens") or 0) for src, (_, _, art) in newest.items()}
    weights = proportional(tokens) if any(tokens.values()) else {s: 0.0 for s in tokens}
    comps = tuple(Component(src, rel(prefix, d), d, weights[src]) for src, (d, _, _) in sorted(newest.items()))
    steps = {art["name"]: art["identity"] for _, _, art in newest.values()}
    for _, _, art in newest.values():
        steps.update({n: d["identity"] for n, d in art.get("deps", {}).items()})
    for c in comps:
        if not exists(TokenCacheDir(c.cache).tokenizer):
            raise ValueError(f"{c.cache} has no tokenizer.json: not a token cache")
    return comps, steps
