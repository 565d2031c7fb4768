"""The fuzzy stage: MinHash signatures per source (minhash-<source>), then LSH candidate pairs, true-Jaccard
verification and connected components across sources (fuzzy-dups), marking all but one per cluster."""

from __future__ import annotations

from functools import partial

from datakit.core.results import AttributesResult
from datakit.dedup.config import DedupConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, Graph, Stage, counters_only, step_identity
from .dedup_common import documents_of, require_one_row_per_id

VERSION = "2"
# The `dedup:` keys a minhash step's output depends on (bands/rows are derived from threshold when given).
MINHASH_KEYS = ("ngram", "ngram_unit", "num_perms", "bands", "rows", "threshold", "seed", "max_text_chars")


def _minhash(ctx: StepContext, source: str, documents: str, cfg: DedupConfig) -> dict:
    from datakit.dedup.minhash import minhash_source

    res = minhash_source(source, ctx.deps[documents].output, ctx.output, cfg, ctx.exec_config)
    return counters_only(res.to_dict())


def _fuzzy(ctx: StepContext, documents: dict[str, str], minhash: dict[str, str], priority: dict[str, int],
           cfg: DedupConfig) -> dict:
    from datakit.dedup.fuzzy import FuzzySource, fuzzy_dups

    sources = [FuzzySource(n, ctx.deps[documents[n]].output, ctx.deps[minhash[n]].output, priority[n])
               for n in documents]
    return AttributesResult.written(counters_only(fuzzy_dups(sources, ctx.output, cfg, ctx.exec_config).to_dict()))


def build(graph: Graph) -> None:
    cfg: DedupConfig = graph.config(STAGE)
    if not cfg.fuzzy:
        return
    docs, priority, deps = documents_of(graph)
    minhash: dict[str, Step] = {}
    for n in graph.source_names:
        step = Step(f"minhash-{n}", partial(_minhash, source=n, documents=docs[n], cfg=cfg),
                    step_identity(cfg, MINHASH_KEYS), deps=(graph.documents[n],), version=VERSION,
                    stage=STAGE.name, source=n)
        minhash[n] = graph.add(step)
    step = Step("fuzzy-dups", partial(_fuzzy, documents=docs, minhash={n: s.name for n, s in minhash.items()},
                                      priority=priority, cfg=cfg),
                {"priority": graph.source_names, **step_identity(cfg, ("verify", "verify_threshold"))},
                deps=deps + tuple(minhash.values()), version=VERSION, stage=STAGE.name)
    graph.attributes.append(graph.add(step))


STAGE = Stage(name="fuzzy", version=VERSION, build=build, refuse=require_one_row_per_id,
              section=Section("dedup", DedupConfig),
              consumes=(DOCUMENTS,), produces=(ATTRIBUTES,),
              code=("datakit.dedup.minhash", "datakit.dedup.fuzzy", "datakit.dedup.components",
                    "datakit.dedup.shingles", "datakit.dedup.lsh_params", "datakit.dedup.hashing",
                    "datakit.dedup.batches", "datakit.dedup.layout", "datakit.dedup.config",
                    "datakit.stages.fuzzy", "datakit.stages.dedup_common"),
              ferry_check="datakit.ferry.stage_checks:check_fuzzy_stage")
