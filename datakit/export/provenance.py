"""The JSON every export carries beside its data (``export.json``, written last: its presence says the
export is complete), and the tokenizer copied next to it, so a trainer's user can tell exactly what the
files hold: the tokenizer (file and identity), the mixture weights, the components with the tokenize
steps that built them, and every step the export depends on, by identity."""

from __future__ import annotations

import json

from datakit import __version__
from datakit.core.fsio import atomic_write_bytes, copy_file

from .inputs import ExportRequest, normalized_weights, rel

PROVENANCE_FILE = "export.json"
TOKENIZER_FILE = "tokenizer.json"


def copy_tokenizer(req: ExportRequest) -> str:
    copy_file(req.tokenizer, rel(req.dest, TOKENIZER_FILE))
    return TOKENIZER_FILE


def provenance(req: ExportRequest, tokenizer: dict, splits: dict[str, dict]) -> dict:
    """The record: format, tokenizer, weights (as given and normalised), components, splits, steps, and
    the packing length when rows are packed."""
    packing = {} if req.seq_len is None else {"seq_len": req.seq_len}
    return {**packing,
        "format": req.fmt,
        "datakit_version": __version__,
        "tokenizer": {"file": TOKENIZER_FILE, **tokenizer},
        "weights": normalized_weights(req.components),
        "components": {c.name: {"step": c.step, "weight": c.weight} for c in req.components},
        "splits": splits,
        "steps": dict(sorted(req.steps.items())),
    }


def write_provenance(req: ExportRequest, record: dict) -> str:
    atomic_write_bytes(rel(req.dest, PROVENANCE_FILE),
                       (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
    return PROVENANCE_FILE
