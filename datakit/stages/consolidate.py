"""The consolidate stage: each source's documents minus everything the attribute steps marked (exact and
fuzzy duplicates, contamination), with every removed document listed in outputs/removed/ and its reason;
documents whose benchmark says `cut` lose only the matched spans and take the id of their new text."""

from __future__ import annotations

from functools import partial

from datakit.core.results import DocumentsResult
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, Graph, Stage, counters_only, document_counters

# The removal reasons of the run summary, per kind of mark (the reason recorded in outputs/removed/), in
# the order the summary lists them.
_REASONS = {"exact": "exact dups", "fuzzy": "fuzzy dups", "decontaminate": "contaminated"}

VERSION = "4"


def _consolidate(ctx: StepContext, source: str, documents: str, attributes: tuple[str, ...]) -> dict:
    from datakit.dedup.consolidate import Reuse, consolidate
    from datakit.steps import reuse

    settings = (ctx.step.name, ctx.step.version, ctx.step.config)
    res = consolidate(source, ctx.deps[documents].output, [ctx.deps[a].output for a in attributes], ctx.output,
                      ctx.exec_config, reuse_from=Reuse(settings, reuse.load(ctx.earlier)))
    out = counters_only(res.to_dict())
    c = out["counters"]
    removed = {label: c.get(f"removed_{kind}", 0) for kind, label in _REASONS.items()}
    out["counters"] = {**c, **document_counters(c["docs_in"], c["docs_out"], removed)}
    return DocumentsResult.written(out)


def build(graph: Graph) -> None:
    attrs = tuple(graph.attributes)
    if not attrs:
        return
    names = tuple(a.name for a in attrs)
    for n in graph.source_names:
        docs = graph.documents[n]
        step = Step(f"consolidate-{n}", partial(_consolidate, source=n, documents=docs.name, attributes=names),
                    {"attributes": list(names)}, deps=(docs, *attrs), version=VERSION, stage=STAGE.name, source=n)
        graph.advance(n, step)


STAGE = Stage(name="consolidate", version=VERSION, build=build, consumes=(DOCUMENTS, ATTRIBUTES),
              produces=(DOCUMENTS,), code=("datakit.dedup.consolidate", "datakit.core.documents",
                                           "datakit.stages.consolidate"),
              ferry_check="datakit.ferry.checks_data:check_consolidate", reasons=tuple(_REASONS.values()))
