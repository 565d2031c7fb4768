"""What the corpus-level dedup stages (exact, fuzzy, decontaminate) share: their inputs, in rank order."""

from __future__ import annotations

from datakit.dedup.keyed import Reuse
from datakit.manifest import Manifest
from datakit.steps import Step, StepContext, reuse

from .contract import Graph


def require_one_row_per_id(m: Manifest) -> None:
    """Corpus-level dedup marks documents by id, so a source that keeps duplicate ids cannot take part."""
    dedup = m.sections.get("dedup")
    if dedup is None or not (dedup.exact or dedup.fuzzy):
        return
    for i, spec in enumerate(m.sources):
        if spec.dedup == "none":
            raise ValueError(
                f"{m.path or '<manifest>'}: sources[{i}].dedup: 'none' keeps duplicate ids in {spec.name!r}, but "
                "the corpus-level dedup steps (dedup.exact / dedup.fuzzy) mark documents by id and need one row "
                "per id; remove `dedup: none`, or set dedup: {exact: false, fuzzy: false} to keep every copy"
            )


def document_refs(ctx: StepContext, documents: dict[str, str], priority: dict[str, int]) -> list[tuple[str, str, int]]:
    """(source, its documents dir, its priority) for every source, as the dedup rooms take them."""
    return [(n, ctx.deps[step].output, priority[n]) for n, step in documents.items()]


def documents_of(graph: Graph) -> tuple[dict[str, str], dict[str, int], tuple[Step, ...]]:
    """Step names of every source's current documents, the sources' priorities, and the steps as deps."""
    names = graph.source_names
    docs = {n: graph.documents[n].name for n in names}
    priority = {s.name: s.priority for s in graph.manifest.sources}
    return docs, priority, tuple(graph.documents[n] for n in names)


def own_reuse(ctx: StepContext) -> Reuse:
    """Per-file reuse from this step's earlier build, its units keyed by the step's own name, version
    and config (steps/reuse.py)."""
    return Reuse((ctx.step.name, ctx.step.version, ctx.step.config), reuse.load(ctx.earlier))
