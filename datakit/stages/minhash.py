"""The minhash stage: every source's MinHash signatures and LSH band keys (minhash-<source>), from which
fuzzy dedup (stages/fuzzy.py) takes its candidate pairs.

A stage of its own, not a step kind of fuzzy dedup's, so that it has its own version: a change to which
near duplicates fuzzy dedup keeps or how it marks them (fuzzy's VERSION) leaves every source's
signatures as they are, and a later build reuses them instead of reading and shingling every document
again (a fifth of the incremental benchmark's fresh build). Its own code's changes are pinned by its own
lock entry; fuzzy's code includes the shingling too (verification re-derives the same shingle sets), so
a shingling change bumps both."""

from __future__ import annotations

from functools import partial

from datakit.core.results import SignaturesResult
from datakit.dedup.config import DedupConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import DOCUMENTS, SIGNATURES, Graph, Stage, counters_only, step_identity
from .dedup_common import documents_of, own_reuse

# "4": the version these steps had while they belonged to the fuzzy stage (its VERSION 4), so builds
# made then are still theirs.
VERSION = "4"
# The `dedup:` keys a minhash step's output depends on (bands/rows are derived from threshold when given).
MINHASH_KEYS = ("ngram", "ngram_unit", "num_perms", "bands", "rows", "threshold", "seed", "max_text_chars")


def _minhash(ctx: StepContext, source: str, documents: str, cfg: DedupConfig) -> dict:
    from datakit.dedup.minhash import minhash_source

    res = minhash_source(source, ctx.deps[documents].output, ctx.output, cfg, ctx.exec_config,
                         reuse_from=own_reuse(ctx))
    return SignaturesResult.written(counters_only(res.to_dict()))


def build(graph: Graph) -> None:
    cfg: DedupConfig = graph.config(STAGE)
    if not cfg.fuzzy:
        return
    docs, _, _ = documents_of(graph)
    for n in graph.source_names:
        step = Step(f"minhash-{n}", partial(_minhash, source=n, documents=docs[n], cfg=cfg),
                    step_identity(cfg, MINHASH_KEYS), deps=(graph.documents[n],), version=VERSION,
                    stage=STAGE.name, source=n)
        graph.signatures[n] = graph.add(step)


STAGE = Stage(name="minhash", version=VERSION, build=build, section=Section("dedup", DedupConfig),
              consumes=(DOCUMENTS,), produces=(SIGNATURES,),
              code=("datakit.dedup.minhash", "datakit.dedup.shingles", "datakit.dedup._unicode_categories",
                    "datakit.dedup.hashing", "datakit.dedup.keyed", "datakit.dedup.layout",
                    "datakit.dedup.lsh_params", "datakit.dedup.config",
                    "datakit.stages.minhash", "datakit.stages.dedup_common"),
              ferry_check="datakit.ferry.checks_data:check_minhash")
