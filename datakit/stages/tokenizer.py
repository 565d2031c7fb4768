"""The tokenizer stage: copy the manifest's tokenizer.json, or train a deterministic byte-level BPE on the
sources' current documents. A given file enters the identity by content (or by URL when remote)."""

from __future__ import annotations

import dataclasses
from functools import partial

from datakit.core.layout import TOKENIZER_FILE, TokenCacheDir
from datakit.core.results import TokenizerResult
from datakit.manifest import Section
from datakit.steps import Step, StepContext
from datakit.tokenize.config import TokenizeConfig

from .contract import DOCUMENTS, TOKENIZER, Graph, Stage, step_identity

VERSION = "1"


def _copy(ctx: StepContext, given: str) -> dict:
    from datakit.core.fsio import atomic_write_bytes, open_read
    from datakit.tokenize.tokenizer import load_tokenizer

    with open_read(given) as f:
        data = f.read()
    atomic_write_bytes(TokenCacheDir(ctx.output).tokenizer, data)
    _, ident = load_tokenizer(TokenCacheDir(ctx.output).tokenizer)
    return TokenizerResult(tokenizer=TOKENIZER_FILE, identity=dataclasses.asdict(ident)).to_dict()


def _train(ctx: StepContext, documents: tuple[str, ...], cfg: TokenizeConfig) -> dict:
    from datakit.tokenize.tokenizer import train_tokenizer

    result = train_tokenizer([ctx.deps[d].output for d in documents], ctx.output, vocab_size=cfg.vocab_size,
                             max_bytes=cfg.train_tokenizer_bytes, seed=cfg.seed)
    result.pop("path", None)  # the record names files relative to the step dir, as the copy does
    return TokenizerResult.written({"tokenizer": TOKENIZER_FILE, **result})


def build(graph: Graph) -> None:
    cfg: TokenizeConfig = graph.config(STAGE)
    if cfg.tokenizer:
        graph.tokenizer = graph.add(Step("tokenizer", partial(_copy, given=cfg.tokenizer),
                                         step_identity(cfg, ("tokenizer",)),
                                         version=VERSION, stage=STAGE.name))
        return
    names = sorted(graph.documents)
    docs = tuple(graph.documents[n] for n in names)
    config = step_identity(cfg, ("vocab_size", "train_tokenizer_bytes", "seed"))
    graph.tokenizer = graph.add(Step("tokenizer", partial(_train, documents=tuple(d.name for d in docs), cfg=cfg),
                                     config, deps=docs, version=VERSION, stage=STAGE.name))


STAGE = Stage(name="tokenizer", version=VERSION, build=build, section=Section("tokenize", TokenizeConfig),
              consumes=(DOCUMENTS,), produces=(TOKENIZER,),
              code=("datakit.tokenize.tokenizer", "datakit.stages.tokenizer"),
              ferry_check="datakit.ferry.checks_tokens:check_tokenizer")
