"""The stage contract: what every stage (built-in or user) declares, and the graph its steps join.

A stage is one module with one `STAGE = Stage(...)` value: its name and version, the config dataclass
that is both its manifest section and its runtime config, the kinds of data it consumes and produces,
the modules whose code determines its output (for the version lock), a function that adds its steps to
the graph, where its ferry check lives (`ferry_check`) and what manifests it refuses (`refuse`). `datakit.stages.registry` lists the stages in order;
`build_steps` walks that list. Adding a stage is one module plus one registry entry.

The graph carries, per source, the step whose output is that source's *current documents*: a stage that
rewrites documents (normalize, a user filter, consolidate) replaces the pointer, so every stage after it
reads its output without knowing who came before. That is how a user stage slots between normalize and
dedup, or between consolidate and tokenize, and the built-in stages downstream still find their input.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from datakit.core.fsio import is_local
# The kinds of data stages exchange (what `consumes` / `produces` name): one result type each.
from datakit.core.results import (ATTRIBUTES, DOCUMENTS, FILES, KINDS, MIXTURE, MODEL, SIGNATURES,  # noqa: F401
                                  TOKENIZER, TOKENS)
from datakit.core.listing import content_sha256
from datakit.manifest import Manifest, Section
from datakit.steps import Step
from datakit.steps.identity import compute_identity


@dataclass(frozen=True)
class StageSummary:
    """What a stage adds to the run's data summary for one of its built steps: top-level sections of the
    summary (``{"contamination": {...}}``), human lines and warnings, so a new stage needs no report edit."""

    sections: dict[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline (see the module docstring).

    name:     the stage's name; its steps are tagged with it (artifact.json "stage", the ferry plan).
    version:  bump it when the stage's output for the same input changes: it is part of every step
              identity, so a fix never serves a stale cache. `datakit/stages/versions.lock.json` pins
              the code fingerprint recorded for each version (`python -m datakit.stages.lock`).
    section:  the manifest section the stage reads (its config dataclass); two stages may share one
              (exact and fuzzy read `dedup:`; tokenizer and tokenize read `tokenize:`).
    consumes / produces: kinds of data, from KINDS.
    build:    ``build(graph)`` adds the stage's steps for the manifest (or nothing, when switched off).
    code:     dotted modules/packages whose source determines the output (the version lock hashes them).
    ferry_check: ``"module:function"`` of the ferry check run on each of its steps, ``fn(ctx, ref, source)``
              (a string, so the stages never import the ferry that sits above them).
    version_source: where a developer bumps `version`, when not `datakit/stages/<name>.py: VERSION`
              (the version lock's messages point there).
    refuse:   ``refuse(manifest)`` raising ValueError for a manifest the stage cannot run; every stage's
              refusal runs before any stage builds, so a refused manifest leaves nothing behind.
    summarize: ``summarize(counters, result)`` of one built step of the stage -> StageSummary, or None:
              the stage's own lines in the run summary (the report never names a stage).
    reasons:  the ``removed/<reason>`` reasons the stage reports, in the order it applies them: the run
              summary lists them in that order (reasons not named here follow, alphabetically), since
              artifact counters are stored sorted.
    """

    name: str
    version: str
    build: Callable[["Graph"], None]
    section: Section | None = None
    consumes: tuple[str, ...] = ()
    produces: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    ferry_check: str | None = None
    version_source: str | None = None
    refuse: Callable[[Manifest], None] | None = None
    summarize: Callable[[dict, dict], StageSummary | None] | None = None
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.consumes + self.produces) - set(KINDS))
        if unknown:
            raise ValueError(f"stage {self.name}: unknown data kinds {unknown}; known: {', '.join(KINDS)}")


