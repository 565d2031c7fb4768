"""The mixture file: a YAML record of a search that a manifest includes (`mixture: {file: PATH}`).

It holds the chosen weights (what a manifest uses), and everything needed to judge them: the prior
(proportional baseline), every proxy run (weights, measured target loss, predicted loss), the fitted
model, and, when verified, the chosen mixture's measured loss beside proportional's. Written with
sorted components, fixed key order and rounded numbers, so the same search gives the same bytes.
"""

from __future__ import annotations

import math

import yaml

from datakit.core import fsio

FORMAT = "datakit-mixture/2"


def _round(value, digits: int = 6):
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v, digits) for v in value]
    return value


def dump_mixture(record: dict) -> str:
    """The file's text: ``record`` (format, weights first) with numbers rounded to 6 decimals."""
    body = {"format": FORMAT, "weights": record["weights"], **{k: v for k, v in record.items() if k != "weights"}}
    return yaml.safe_dump(_round(body), sort_keys=False, default_flow_style=None, width=110)


def write_mixture_file(path: str, record: dict) -> str:
    text = dump_mixture(record)
    fsio.atomic_write_bytes(path, text.encode("utf-8"))
    return text


def read_mixture_file(path: str) -> dict:
    """A mixture file's content; its ``weights`` checked (a mapping of component -> number >= 0)."""
    try:
        with fsio.open_read(path) as f:
            data = yaml.safe_load(f.read())
    except FileNotFoundError:
        raise ValueError(f"mixture file {path} does not exist; write one with `datakit mix search MANIFEST "
                         "--out FILE`") from None
    weights = data.get("weights") if isinstance(data, dict) else None
    if not isinstance(weights, dict) or not weights or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in weights.values()):
        raise ValueError(f"mixture file {path}: 'weights' must map components to numbers >= 0, got {weights!r}")
    return {**data, "weights": {str(k): float(v) for k, v in sorted(weights.items())}}
