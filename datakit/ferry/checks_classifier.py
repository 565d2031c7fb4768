"""Ferry checks of the quality classifier stage: the training step's model file is the one its result
names (sha256) with held-out metrics in range; a scoring step's documents all carry a quality_score in
[0, 1]; a selection step's documents in = kept + removed (+ other tiers), read from its own files."""

from __future__ import annotations

import hashlib

import pyarrow.compute as pc
import pyarrow.parquet as pq

from .checking import CheckFailed, RunContext
from .checks_data import with_outputs_check
from datakit.stages.plan import PlanStep


def _model(ctx: RunContext, name: str) -> str:
    res = ctx.res(name)
    with open(ctx.path(name, res["model"]), "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    if sha != res.get("model_sha256"):
        raise CheckFailed(f"model file sha256 {sha[:12]} is not the recorded {str(res.get('model_sha256'))[:12]}")
    m = res.get("metrics") or {}
    undefined = m.get("undefined") or {}  # null with a reason (datakit.classify.heldout), never NaN
    bad = [k for k in ("precision", "recall", "f1", "auc")
           if not (k in undefined if m.get(k) is None else 0.0 <= float(m[k]) <= 1.0)]
    if bad:
        raise CheckFailed(f"metrics out of [0, 1], missing, or null without a reason: {bad}")
    return f"model {sha[:12]}, held-out F1 {m['f1']}, AUC {m['auc']}"


def _files(ctx: RunContext, name: str, key: str) -> list[str]:
    return [ctx.path(name, r) for r in ctx.res(name).get(key) or []]


def _scores(ctx: RunContext, name: str) -> str:
    n = 0
    for f in _files(ctx, name, "main_files"):
        col = pq.read_table(f, columns=["quality_score"]).column("quality_score")
        lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
        if col.null_count or (len(col) and (lo < 0 or hi > 1)):
            raise CheckFailed(f"{f}: quality_score has nulls or values outside [0, 1] ({lo}..{hi})")
        n += len(col)
    return f"{n} documents scored"


def _selection(ctx: RunContext, name: str) -> str:
    c = ctx.cnt(name)
    kept = sum(pq.ParquetFile(f).metadata.num_rows for f in _files(ctx, name, "main_files"))
    removed = sum(pq.ParquetFile(f).metadata.num_rows for f in _files(ctx, name, "removed_files"))
    if kept != c.get("docs_out") or removed != c.get("removed/quality_classifier", 0):
        raise CheckFailed(f"files hold {kept} kept / {removed} removed; counters say {c.get('docs_out')} / "
                          f"{c.get('removed/quality_classifier')}")
    if c.get("docs_in") != kept + removed + c.get("removed/other tiers", 0):
        raise CheckFailed(f"docs_in {c.get('docs_in')} != kept + removed + other tiers")
    return f"{kept} kept, {removed} removed"


@with_outputs_check
def check_quality_classifier(ctx: RunContext, ref: PlanStep, src: str | None) -> None:
    name = ref.name
    if name.startswith("quality-classifier-train"):
        ctx.check(name, "model", lambda: _model(ctx, name))
    elif name.startswith("qscore-"):
        ctx.check(name, "scores", lambda: _scores(ctx, name))
    else:
        ctx.check(name, "selection", lambda: _selection(ctx, name))
