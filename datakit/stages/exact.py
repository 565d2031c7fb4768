"""The exact stage: the same document (same content id) in several sources is kept once, the copy of
the earliest source in the manifest; the others are marked in attribute files consolidate applies."""

from __future__ import annotations

from functools import partial

from datakit.core.results import AttributesResult
from datakit.dedup.config import DedupConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, Graph, Stage, counters_only
from .dedup_common import document_refs, documents_of, require_one_row_per_id

VERSION = "1"


def _exact(ctx: StepContext, documents: dict[str, str], priority: dict[str, int]) -> dict:
    from datakit.dedup.exact import exact_dups
    from datakit.dedup.keyed import Reuse
    from datakit.steps import reuse

    # The state's settings hold only the stage's version: another source or priority still finds the
    # earlier build's state (exact_incremental.py checks the sources' relative order).
    res = exact_dups(document_refs(ctx, documents, priority), ctx.output, ctx.exec_config,
                     reuse_from=Reuse(("exact-state", VERSION), reuse.load(ctx.earlier)))
    return AttributesResult.written(counters_only(res.to_dict()))


def build(graph: Graph) -> None:
    cfg: DedupConfig = graph.config(STAGE)
    if not cfg.exact:
        return
    docs, priority, deps = documents_of(graph)
    step = Step("exact-dedup", partial(_exact, documents=docs, priority=priority), {"priority": graph.source_names},
                deps=deps, version=VERSION, stage=STAGE.name)
    graph.attributes.append(graph.add(step))


STAGE = Stage(name="exact", version=VERSION, build=build, refuse=require_one_row_per_id,
              section=Section("dedup", DedupConfig),
              consumes=(DOCUMENTS,), produces=(ATTRIBUTES,),
              code=("datakit.dedup.exact", "datakit.dedup.exact_incremental", "datakit.dedup.key_index",
                    "datakit.dedup.keyed", "datakit.dedup.hashing", "datakit.dedup.batches", "datakit.dedup.layout",
                    "datakit.stages.exact", "datakit.stages.dedup_common"),
              ferry_check="datakit.ferry.checks_data:check_exact")
