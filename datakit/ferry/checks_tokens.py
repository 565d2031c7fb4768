"""Stage checks over the token side: tokenizer, token caches (NumPy recount of every array against
ledger, .stats.json and the step record), and training (loss logged, finite, decreasing). File names
come from datakit.core.layout, the contract the stages write by.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from datakit.core.layout import TOKENIZER_FILE, TokenCacheDir, TrainDir
from datakit.core.results import TokenizerResult

from .checking import CheckFailed, RunContext, eq, fmt_range, frac, read_json, sha256_file
from .envelopes import within
from .checks_data import with_outputs_check
from datakit.stages.plan import PlanStep


@with_outputs_check
def check_tokenizer(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, res = ref.name, ctx.res(ref.name)

    def files() -> str:
        from tokenizers import Tokenizer

        p = ctx.path(name, TOKENIZER_FILE)
        if not os.path.exists(p):
            raise CheckFailed(f"{ctx.rel(p)} missing")
        digest = sha256_file(p)
        if res.get("sha256"):
            eq(digest, res["sha256"], f"{TOKENIZER_FILE} sha256 vs result sha256")
        vocab = Tokenizer.from_file(p).get_vocab_size()
        if res.get("vocab_size") is not None:
            eq(vocab, res["vocab_size"], "tokenizer vocab size vs result vocab_size")
        return f"vocab {vocab}"

    ctx.check(name, "files", files, breaks=True)

@with_outputs_check
def check_tokenize(ctx: RunContext, ref: PlanStep, src: str) -> None:
    name, res, c = ref.name, ctx.res(ref.name), ctx.cnt(ref.name)
    final = next((d for d in ref.deps if ctx.plan.step(d) is not None and ctx.plan.step(d).source == src), None)
    splits = res.get("splits") or {}
    ledgers: dict[str, dict] = {}  # filled by the ledger check, read by the ones after it
    if not ctx.check(name, "ledger", lambda: _tokenize_ledgers(ctx, name, res, splits, ledgers), breaks=True):
        return
    ctx.check(name, "docs", lambda: _tokenize_docs(ctx, res, c, splits, final), (final,) if final else ())
    ctx.check(name, "stats", lambda: _tokenize_stats(ctx, name, src, splits, ledgers))
    ctx.check(name, "envelope", lambda: _tokenize_envelope(ctx, res, splits))
    ctx.check(name, "checksums", lambda: _tokenize_checksums(ctx, name, splits, ledgers))


def _tokenize_ledgers(ctx: RunContext, name: str, res: dict, splits: dict, ledgers: dict[str, dict]) -> str:
    """Every split's ledger exists, says finished, lists the result's shard count and files that exist,
    and names the tokenizer step's tokenizer; the ledgers are kept in ``ledgers``."""
    if not splits:
        raise CheckFailed("the result lists no splits")
    tok_sha = TokenizerResult.of(ctx.record("tokenizer")).sha256 if "tokenizer" in ctx.artifacts else None
    for split, info in splits.items():
        d = ctx.path(name, info["path"])
        lp = os.path.join(d, TokenCacheDir.LEDGER)
        if not os.path.exists(lp):
            raise CheckFailed(f"{split}: {ctx.rel(lp)} missing")
        led = read_json(lp)
        if led.get("finished") is not True:
            raise CheckFailed(f"{split}: ledger does not say finished")
        eq(len(led.get("shards", [])), res.get("num_shards"), f"{split}: ledger shards vs result num_shards")
        for sh in led["shards"]:
            for key in ("tokens_file", "offsets_file"):
                if not os.path.exists(os.path.join(d, sh[key])):
                    raise CheckFailed(f"{split}: {ctx.rel(os.path.join(d, sh[key]))} missing")
        if tok_sha:
            eq(led.get("tokenizer", {}).get("sha256"), tok_sha, f"{split}: ledger tokenizer vs tokenizer step")
        ledgers[split] = led
    ctx.stage_info(name, files=sum(len(x["shards"]) for x in ledgers.values()))
    return f"{len(splits)} splits x {res.get('num_shards')} shards, finished"


def _tokenize_docs(ctx: RunContext, res: dict, c: dict, splits: dict, final: str | None) -> str:
    """Documents tokenized (all splits) = rows of the documents step it read - bad records."""
    if final is None or final not in ctx.artifacts:
        raise CheckFailed("cannot tell which step this cache was tokenized from")
    src_rows = ctx.rows(ctx.documents(final))
    tokenized = sum(int(s.get("docs", 0)) for s in splits.values())
    bad = int(res.get("bad_records", 0))
    eq(tokenized, src_rows - bad,
        f"tokenized docs (all splits) vs {final} rows {src_rows} - bad records {bad}")
    if "tokenize/docs" in c:
        eq(c["tokenize/docs"], tokenized, "counters tokenize/docs vs tokenized docs")
    return f"{tokenized} docs = {src_rows} rows - {bad} bad"


