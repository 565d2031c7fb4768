"""Fast JSON parsing with the standard library's exact results.

orjson parses documents about 3x faster than `json`, but it refuses NaN/Infinity and lone surrogate
escapes (which `json` accepts) and rounds integers past 64 bits to floats (which `json` keeps exact).
`loads` uses orjson and hands exactly those cases to `json`, so switching parsers changes no value and no
error: readers stay fast on ordinary documents and faithful on odd ones.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_BIG = float(2**63)


def _may_hold_rounded_int(obj: Any) -> bool:
    """Whether a float at least 2**63 in size sits anywhere in `obj`: what orjson makes of an integer
    past 64 bits (it rounds it to a float). Plain floats such as scores cost one comparison each."""
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if t is dict:
            stack.extend(o.values())
        elif t is list:
            stack.extend(o)
        elif t is float and not -_BIG < o < _BIG:
            return True
    return False


def loads(text: str | bytes) -> Any:
    """orjson (about 3x the standard library on documents) with the standard library's exact semantics:
    lines orjson refuses (NaN, Infinity, lone surrogates, deep nesting) or may have rounded (integers past
    64 bits) are parsed again by `json.loads`, whose result or error is the one reported."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    return json.loads(text) if _may_hold_rounded_int(obj) else obj