@dataclass
class Graph:
    """The steps built so far for one manifest, and what each later stage reads.

    documents: source name -> the step whose output is that source's current documents. Stages move it
               with `advance` (and `split`), never by assignment, so `chains` records every step.
    chains: source (or mixture component) -> every step that wrote its documents, in order.
    signatures: source name -> its minhash step (the minhash stage), which fuzzy dedup reads.
    attributes: steps writing attribute files that consolidate applies (exact, fuzzy, decontaminate).
    weights: the training mixture's components (a source, or a part of one such as a quality tier) and
             their manifest weights. Starts as the sources' `weight:`; a stage that splits a source into
             components replaces its entry here and in `documents`, so tokenize and train follow.
    warn_removed_share: documents step -> the share of its input it may remove before the run summary
             warns, for a step whose stage has a setting for it (others: plan.WARN_REMOVED_SHARE).
    notes: what a stage wants said about one of its steps beyond why it runs (which tokenizer is pinned),
           carried by the built plan (not plan.json) and printed by `datakit run --dry-run`.
    keeps_ids: the steps that change a document's text but keep its id (PII redaction), registered by
           their stage with `keep_ids`: everywhere else an id is the content hash of its text.
    """

    manifest: Manifest
    prefix: str
    write_cache: bool = True  # False: read the input-fingerprint cache only (dry runs, status)
    steps: list[Step] = field(default_factory=list)
    files: dict[str, Step] = field(default_factory=dict)
    documents: dict[str, Step] = field(default_factory=dict)
    signatures: dict[str, Step] = field(default_factory=dict)
    attributes: list[Step] = field(default_factory=list)
    tokenizer: Step | None = None
    tokens: dict[str, Step] = field(default_factory=dict)
    model: Step | None = None
    mixture: Step | None = None
    weights: dict[str, float] = field(default_factory=dict)
    chains: dict[str, list[Step]] = field(default_factory=dict)
    warn_removed_share: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)  # step name -> one line the plan shows with it
    keeps_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.weights:
            self.weights = {s.name: s.weight for s in self.manifest.sources}

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def advance(self, source: str, step: Step) -> Step:
        """Add ``step`` as ``source``'s current documents (the next link of its chain)."""
        self.chains[source] = [*self.chains.get(source, []), step]
        self.documents[source] = self.add(step)
        return step

    def split(self, source: str, parts: dict[str, tuple[Step, float]]) -> None:
        """Replace ``source`` by mixture components, each (its documents step, its weight), each chain
        continuing the source's."""
        chain = self.chains.pop(source, [])
        del self.documents[source]
        self.weights.pop(source, None)
        for component, (step, weight) in parts.items():
            self.chains[component] = [*chain, step]
            self.documents[component] = self.add(step)
            self.weights[component] = weight

    def keep_ids(self, steps: Iterable[Step]) -> None:
        """Register steps that change texts but keep ids (see `text_lineage`)."""
        self.keeps_ids.update(s.name for s in steps)

    def text_lineage(self, source: str) -> str:
        """What decides the text of an id in ``source``'s current documents besides the id itself: the
        steps of its chain that change a text but keep its id, by name, version and config (a digest);
        "" when there are none, since an id is then the content hash of its text. Tokenize cuts a shard
        from an earlier one by ids alone only when this is what the earlier build had."""
        kept = [[s.name, s.version, s.config] for s in self.chains.get(source, []) if s.name in self.keeps_ids]
        if not kept:
            return ""
        return compute_identity("text-lineage", kept, "1", [])

    def config(self, stage: Stage) -> Any:
        """The stage's section of the manifest (its config object; None for an optional one left out)."""
        assert stage.section is not None, stage.name
        return self.manifest.sections[stage.section.key]

    @property
    def source_names(self) -> list[str]:
        return [s.name for s in self.manifest.sources]


# Per-language counters a document step may add to the schema below (the quality stage does, from its
# language ID): documents in and kept per language code, and removed per language and reason
# (``removed_lang/de/gopher_quality.min_stop_words``). Each document counts once in ``lang_in``, and in
# ``lang_out`` or under one ``removed_lang`` reason, so per language in = out + removed, as per step.
LANG_IN, LANG_OUT, REMOVED_LANG = "lang_in/", "lang_out/", "removed_lang/"
UNDETERMINED = "und"  # ISO 639's code for a document whose language was not determined


def document_counters(docs_in: int, docs_out: int, removed: dict[str, int]) -> dict[str, int]:
    """The one counter schema of a step that keeps or removes documents: ``docs_in``, ``docs_out`` and
    ``removed/<reason>`` per reason; the run summary's funnel and the ferry read only these."""
    return {"docs_in": int(docs_in), "docs_out": int(docs_out), **{f"removed/{r}": int(n) for r, n in removed.items()}}


def counters_only(result: dict) -> dict:
    """The runner records `result["counters"]` in the artifact; it takes flat str -> int only."""
    counters = result.get("counters") or {}
    result["counters"] = {k: int(v) for k, v in counters.items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return result


def step_identity(cfg: Any, keys: Sequence[str] | None = None) -> dict[str, Any]:
    """A config dataclass as a step identity: every field (or only ``keys``, for a step that reads part
    of its section) except those marked ``identity: False`` (knobs that never change the output, the
    manifest's ``given`` bookkeeping), nested configs alike, and every file input (a field marked
    ``path``: a list file, a benchmark, a given tokenizer, a labels file) by its content, so editing
    the file rebuilds and moving it does not. The one way every stage turns its config into the
    identity's config."""
    out: dict[str, Any] = {}
    wanted = None if keys is None else set(keys)
    for f in dataclasses.fields(cfg):
        if (wanted is not None and f.name not in wanted) or not f.metadata.get("identity", True):
            continue
        value = getattr(cfg, f.name)
        if f.metadata.get("path"):
            out[f.name] = _path_identity(value)
        elif dataclasses.is_dataclass(value):
            out[f.name] = step_identity(value)
        else:
            out[f.name] = _identity_value(value)
    return out


def _identity_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return step_identity(value)
    if isinstance(value, (list, tuple)):
        return [_identity_value(v) for v in value]
    if isinstance(value, frozenset):  # a set of keys (a config's `given`, where it decides the output)
        return sorted(value)
    if isinstance(value, dict):
        return {k: _identity_value(v) for k, v in value.items()}
    return value


def _path_identity(value: str | Sequence[str] | None) -> Any:
    """A file input by content: ``{"sha256": ...}`` of a local file or directory (a list of them for a
    list of paths); a remote URI stays itself (its content is keyed where it is fetched)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return [_path_identity(v) for v in value]
    if not is_local(value):
        return value
    try:
        return {"sha256": content_sha256(value)}
    except OSError as e:
        raise ValueError(f"{value}: cannot read this file ({e}); fix the path in the manifest") from None