def _tokenize_stats(ctx: RunContext, name: str, src: str, splits: dict, ledgers: dict[str, dict]) -> str:
    """Every array recounted with NumPy against its ledger, .stats.json and the result."""
    total = 0
    vocab = TokenizerResult.of(ctx.record("tokenizer")).vocab_size if "tokenizer" in ctx.artifacts else None
    for split, led in ledgers.items():
        d = ctx.path(name, splits[split]["path"])
        tokens, docs_n = _recount_split(split, d, led, vocab)
        sp = os.path.join(d, TokenCacheDir.STATS)
        if not os.path.exists(sp):
            raise CheckFailed(f"{split}: {ctx.rel(sp)} missing")
        st = read_json(sp)
        where = f"{split}/{TokenCacheDir.STATS}"
        eq(st.get("total_tokens"), tokens, f"{where} total_tokens vs NumPy recount")
        eq(st.get("total_docs"), docs_n, f"{where} total_docs vs NumPy recount")
        eq(st.get("total_bytes"), sum(s.get("bytes", 0) for s in led["shards"]),
            f"{where} total_bytes vs ledger shard bytes")
        eq(splits[split].get("tokens"), tokens, f"{split}: result tokens vs NumPy recount")
        eq(splits[split].get("docs"), docs_n, f"{split}: result docs vs NumPy recount")
        total += tokens
    ctx.src_info(src, tokens=total)
    ctx.stage_info(name, rows=sum(int(s.get("docs", 0)) for s in splits.values()), tokens=total)
    return f"{total} tokens recounted"


def _recount_split(split: str, d: str, led: dict, vocab: int | None) -> tuple[int, int]:
    """(tokens, documents) of one split's shards, each shard's offsets and ids checked on the way."""
    tokens = docs_n = 0
    for sh in led["shards"]:
        t = np.load(os.path.join(d, sh["tokens_file"]), mmap_mode="r")
        o = np.load(os.path.join(d, sh["offsets_file"]), mmap_mode="r")
        where = f"{split}/{sh['offsets_file']}"
        if len(o) == 0 or o[0] != 0 or int(o[-1]) != len(t) or (len(o) > 1 and np.any(np.diff(o) < 0)):
            raise CheckFailed(f"{where}: offsets do not describe the token array")
        if vocab and len(t) and int(t.max()) >= vocab:
            raise CheckFailed(f"{split}/{sh['tokens_file']}: token id {int(t.max())} >= vocab {vocab}")
        eq(len(t), sh.get("tokens"), f"{where}: token array length vs ledger shard tokens")
        tokens += len(t)
        docs_n += len(o) - 1
    return tokens, docs_n


def _tokenize_envelope(ctx: RunContext, res: dict, splits: dict) -> str:
    n = sum(int(s.get("docs", 0)) for s in splits.values()) + int(res.get("bad_records", 0))
    f = frac(int(res.get("bad_records", 0)), n)
    if not within(f, ctx.env.tokenize_bad_fraction):
        raise CheckFailed(f"bad record fraction {f:.4f} outside tokenize_bad_fraction "
                          f"{fmt_range(ctx.env.tokenize_bad_fraction)}")
    return f"bad records {f:.4f}"


def _tokenize_checksums(ctx: RunContext, name: str, splits: dict, ledgers: dict[str, dict]) -> str:
    from datakit.tokenize.cache import verify_checksums

    problems = [f"{split}/{p}" for split, led in ledgers.items()
                for p in verify_checksums(ctx.path(name, splits[split]["path"]), led)]
    if problems:
        raise CheckFailed("; ".join(problems[:3]))
    return f"{sum(len(led['shards']) for led in ledgers.values())} shards match their ledger checksums"


@with_outputs_check
def check_train(ctx: RunContext, ref: PlanStep, _src: None) -> None:
    name, res = ref.name, ctx.res(ref.name)
    points: list[tuple[int, float]] = []

    def metrics() -> str:
        p = ctx.path(name, TrainDir.METRICS)
        if not os.path.exists(p):
            raise CheckFailed(f"{ctx.rel(p)} missing")
        evals = []
        with open(p, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise CheckFailed(f"{TrainDir.METRICS}:{lineno}: malformed JSON ({e.msg})") from None
                if rec.get("kind") == "train" and "loss" in rec:
                    loss = rec["loss"]
                    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
                        raise CheckFailed(f"{TrainDir.METRICS}:{lineno}: loss {loss!r} at step {rec.get('step')}")
                    points.append((int(rec["step"]), float(loss)))
                elif rec.get("kind") == "eval" and isinstance(rec.get("loss"), (int, float)):
                    evals.append((int(rec.get("step", 0)), float(rec["loss"])))
        if len(points) < 2:
            raise CheckFailed(f"{len(points)} train loss point(s) logged; need at least 2 to see a trend")
        want = (ctx.artifacts[name].get("config") or {}).get("train", {}).get("steps", res.get("steps"))
        if res.get("completed") is not True:
            raise CheckFailed("the result says training did not complete")
        eq(points[-1][0], want, "last logged step vs configured steps")
        ctx.summary["loss"].update(points=[[s, round(v, 5)] for s, v in points], first=points[0][1],
                                    last=points[-1][1], eval=[[s, round(v, 5)] for s, v in evals],
                                    steps=want)
        return f"{len(points)} loss points up to step {points[-1][0]}"

    if not ctx.check(name, "metrics", metrics, breaks=True):
        return

    def loss() -> str:
        (s0, first), (s1, last) = points[0], points[-1]
        need = first * (1 - ctx.env.min_loss_drop)
        if not last < need:
            raise CheckFailed(f"loss did not decrease enough: step {s0} {first:.4f} -> step {s1} {last:.4f} "
                              f"(need < {need:.4f}, min_loss_drop {ctx.env.min_loss_drop:g})")
        return f"step {s0} {first:.4f} -> step {s1} {last:.4f} ({(1 - last / first):.1%} lower)"

    ctx.check(name, "loss", loss)
