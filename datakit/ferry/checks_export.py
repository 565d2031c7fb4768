"""Stage check for the export steps: the provenance record is there and agrees with the token caches
(the tokenizer copy by sha256, every exported split's documents and tokens against the caches' ledgers)."""

from __future__ import annotations

import os

from datakit.core.layout import TOKENIZER_FILE

from .checking import CheckFailed, RunContext, eq, read_json, sha256_file
from .checks_data import with_outputs_check
from datakit.stages.plan import PlanStep


def _provenance(ctx: RunContext, name: str) -> str:
    p = ctx.path(name, "export.json")
    if not os.path.exists(p):
        raise CheckFailed(f"{ctx.rel(p)} missing: the export did not finish")
    record = read_json(p)
    eq(sha256_file(ctx.path(name, TOKENIZER_FILE)), record["tokenizer"]["sha256"], "tokenizer.json sha256")
    return f"{record['format']}: {len(record['components'])} components, splits {', '.join(record['splits'])}"


def _totals(ctx: RunContext, name: str) -> str:
    record, counters = read_json(ctx.path(name, "export.json")), ctx.cnt(name)
    docs = tokens = 0
    for comp in record["components"].values():
        step = comp["step"]
        for split in record["splits"]:
            ledger = read_json(os.path.join(os.path.dirname(ctx.path(name)), step, split, "ledger.json"))
            docs, tokens = docs + int(ledger["total_docs"]), tokens + int(ledger["total_tokens"])
    eq(counters.get("export/docs"), docs, "exported documents vs the caches' ledgers")
    eq(counters.get("export/tokens"), tokens, "exported tokens vs the caches' ledgers")
    return f"{docs:,} documents, {tokens:,} tokens"


@with_outputs_check
def check_export(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    if ctx.check(ref.name, "provenance", lambda: _provenance(ctx, ref.name), breaks=True):
        ctx.check(ref.name, "totals", lambda: _totals(ctx, ref.name))
