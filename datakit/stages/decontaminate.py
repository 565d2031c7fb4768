"""The decontaminate stage: documents sharing long n-grams with a benchmark's test items are marked, per
benchmark and per source, in attribute files consolidate applies. Benchmark files enter the identity by
content (sha256), never by path."""

from __future__ import annotations

from functools import partial

from datakit.core.fsio import sha256_file
from datakit.dedup.decontaminate import DecontamConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, Graph, Stage, counters_only
from .dedup_common import document_refs, documents_of

VERSION = "1"


def _decontaminate(ctx: StepContext, documents: dict[str, str], priority: dict[str, int],
                   cfg: DecontamConfig) -> dict:
    from datakit.dedup.decontaminate import decontaminate

    res = decontaminate(document_refs(ctx, documents, priority), cfg.benchmarks, ctx.output, cfg, ctx.exec_config)
    return counters_only(res.to_dict())


def build(graph: Graph) -> None:
    cfg: DecontamConfig = graph.config(STAGE)
    if not cfg.benchmarks:
        return
    benches = [{"name": b.name, "text_fields": list(b.text_fields), "sha256": sha256_file(b.path),
                **({"id_field": b.id_field} if b.id_field else {}), **({"format": b.format} if b.format else {})}
               for b in cfg.benchmarks]
    docs, priority, deps = documents_of(graph)
    step = Step("decontaminate", partial(_decontaminate, documents=docs, priority=priority, cfg=cfg),
                {"benchmarks": benches, "ngram": cfg.ngram}, deps=deps, version=VERSION, stage=STAGE.name)
    graph.attributes.append(graph.add(step))


STAGE = Stage(name="decontaminate", version=VERSION, build=build,
              section=Section("decontaminate", DecontamConfig), consumes=(DOCUMENTS,), produces=(ATTRIBUTES,),
              code=("datakit.dedup.decontaminate", "datakit.dedup.shingles", "datakit.dedup.layout",
                    "datakit.stages.decontaminate", "datakit.stages.dedup_common"),
              checks="datakit.ferry.checks_data:check_decontaminate")
