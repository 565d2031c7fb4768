"""The tokenizer stage: copy the manifest's tokenizer.json, or train a deterministic byte-level BPE on the
sources' current documents. A given file enters the identity by content (or by URL when remote).

A trained tokenizer is pinned under the prefix (datakit.tokenize.pin): later runs with the same training
settings use the pinned tokenizer, as if the manifest gave it as a file, instead of training on changed
data, so a data change does not give every token cache a new tokenizer. The run that trained it keeps
the training step itself (its identity is unchanged, so nothing downstream rebuilds); any other run gets
a copy step whose identity is the pinned tokenizer's sha256. ``tokenize: {retrain: true}`` trains on the
current data and moves the pin to the result; a training already built for exactly these data and
settings is reused as it is and moves no pin. The accepted difference from a from-scratch build is the
pin module's: a fresh prefix trains on the final data."""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from functools import partial

from datakit.core.layout import TOKENIZER_FILE, TokenCacheDir
from datakit.core.results import TokenizerResult
from datakit.manifest import Section
from datakit.steps import Step, StepContext
from datakit.tokenize.config import TokenizeConfig
from datakit.tokenize.pin import Pin, describe, older_pin, pin_name, read_pin, superseded

from .contract import DOCUMENTS, TOKENIZER, Graph, Stage, step_identity

VERSION = "3"  # 2: merges learned by rustbpe, not HF's BpeTrainer; 3: split by byte_level.SPLIT_PATTERN
STEP = "tokenizer"
log = logging.getLogger(__name__)


def _copy(ctx: StepContext, given: str) -> dict:
    from datakit.core.fsio import atomic_write_bytes, open_read
    from datakit.tokenize.tokenizer import load_tokenizer

    with open_read(given) as f:
        data = f.read()
    atomic_write_bytes(TokenCacheDir(ctx.output).tokenizer, data)
    _, ident = load_tokenizer(TokenCacheDir(ctx.output).tokenizer)
    return TokenizerResult(tokenizer=TOKENIZER_FILE, identity=dataclasses.asdict(ident)).to_dict()


def _train(ctx: StepContext, documents: tuple[str, ...], cfg: TokenizeConfig,
           older: tuple[str, Pin] | None) -> dict:
    """Train and pin; ``older``: an earlier trainer's pin of these settings the plan found, which this
    training supersedes (said as a warning)."""
    from datakit.core.fsio import read_bytes
    from datakit.tokenize.pin import write_pin
    from datakit.tokenize.tokenizer import train_tokenizer

    if older is not None:
        log.warning("tokenizer: %s", superseded(older, VERSION))
    prefix = posixpath.dirname(ctx.output.rstrip("/"))

    result = train_tokenizer([ctx.deps[d].output for d in documents], ctx.output, vocab_size=cfg.vocab_size,
                             max_bytes=cfg.train_tokenizer_bytes, seed=cfg.seed)
    result.pop("path", None)  # the record names files relative to the step dir, as the copy does
    write_pin(prefix, pin_name(cfg, VERSION), read_bytes(TokenCacheDir(ctx.output).tokenizer), ctx.step.dirname,
              replace=cfg.retrain)
    return TokenizerResult.written({"tokenizer": TOKENIZER_FILE, **result})


def build(graph: Graph) -> None:
    cfg: TokenizeConfig = graph.config(STAGE)
    if cfg.tokenizer:
        graph.tokenizer = graph.add(Step(STEP, partial(_copy, given=cfg.tokenizer),
                                         step_identity(cfg, ("tokenizer",)),
                                         version=VERSION, stage=STAGE.name))
        return
    names = sorted(graph.documents)
    docs = tuple(graph.documents[n] for n in names)
    config = step_identity(cfg, ("vocab_size", "train_tokenizer_bytes", "seed"))
    pin = None if cfg.retrain else read_pin(graph.prefix, pin_name(cfg, VERSION))
    older = older_pin(graph.prefix, cfg, VERSION) if pin is None and not cfg.retrain else None
    graph.notes[STEP] = describe(pin, cfg.retrain, older, VERSION)
    train = Step(STEP, partial(_train, documents=tuple(d.name for d in docs), cfg=cfg, older=older), config,
                 deps=docs, version=VERSION, stage=STAGE.name)
    if pin is None or pin.step == train.dirname:
        graph.tokenizer = graph.add(train)
        return
    # As if the manifest gave the pinned file: the same identity (its content), the same copy.
    graph.tokenizer = graph.add(Step(STEP, partial(_copy, given=pin.path), {"tokenizer": {"sha256": pin.sha256}},
                                     version=VERSION, stage=STAGE.name))


STAGE = Stage(name="tokenizer", version=VERSION, build=build, section=Section("tokenize", TokenizeConfig),
              consumes=(DOCUMENTS,), produces=(TOKENIZER,),
              code=("datakit.tokenize.tokenizer", "datakit.tokenize.pin", "datakit.stages.tokenizer"),
              ferry_check="datakit.ferry.checks_tokens:check_tokenizer")
