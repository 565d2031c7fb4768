"""The decontaminate stage: documents holding a substantial part of a benchmark's test item are flagged, per
benchmark and per source, in attribute files consolidate applies (remove, cut the spans, or annotate).
Benchmark files (and directories) enter the identity by content (sha256), never by path; every other
knob of the section and of each benchmark enters it as given (`step_identity`), so a new knob cannot be
left out."""

from __future__ import annotations

from functools import partial

from datakit.core.results import AttributesResult
from datakit.dedup.decontaminate import DecontamConfig
from datakit.manifest import Section
from datakit.steps import Step, StepContext

from .contract import ATTRIBUTES, DOCUMENTS, Graph, Stage, StageSummary, counters_only, step_identity
from .dedup_common import document_refs, documents_of

VERSION = "3"


def _decontaminate(ctx: StepContext, documents: dict[str, str], priority: dict[str, int],
                   cfg: DecontamConfig) -> dict:
    from datakit.dedup.decontaminate import decontaminate
    from datakit.dedup.keyed import Reuse
    from datakit.steps import reuse

    # A file's scan depends on its content and the benchmark table (which the room keys by its n-gram
    # hashes), not on the other sources or the flagging knobs: its key holds only the stage's version.
    res = decontaminate(document_refs(ctx, documents, priority), cfg.benchmarks, ctx.output, cfg, ctx.exec_config,
                        reuse_from=Reuse(("decontaminate-scan", VERSION), reuse.load(ctx.earlier)))
    return AttributesResult.written(counters_only(res.to_dict()))


def build(graph: Graph) -> None:
    cfg: DecontamConfig = graph.config(STAGE)
    if not cfg.benchmarks:
        return
    docs, priority, deps = documents_of(graph)
    step = Step("decontaminate", partial(_decontaminate, documents=docs, priority=priority, cfg=cfg),
                step_identity(cfg), deps=deps, version=VERSION, stage=STAGE.name)
    graph.attributes.append(graph.add(step))


def contamination(counters: dict[str, int]) -> dict[str, dict[str, int]]:
    """Documents flagged per benchmark and per source, from the step's ``contaminated/<source>/<benchmark>``
    counters."""
    out: dict[str, dict[str, int]] = {}
    for key, n in sorted(counters.items()):
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "contaminated":
            out.setdefault(parts[2], {})[parts[1]] = n
    return out


def summarize(counters: dict[str, int], result: dict) -> StageSummary:
    """The run summary's ``contamination`` section and one line per benchmark."""
    found = contamination(counters)
    lines = tuple(f"contamination: {bench}: {sum(per.values()):,} documents flagged "
                  f"({', '.join(f'{src} {n:,}' for src, n in per.items())})" for bench, per in found.items())
    return StageSummary({"contamination": found}, lines)


STAGE = Stage(name="decontaminate", version=VERSION, build=build, summarize=summarize,
              section=Section("decontaminate", DecontamConfig), consumes=(DOCUMENTS,), produces=(ATTRIBUTES,),
              code=("datakit.dedup.decontaminate", "datakit.dedup.keyed", "datakit.dedup.shingles", "datakit.dedup.layout",
                    "datakit.dedup.consolidate", "datakit.core.documents",
                    "datakit.stages.decontaminate", "datakit.stages.dedup_common"),
              ferry_check="datakit.ferry.checks_data:check_decontaminate")
