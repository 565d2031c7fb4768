"""The rules one language gets in one source: built-in per-language settings under the manifest's.

For each rule group (Gopher repetition, Gopher quality, C4, FineWeb) and a document language ``code``,
`settings_for(rules, code)` gives the group's config, or marks the group skipped for that language:

1. the group's defaults, with ``code``'s built-in thresholds in their place (`datakit.quality.languages`);
2. every key the manifest wrote for the group, globally or for the source (``given``; in a config built in
   Python, every key that differs from its default);
3. every key ``quality.languages.<code>.<group>`` wrote.

A group applies to ``code`` when it has built-in settings for it, when ``languages.<code>`` names the
group, or when the group says ``apply_to_unlisted: true``; otherwise it is skipped (and the step counts
``skipped/<group>/<code>``), never run with another language's settings. English has no built-in
thresholds, so its configs are exactly the manifest's: English documents are decided as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from . import gopher
from .config import QualityRules
from .languages import GROUPS, has_settings, language


@dataclass(frozen=True)
class LanguageSettings:
    code: str
    split: str                    # how its words are split (datakit.quality.text)
    stop_words: frozenset[str]    # what Gopher quality counts
    configs: dict[str, Any]       # group -> its config; a group missing here is off or skipped
    skipped: tuple[str, ...]      # enabled groups without settings for this language


def written(cfg: Any) -> frozenset[str]:
    """The keys of ``cfg`` that the manifest wrote, or that differ from the default (a config built in
    Python has no ``given``): the keys that replace a language's built-in values."""
    changed = {f.name for f in dataclasses.fields(cfg)
               if f.name != "given" and getattr(cfg, f.name) != f.default}
    return frozenset(cfg.given) | changed


def _laid_over(base: Any, cfg: Any) -> Any:
    return dataclasses.replace(base, **{k: getattr(cfg, k) for k in written(cfg)})


def _group_config(rules: QualityRules, group: str, code: str) -> Any | None:
    """``group``'s config for documents in ``code`` (steps 1-3 of the module docstring), or None when the
    group has no settings for ``code``."""
    cfg = getattr(rules, group)
    over = rules.languages.get(code)
    named = over is not None and group in written(over)
    if not (has_settings(group, code) or named or cfg.apply_to_unlisted):
        return None
    lang = language(code)
    builtin = lang.thresholds.get(group, {}) if lang is not None and has_settings(group, code) else {}
    out = _laid_over(type(cfg)(**builtin), cfg)
    return _laid_over(out, getattr(over, group)) if named else out


def settings_for(rules: QualityRules, code: str) -> LanguageSettings:
    """What the rule groups of ``rules`` do to documents in language ``code``."""
    configs: dict[str, Any] = {}
    skipped: list[str] = []
    for group in GROUPS:
        cfg = _group_config(rules, group, code)
        if cfg is None:
            if getattr(rules, group).enabled:
                skipped.append(group)
        elif cfg.enabled:
            configs[group] = cfg
    lang = language(code)
    gq = configs.get("gopher_quality")
    if gq is not None and gq.stop_words is not None:
        stop = frozenset(w.lower() for w in gq.stop_words)
    else:
        stop = lang.stop_words if lang is not None and lang.stop_words else gopher.STOP_WORDS
    return LanguageSettings(code, lang.split if lang is not None else "spaces", stop, configs, tuple(skipped))
