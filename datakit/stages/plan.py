"""The published plan: the step graph of one manifest as data, written to ``<prefix>/plan.json``.

`build_plan` (datakit.pipeline) walks the registry into a `Graph`; `plan_of` turns that graph into a
`Plan`: every step with its stage, source, kind of output and dependencies; per source (or mixture
component) the chain of steps that wrote its documents, in order; the mixture components with their
weights and token caches; and the named products (files, attributes, tokenizer, token caches, mixture,
model). The run writes it on every non-dry run; `read_plan` loads it back.

Why a record rather than step names: the report, the ferry, `mix show`, `status` and `gc` used to guess
which step made which documents from stage and step names, so a new stage meant editing each of them.
They now ask the plan (`plan.chain(source)`, `plan.tokens`, `plan.of_kind(ATTRIBUTES)`), and only the
stages know their names. This module is the plan reader: it is the one place outside the stage modules
that knows how a step relates to the stage that built it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from datakit.core.fsio import atomic_write_bytes, exists, read_bytes, read_if_exists
from datakit.core.layout import PLAN_FILE, join
from datakit.steps import Step

from .contract import ATTRIBUTES, DOCUMENTS, FILES, MIXTURE, MODEL, SIGNATURES, TOKENIZER, TOKENS, Graph

FORMAT = 1
WARN_REMOVED_SHARE = 0.8  # a documents step removing more of a source's documents is warned about


@dataclass(frozen=True)
class PlanStep:
    """One planned step: where it lives (``<name>-<identity>``), what it reads, who built it and what
    kind of data it produces (a KINDS member; None for a step internal to its stage)."""

    name: str
    identity: str
    stage: str = ""
    source: str | None = None
    kind: str | None = None
    deps: tuple[str, ...] = ()

    @property
    def dirname(self) -> str:
        return f"{self.name}-{self.identity}"


@dataclass(frozen=True)
class Component:
    """One training-mixture component (a source, or a part of one): its weight and its token cache step."""

    name: str
    weight: float
    tokens: str | None = None


@dataclass(frozen=True)
class Plan:
    """The graph of one manifest as data (module docstring). ``runnable`` holds the live Steps when the
    plan was just built (never serialized: a plan read from disk has none)."""

    sources: tuple[str, ...]
    steps: tuple[PlanStep, ...]
    chains: dict[str, tuple[str, ...]] = field(default_factory=dict)
    components: tuple[Component, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    attributes: tuple[str, ...] = ()
    tokenizer: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    mixture: str | None = None
    model: str | None = None
    reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)  # stage -> its removal reasons, in order
    manifest: str | None = None  # the manifest file it was built from (None: built from a dict)
    warn_removed_share: dict[str, float] = field(default_factory=dict)  # step -> its limit, when not the default
    # step name -> one line its stage says about it as planned (which tokenizer is pinned): the state of
    # the prefix when the plan was made, not the graph, so neither compared nor written to plan.json (a
    # rerun that builds nothing rewrites nothing); `datakit run --dry-run` prints them
    notes: dict[str, str] = field(default_factory=dict, compare=False)
    runnable: tuple[Step, ...] = field(default=(), compare=False, repr=False)

    def step(self, name: str) -> PlanStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def of_kind(self, kind: str) -> list[PlanStep]:
        """The steps producing ``kind``, in plan order."""
        return [s for s in self.steps if s.kind == kind]

    def chain(self, source: str) -> tuple[str, ...]:
        """The steps that wrote ``source``'s documents, first (normalize) to last (what is tokenized)."""
        return self.chains.get(source, ())

    def documents(self, source: str) -> str | None:
        """The step holding ``source``'s final documents (what its token cache was built from)."""
        chain = self.chain(source)
        return chain[-1] if chain else None

    def input_of(self, name: str) -> str | None:
        """The documents step a step read: its dependency in the same chain as itself."""
        for chain in self.chains.values():
            if name in chain and chain.index(name):
                return chain[chain.index(name) - 1]
        return None

    def read_by_attributes(self, source: str) -> str | None:
        """The step of ``source``'s chain that the attribute steps (corpus-level dedup) read; without
        any, the chain's last step."""
        readers = {d for a in self.attributes for d in (self.step(a).deps if self.step(a) else ())}
        chain = self.chain(source)
        return next((n for n in reversed(chain) if n in readers), chain[-1] if chain else None)

    def removed_share_limit(self, name: str) -> float:
        """The share of its input documents step ``name`` may remove before the summary warns: its
        stage's setting from the manifest (``quality.warn_removed_share``), else WARN_REMOVED_SHARE."""
        return self.warn_removed_share.get(name, WARN_REMOVED_SHARE)

    def weights(self) -> dict[str, float]:
        return {c.name: c.weight for c in self.components}

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "sources": list(self.sources),
                "steps": [{"name": s.name, "identity": s.identity, "stage": s.stage, "source": s.source,
                           "kind": s.kind, "deps": list(s.deps)} for s in self.steps],
                "chains": {k: list(v) for k, v in self.chains.items()},
                "components": [{"name": c.name, "weight": c.weight, "tokens": c.tokens} for c in self.components],
                "files": dict(self.files), "attributes": list(self.attributes), "tokenizer": self.tokenizer,
                "tokens": dict(self.tokens), "mixture": self.mixture, "model": self.model,
                "reasons": {k: list(v) for k, v in self.reasons.items()}, "manifest": self.manifest,
                "warn_removed_share": dict(self.warn_removed_share)}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = PLAN_FILE) -> "Plan":
        if d.get("format") != FORMAT:
            raise ValueError(f"{where}: unsupported plan format {d.get('format')!r} (expected {FORMAT})")
        try:
            return cls(
                sources=tuple(d["sources"]),
                steps=tuple(PlanStep(s["name"], s["identity"], s.get("stage", ""), s.get("source"), s.get("kind"),
                                     tuple(s.get("deps", ()))) for s in d["steps"]),
                chains={k: tuple(v) for k, v in (d.get("chains") or {}).items()},
                components=tuple(Component(c["name"], float(c["weight"]), c.get("tokens"))
                                 for c in d.get("components", ())),
                files=dict(d.get("files") or {}), attributes=tuple(d.get("attributes", ())),
                tokenizer=d.get("tokenizer"), tokens=dict(d.get("tokens") or {}), mixture=d.get("mixture"),
                model=d.get("model"), reasons={k: tuple(v) for k, v in (d.get("reasons") or {}).items()},
                manifest=d.get("manifest"), warn_removed_share=dict(d.get("warn_removed_share") or {}))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: malformed plan ({type(e).__name__}: {e})") from None


