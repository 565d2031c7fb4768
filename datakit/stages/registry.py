"""The ordered list of stages `build_steps` walks. Adding a stage: one module, one entry here.

The order is the data flow: each stage may read only what an earlier stage produced (a test checks
the `consumes` / `produces` declarations against this order).
"""

from __future__ import annotations

from datakit.manifest import Section

from . import (consolidate, decontaminate, download, exact, export, fuzzy, linededup, minhash, mixture, normalize,
               pii, quality, quality_classifier, takedown, tokenize, tokenizer, train, user)
from .contract import Stage

STAGES: tuple[Stage, ...] = (
    download.STAGE,
    normalize.STAGE,
    user.AFTER_NORMALIZE,
    quality.STAGE,
    exact.STAGE,
    minhash.STAGE,
    fuzzy.STAGE,
    decontaminate.STAGE,
    consolidate.STAGE,
    user.AFTER_CONSOLIDATE,
    linededup.STAGE,
    pii.STAGE,
    takedown.STAGE,
    quality_classifier.STAGE,
    tokenizer.STAGE,
    tokenize.STAGE,
    export.STAGE,
    mixture.STAGE,
    train.STAGE,
)


def stage(name: str) -> Stage:
    for s in STAGES:
        if s.name == name:
            return s
    raise KeyError(f"no stage named {name!r}; stages: {', '.join(s.name for s in STAGES)}")


def sections() -> tuple[Section, ...]:
    """The manifest sections the stages own, each once (two stages may share one section)."""
    out: dict[str, Section] = {}
    for s in STAGES:
        if s.section is None:
            continue
        seen = out.setdefault(s.section.key, s.section)
        if seen.config is not s.section.config:
            raise TypeError(f"section {s.section.key!r} is claimed by two config classes: "
                            f"{seen.config.__name__} and {s.section.config.__name__}")
    return tuple(out.values())
