"""The fuzzy stage: LSH candidate pairs from the minhash stage's signatures (stages/minhash.py) and
true-Jaccard verification across sources (fuzzy-dups), marking every document with an earlier near-duplicate
(datakit/dedup/forest.py)."""

from __future__ import annotations

import textwrap
from functools import partial

from datakit.core.results import AttributesResult
from datakit.dedup.config import DedupConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, SIGNATURES, Graph, Stage, StageSummary, counters_only, step_identity
from .dedup_common import documents_of, require_one_row_per_id

# 3: a marks file's metadata no longer lists the sources (consolidate reuses it); 4: the keep rule is the
# forest of earliest near-duplicates (dedup/forest.py), not the connected components of all pairs; 5: the
# marks name each removed document's parent (the minhash steps, a stage of their own since, stay at 4)
VERSION = "5"


def _fuzzy(ctx: StepContext, documents: dict[str, str], minhash: dict[str, str], priority: dict[str, int],
           cfg: DedupConfig) -> dict:
    from datakit.dedup.fuzzy import FuzzySource, fuzzy_dups

    sources = [FuzzySource(n, ctx.deps[documents[n]].output, ctx.deps[minhash[n]].output, priority[n])
               for n in documents]
    # A pair's Jaccard depends on its two ids and the shingling (which names the cache), so the cache's
    # settings hold only the stage's version: another source or threshold still finds the pairs.
    from datakit.dedup.keyed import Reuse
    from datakit.steps import reuse

    res = fuzzy_dups(sources, ctx.output, cfg, ctx.exec_config,
                     reuse_from=Reuse(("fuzzy-pairs", VERSION), reuse.load(ctx.earlier)))
    return AttributesResult.written(counters_only(res.to_dict()))


def build(graph: Graph) -> None:
    cfg: DedupConfig = graph.config(STAGE)
    if not cfg.fuzzy:
        return
    docs, priority, deps = documents_of(graph)
    minhash = {n: graph.signatures[n] for n in graph.source_names}
    step = Step("fuzzy-dups", partial(_fuzzy, documents=docs, minhash={n: s.name for n, s in minhash.items()},
                                      priority=priority, cfg=cfg),
                {"priority": graph.source_names, **step_identity(cfg, ("verify", "verify_threshold"))},
                deps=deps + tuple(minhash.values()), version=VERSION, stage=STAGE.name)
    graph.attributes.append(graph.add(step))


COLLAPSE_FRACTION = 0.5  # a source that loses this share of its documents to fuzzy dedup is explained
COLLAPSE_MIN_DOCS = 10   # ... when it loses at least this many
SUMMARY_WIDTH = 90       # a warning's lines, so that `warning: ` + a line fits 100 columns


def _collapse_warning(source: str, docs: int, dups: int, largest: list[dict]) -> str:
    """Why a source collapsed: its share removed, its largest cluster with a sample, and the folding
    that makes texts differing only in digits (or case) one near-duplicate."""
    biggest = next((c for c in largest if source in c.get("members", {})), None)
    text = f"fuzzy dedup removed {dups / docs:.1%} of source {source} ({dups:,} of {docs:,} documents)"
    if biggest is not None:
        sample = " ".join(str(biggest.get("removed") or biggest.get("kept") or "").split())[:60]
        here = biggest["members"][source]
        text += (f"; its largest cluster has {biggest['size']:,} documents"
                 + (f" ({here:,} of them here)" if here != biggest["size"] else "") + f", e.g. {sample!r}")
    text += ("; shingles fold every digit to 0 (and ignore case), so texts that differ only in numbers are "
             "duplicates (runbooks/choosing-dedup-parameters.md)")
    return "\n  ".join(textwrap.wrap(text, SUMMARY_WIDTH, break_on_hyphens=False))


def summarize(counters: dict[str, int], result: dict) -> StageSummary:
    """The LSH parameters the run used (the report draws their S-curve), the largest clusters with
    samples (the report's cluster table), and a warning for every source that mostly collapsed."""
    params = result.get("params") or {}
    minhash = params.get("minhash") or {}
    lsh = {"bands": minhash.get("bands"), "rows": minhash.get("rows"), "verify": params.get("verify"),
           "verify_threshold": params.get("verify_threshold")}
    largest = result.get("largest") or []
    warnings = []
    for source in params.get("sources") or []:
        docs, dups = counters.get(f"docs/{source}", 0), counters.get(f"duplicates/{source}", 0)
        if docs and dups >= COLLAPSE_MIN_DOCS and dups >= COLLAPSE_FRACTION * docs:
            warnings.append(_collapse_warning(source, docs, dups, largest))
    return StageSummary({"lsh": lsh, "clusters": largest}, warnings=tuple(warnings))


STAGE = Stage(name="fuzzy", version=VERSION, build=build, refuse=require_one_row_per_id, summarize=summarize,
              section=Section("dedup", DedupConfig),
              consumes=(DOCUMENTS, SIGNATURES), produces=(ATTRIBUTES,),
              code=("datakit.dedup.minhash", "datakit.dedup.keyed", "datakit.dedup.fuzzy",
                    "datakit.dedup.fuzzy_core", "datakit.dedup.fuzzy_incremental", "datakit.dedup.forest",
                    "datakit.dedup.fuzzy_state",
                    "datakit.dedup.key_index", "datakit.dedup.pair_cache", "datakit.dedup.components",
                    "datakit.dedup.largest", "datakit.dedup.shingles", "datakit.dedup.lsh_params", "datakit.dedup.hashing",
                    "datakit.dedup.batches", "datakit.dedup.layout", "datakit.dedup.config",
                    "datakit.stages.fuzzy", "datakit.stages.dedup_common"),
              ferry_check="datakit.ferry.checks_data:check_fuzzy")