def _kinds(graph: Graph) -> dict[str, str]:
    """Step name -> the kind of data the graph holds it as (a later role wins: none overlap today)."""
    kinds = {s.name: FILES for s in graph.files.values()}
    kinds.update({s.name: DOCUMENTS for chain in graph.chains.values() for s in chain})
    kinds.update({s.name: SIGNATURES for s in graph.signatures.values()})
    kinds.update({s.name: ATTRIBUTES for s in graph.attributes})
    kinds.update({s.name: TOKENS for s in graph.tokens.values()})
    for kind, step in ((TOKENIZER, graph.tokenizer), (MIXTURE, graph.mixture), (MODEL, graph.model)):
        if step is not None:
            kinds[step.name] = kind
    return kinds


def _name(step: Step | None) -> str | None:
    return step.name if step is not None else None


def plan_of(graph: Graph, reasons: dict[str, tuple[str, ...]] | None = None) -> Plan:
    """The graph a walk of the registry built, as a Plan (steps in the order they were added, which is
    a dependency order); ``reasons``: each stage's removal reasons in the order it applies them."""
    kinds = _kinds(graph)
    steps = tuple(PlanStep(s.name, s.identity, s.stage, s.source, kinds.get(s.name), tuple(d.name for d in s.deps))
                  for s in graph.steps)
    components = tuple(Component(n, float(w), _name(graph.tokens.get(n))) for n, w in graph.weights.items())
    return Plan(sources=tuple(graph.source_names), steps=steps,
                chains={k: tuple(s.name for s in v) for k, v in graph.chains.items()}, components=components,
                files={k: s.name for k, s in graph.files.items()}, attributes=tuple(s.name for s in graph.attributes),
                tokenizer=_name(graph.tokenizer), tokens={k: s.name for k, s in graph.tokens.items()},
                mixture=_name(graph.mixture), model=_name(graph.model), reasons=dict(reasons or {}),
                manifest=graph.manifest.path, warn_removed_share=dict(graph.warn_removed_share),
                notes=dict(graph.notes), runnable=tuple(graph.steps))


def plan_path(prefix: str) -> str:
    return join(prefix, PLAN_FILE)


def write_plan(prefix: str, plan: Plan) -> None:
    """``<prefix>/plan.json``, written whole or not at all (atomic), and only when it changes: a rerun
    that reuses every step rewrites nothing."""
    data = json.dumps(plan.to_dict(), indent=1).encode()
    if read_if_exists(plan_path(prefix)) != data:
        atomic_write_bytes(plan_path(prefix), data)


def read_plan(prefix: str) -> Plan | None:
    """The plan published under ``prefix``; None when there is none, ValueError when it is unreadable."""
    path = plan_path(prefix)
    if not exists(path):
        return None
    try:
        d = json.loads(read_bytes(path))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable plan ({e})") from None
    return Plan.from_dict(d, path)
