"""Drop-fraction envelopes: how much each stage may remove before the ferry calls it broken.

Exact equalities catch bookkeeping bugs; envelopes catch *behaviour* drifting: a tokenizer change that
suddenly rejects 5% of documents, a MinHash change that stops finding the license near-duplicates (a
lower bound > 0 is what notices that), decontamination going wild. The defaults fit the bundled smoke
corpus with margin (measured on Debian 12 / Python 3.11: normalize dups at most 0.44 per source, fuzzy
0.033, decontaminate 0.005, no rejects, loss drop ~16%; quality removes 2 of the 7 planted web pages,
0.29, and nothing from the license and copyright texts, no rule more than 0.15; line dedup empties no
document); for a ferry over your own data write your own envelope file (YAML, any subset of the fields
below) and pass it with ``--envelopes``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

Range = tuple[float, float]


@dataclass(frozen=True)
class Envelopes:
    # fraction of a normalize step's input records rejected as malformed (per source)
    normalize_reject_fraction: Range = (0.0, 0.01)
    # fraction of a normalize step's input records dropped as in-source exact copies (per source)
    normalize_dup_fraction: Range = (0.0, 0.8)
    # fraction of all normalized docs marked as cross-source exact duplicates
    exact_fraction: Range = (0.0, 0.2)
    # fraction of all normalized docs marked as fuzzy duplicates (non-canonical cluster members)
    fuzzy_fraction: Range = (0.005, 0.3)
    # fraction of all normalized docs marked as benchmark-contaminated
    decontaminate_fraction: Range = (0.0, 0.02)
    # fraction of a quality step's documents removed by its rules (per source)
    quality_removed_fraction: Range = (0.0, 0.9)
    # fraction of a quality step's documents removed by any one rule (per source and rule)
    quality_rule_fraction: Range = (0.0, 0.6)
    # fraction of a linededup step's documents emptied (every line repeats earlier documents; per source)
    linededup_emptied_fraction: Range = (0.0, 0.25)
    # fraction of a tokenize step's documents it could not tokenize (per source)
    tokenize_bad_fraction: Range = (0.0, 0.001)
    # benchmark items that must be found verbatim in the normalized corpus (0: no planted items)
    planted_min_found: int = 1
    # required relative drop of the training loss, first logged step vs last
    min_loss_drop: float = 0.02

    @classmethod
    def from_dict(cls, data: dict, where: str = "envelopes") -> "Envelopes":
        """Defaults overridden by ``data``; ValueError naming the key for anything malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping of envelope names to values, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kw: dict = {}
        for key, value in data.items():
            if key not in fields:
                raise ValueError(f"{where}: unknown envelope {key!r}; known: {', '.join(fields)}")
            default = getattr(cls, key)
            if isinstance(default, tuple):
                if (not isinstance(value, (list, tuple)) or len(value) != 2
                        or not all(_is_number(v) for v in value) or not 0 <= value[0] <= value[1] <= 1):
                    raise ValueError(f"{where}: {key}: expected [low, high] with 0 <= low <= high <= 1, got {value!r}")
                kw[key] = (float(value[0]), float(value[1]))
            elif isinstance(default, int) and not isinstance(default, bool):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"{where}: {key}: expected a non-negative integer, got {value!r}")
                kw[key] = value
            else:
                if not _is_number(value) or not 0 <= value < 1:
                    raise ValueError(f"{where}: {key}: expected a number in [0, 1), got {value!r}")
                kw[key] = float(value)
        return cls(**kw)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_envelopes(path: str | None) -> Envelopes:
    """Envelopes from a YAML/JSON file (None: the defaults)."""
    if path is None:
        return Envelopes()
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot read envelopes: {e}") from None
    return Envelopes.from_dict(data, path)


def within(value: float, rng: Range) -> bool:
    return rng[0] <= value <= rng[1]
