"""The tokenize stage: every source's current documents -> a token cache (train and validation splits),
resumable shard by shard, and rebuilt part by part: a part whose content and settings an earlier build
of the step tokenized is taken from it (tokenize_step's docstring). Its version is the token cache
writer's own (`tokenize_step.VERSION`), which the cache's ledger records too: one number, in one place."""

from __future__ import annotations

from functools import partial

from datakit.core.layout import TOKENIZER_FILE
from datakit.core.results import TokensResult
from datakit.manifest import Section
from datakit.steps import Step, StepContext
from datakit.tokenize.config import TokenizeConfig
from datakit.tokenize.tokenize_step import VERSION

from .contract import DOCUMENTS, TOKENIZER, TOKENS, Graph, Stage, counters_only, step_identity


def _tokenize(ctx: StepContext, source: str, documents: str, tokenizer: str, cfg: TokenizeConfig,
              text_lineage: str) -> dict:
    from datakit.tokenize.tokenize_step import tokenize_source

    res = tokenize_source(source, ctx.deps[documents].output, ctx.output, ctx.deps[tokenizer].path(TOKENIZER_FILE),
                          validation_fraction=cfg.validation_fraction, bos=cfg.bos, exec_config=ctx.exec_config,
                          engine=cfg.engine, engine_check_pieces=cfg.engine_check_pieces, earlier=ctx.earlier,
                          text_lineage=text_lineage)
    return TokensResult.written(counters_only(res.to_dict()))


def build(graph: Graph) -> None:
    cfg: TokenizeConfig = graph.config(STAGE)
    assert graph.tokenizer is not None, "the tokenizer stage runs before tokenize"
    for n, docs in list(graph.documents.items()):
        step = Step(f"tokenize-{n}", partial(_tokenize, source=n, documents=docs.name,
                                             tokenizer=graph.tokenizer.name, cfg=cfg,
                                             text_lineage=graph.text_lineage(n)),
                    step_identity(cfg, ("validation_fraction", "bos")),
                    deps=(docs, graph.tokenizer), version=VERSION, resumable=True, stage=STAGE.name, source=n)
        graph.tokens[n] = graph.add(step)


STAGE = Stage(name="tokenize", version=VERSION, build=build, section=Section("tokenize", TokenizeConfig),
              consumes=(DOCUMENTS, TOKENIZER), produces=(TOKENS,),
              code=("datakit.tokenize.tokenize_step", "datakit.tokenize.cache", "datakit.tokenize.encode",
                    "datakit.tokenize.engine", "datakit.tokenize.trim", "datakit.stages.tokenize"),
              ferry_check="datakit.ferry.checks_tokens:check_tokenize",
              version_source="datakit/tokenize/tokenize_step.py: VERSION")
