"""Stage check for the export steps: the provenance record is there and agrees with the token caches
(the tokenizer copy by sha256, every exported split's documents and tokens against the token cache
steps' results, read through `TokensResult`)."""

from __future__ import annotations

import os

from datakit.core.layout import TOKENIZER_FILE
from datakit.core.results import TOKENS, TokensResult
from datakit.stages.plan import PlanStep

from .checking import CheckFailed, RunContext, eq, read_json, sha256_file
from .checks_data import with_outputs_check


def _provenance(ctx: RunContext, name: str) -> str:
    p = ctx.path(name, "export.json")
    if not os.path.exists(p):
        raise CheckFailed(f"{ctx.rel(p)} missing: the export did not finish")
    record = read_json(p)
    eq(sha256_file(ctx.path(name, TOKENIZER_FILE)), record["tokenizer"]["sha256"], "tokenizer.json sha256")
    return f"{record['format']}: {len(record['components'])} components, splits {', '.join(record['splits'])}"


def _totals(ctx: RunContext, ref: PlanStep) -> str:
    record, counters = read_json(ctx.path(ref.name, "export.json")), ctx.cnt(ref.name)
    caches = [TokensResult.of(ctx.record(d)) for d in ref.deps if ctx.plan.step(d).kind == TOKENS]
    eq(len(caches), len(record["components"]), "token caches the step read vs components exported")
    docs = sum(int(c.split(s).docs or 0) for c in caches for s in record["splits"])
    tokens = sum(c.tokens_in(s) for c in caches for s in record["splits"])
    eq(counters.get("export/docs"), docs, "exported documents vs the token caches")
    eq(counters.get("export/tokens"), tokens, "exported tokens vs the token caches")
    return f"{docs:,} documents, {tokens:,} tokens"


@with_outputs_check
def check_export(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    if ctx.check(ref.name, "provenance", lambda: _provenance(ctx, ref.name), breaks=True):
        ctx.check(ref.name, "totals", lambda: _totals(ctx, ref))
