"""Language codes that language ID can return, so a manifest's ``langid.languages`` is checked when it
loads: a code the model never predicts would keep nothing, and the run would only say so after building.

``LID176_CODES`` is lid.176's label set (``model.get_labels()`` without ``__label__``), shipped here so
validating a manifest never loads the model; a test checks it equals the installed model's labels.
``NAMES`` maps the English names of common languages to their codes, for the "did you mean".
"""

from __future__ import annotations

import difflib

DEFAULT = "default"  # the key of a per-language mapping that holds the value of every language not named

LID176_CODES = frozenset((
    "af", "als", "am", "an", "ar", "arz", "as", "ast", "av", "az", "azb", "ba", "bar", "bcl", "be", "bg", "bh",
    "bn", "bo", "bpy", "br", "bs", "bxr", "ca", "cbk", "ce", "ceb", "ckb", "co", "cs", "cv", "cy", "da", "de",
    "diq", "dsb", "dty", "dv", "el", "eml", "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "frr", "fy", "ga",
    "gd", "gl", "gn", "gom", "gu", "gv", "he", "hi", "hif", "hr", "hsb", "ht", "hu", "hy", "ia", "id", "ie",
    "ilo", "io", "is", "it", "ja", "jbo", "jv", "ka", "kk", "km", "kn", "ko", "krc", "ku", "kv", "kw", "ky",
    "la", "lb", "lez", "li", "lmo", "lo", "lrc", "lt", "lv", "mai", "mg", "mhr", "min", "mk", "ml", "mn", "mr",
    "mrj", "ms", "mt", "mwl", "my", "myv", "mzn", "nah", "nap", "nds", "ne", "new", "nl", "nn", "no", "oc",
    "or", "os", "pa", "pam", "pfl", "pl", "pms", "pnb", "ps", "pt", "qu", "rm", "ro", "ru", "rue", "sa", "sah",
    "sc", "scn", "sco", "sd", "sh", "si", "sk", "sl", "so", "sq", "sr", "su", "sv", "sw", "ta", "te", "tg",
    "th", "tk", "tl", "tr", "tt", "tyv", "ug", "uk", "ur", "uz", "vec", "vep", "vi", "vls", "vo", "wa", "war",
    "wuu", "xal", "xmf", "yi", "yo", "yue", "zh",
))

NAMES = {
    "arabic": "ar", "bengali": "bn", "bulgarian": "bg", "catalan": "ca", "chinese": "zh", "czech": "cs",
    "danish": "da", "dutch": "nl", "english": "en", "finnish": "fi", "french": "fr", "german": "de",
    "greek": "el", "hebrew": "he", "hindi": "hi", "hungarian": "hu", "indonesian": "id", "italian": "it",
    "japanese": "ja", "korean": "ko", "malay": "ms", "norwegian": "no", "persian": "fa", "polish": "pl",
    "portuguese": "pt", "romanian": "ro", "russian": "ru", "spanish": "es", "swedish": "sv", "thai": "th",
    "turkish": "tr", "ukrainian": "uk", "urdu": "ur", "vietnamese": "vi",
}


def suggestion(value: str) -> str | None:
    """The code meant by ``value``: an English name ("Polish" -> pl), a case slip ("EN" -> en), a
    region-tagged code ("pt-BR" -> pt), or the closest code by spelling."""
    low = value.strip().lower()
    if low in NAMES:
        return NAMES[low]
    base = low.replace("_", "-").split("-")[0]
    if base in LID176_CODES:
        return base
    close = difflib.get_close_matches(low, sorted(LID176_CODES), n=1, cutoff=0.6)
    if close:
        return close[0]
    named = difflib.get_close_matches(low, sorted(NAMES), n=1, cutoff=0.7)
    return NAMES[named[0]] if named else None


def _unknown(values: tuple[str, ...] | list[str], codes: str = "ISO 639 codes such as en, de, zh") -> str | None:
    """The codes of ``values`` lid.176 never predicts, each with its "did you mean", or None."""
    bad = [v for v in values if v not in LID176_CODES]
    if not bad:
        return None
    parts = []
    for v in bad:
        hint = suggestion(v)
        parts.append(f"{v!r}: did you mean {hint!r}?" if hint else repr(v))
    return f"unknown language code {'; '.join(parts)} (language ID is fastText lid.176: {codes})"


def check_languages(values: tuple[str, ...]) -> str | None:
    """The manifest check of ``langid.languages``: every code one lid.176 predicts."""
    return _unknown(values)


def check_per_language(value: object) -> str | None:
    """The manifest check of a setting given per language (``langid.min_score: {de: 0.5, default: 0.3}``):
    every key a code lid.176 predicts, or ``default``, and every value a fraction in [0, 1]. A plain
    number (the same for every language) passes."""
    if not isinstance(value, dict):
        return None
    unknown = _unknown([k for k in value if k != DEFAULT],
                       f"keys are ISO 639 codes such as en, de, zh, or '{DEFAULT}' for every language not named")
    if unknown:
        return unknown
    bad = [f"{k}: {v}" for k, v in value.items() if not 0 <= v <= 1]
    return f"scores must be between 0 and 1, got {', '.join(bad)}" if bad else None
