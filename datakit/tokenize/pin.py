"""The tokenizer pin: once a tokenizer has been trained under a prefix, later runs use it.

Why: a tokenizer trained on the corpus depends on every document, so without a pin one edited byte in
one source retrains it, and a new tokenizer gives every token cache and the model a new identity: a
change would cost the whole corpus's tokenization. With the pin, later runs use the pinned tokenizer
as if the manifest named it as a file (its identity is its content), so a data change rebuilds only the
caches of what changed. Retraining is an explicit choice (``tokenize: {retrain: true}``), and a
changed tokenizer still invalidates every cache by identity.

The one accepted difference from a from-scratch build: a fresh prefix trains its tokenizer on the
final data, while a pinned prefix keeps the tokenizer trained on the data of the run that pinned it
(the token ids of the same text differ between the two; each cache is consistent with its own
tokenizer, which its ledger records). ``retrain: true`` gives exactly the from-scratch tokenizer.

Pins are per training settings (`pin_name`): a changed vocabulary size, sample size, seed or training
version finds no pin and trains, never keeping the old tokenizer silently.

On disk (``<prefix>/.datakit/tokenizer-pins/``, `layout.TOKENIZER_PINS_DIR`)::

    <settings>.json              the pin: the tokenizer's sha256, the step dir that trained it, when
    <sha256>.tokenizer.json      the pinned tokenizer's bytes (content-addressed)

The pin holds the tokenizer itself, not a step dir, so gc (which removes step dirs only) never takes
it. Concurrent runs: the bytes are written before the record, each atomically, so a record never names
bytes that are not there; a first pin is created exclusively (two runs training at once: the first to
pin wins, the other's run used its own tokenizer and the next run uses the pin); a retrain replaces the
record atomically.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone

from datakit.core.fsio import atomic_write_bytes, create_exclusive, join, read_if_exists
from datakit.core.layout import TOKENIZER_FILE, TOKENIZER_PINS_DIR

from .config import TokenizeConfig

FORMAT = "datakit.tokenizer_pin"
RETRAIN_HINT = "retrain with `tokenize: {retrain: true}`"


class PinError(ValueError):
    """A pin that cannot be used: its record is unreadable or its tokenizer is missing or changed."""


@dataclass(frozen=True)
class Pin:
    """A pinned tokenizer: its sha256, the step dir that trained it, when it was pinned (UTC, ISO 8601),
    and ``path``, where its bytes are (under the pins dir, in no step dir)."""

    sha256: str
    step: str
    pinned: str
    path: str


def pin_name(cfg: TokenizeConfig, version: str) -> str:
    """The pin of one set of training settings (and the tokenizer stage's version): change any and
    there is no pin yet, so a tokenizer of the new settings is trained."""
    return f"bpe-vocab{cfg.vocab_size}-bytes{cfg.train_tokenizer_bytes}-seed{cfg.seed}-v{version}"


def _record_path(prefix: str, name: str) -> str:
    return join(prefix, TOKENIZER_PINS_DIR, f"{name}.json")


def tokenizer_path(prefix: str, sha256: str) -> str:
    """Where the pinned tokenizer with this sha256 is kept."""
    return join(prefix, TOKENIZER_PINS_DIR, f"{sha256}.{TOKENIZER_FILE}")


def read_pin(prefix: str, name: str) -> Pin | None:
    """The pin ``name`` under ``prefix``, its tokenizer checked against its sha256; None when there is
    none. Raises PinError (saying what to do) when it is damaged: a pin is never silently ignored."""
    path = _record_path(prefix, name)
    raw = read_if_exists(path)
    if raw is None:
        return None
    fix = f"delete {path} to train a new tokenizer, or {RETRAIN_HINT}"
    try:
        record = json.loads(raw)
        if record.get("format") != FORMAT:
            raise ValueError(f"format {record.get('format')!r}")
        sha, step, pinned = str(record["sha256"]), str(record["step"]), str(record["pinned"])
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise PinError(f"tokenizer pin {path} is unreadable ({e}): {fix}") from None
    where = tokenizer_path(prefix, sha)
    data = read_if_exists(where)
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        raise PinError(f"tokenizer pin {path}: its tokenizer {where} is missing or no longer has sha256 {sha}: "
                       f"{fix}")
    return Pin(sha, step, pinned, where)


def write_pin(prefix: str, name: str, data: bytes, step: str, replace: bool) -> bool:
    """Pin the tokenizer ``data`` trained by step dir ``step`` as ``name``: its bytes first, then the
    record. ``replace``: a retrain, which moves the pin; otherwise an existing pin is kept (the first
    to pin wins). True when this call wrote the record."""
    sha = hashlib.sha256(data).hexdigest()
    atomic_write_bytes(tokenizer_path(prefix, sha), data)
    pinned = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record = (json.dumps({"format": FORMAT, "sha256": sha, "step": step, "pinned": pinned}, sort_keys=True, indent=1)
              + "\n").encode()
    if replace:
        atomic_write_bytes(_record_path(prefix, name), record)
        return True
    return create_exclusive(_record_path(prefix, name), record)


def older_pin(prefix: str, cfg: TokenizeConfig, version: str) -> tuple[str, Pin] | None:
    """The newest pin of these training settings made by an earlier version of the trainer, with that
    version, or None (an unreadable one counts as none: it is not used either way). Why: such a pin is
    not used (a new trainer trains anew), which rebuilds every token cache and the model of an existing
    prefix; the run says so, and how to keep the old tokenizer."""
    for v in range(int(version) - 1, 0, -1):
        try:
            pin = read_pin(prefix, pin_name(cfg, str(v)))
        except PinError:
            continue
        if pin is not None:
            return str(v), pin
    return None


def superseded(older: tuple[str, Pin], version: str) -> str:
    """What a run that trains anew beside an earlier trainer's pin says."""
    v, pin = older
    return (f"the tokenizer pinned for these settings ({pin.sha256[:12]}, {pin.pinned}) was trained by tokenizer "
            f"stage version {v}, and this datakit's trainer is version {version}: a new tokenizer is trained on "
            f"the current data and pinned, so every token cache and the model are rebuilt for it; to keep the "
            f"old one, set `tokenize: {{tokenizer: {pin.path}}}`")


def describe(pin: Pin | None, retrain: bool, older: tuple[str, Pin] | None = None, version: str = "") -> str:
    """The plan's one line on which tokenizer a run uses (shown by ``datakit run --dry-run``); ``older``:
    an earlier trainer's pin of the same settings (`older_pin`), said when no pin of ``version`` exists."""
    if retrain:
        return ("tokenizer: retrain requested (tokenize.retrain): trained on the current data, then pinned "
                "for later runs")
    if pin is None and older is not None:
        return f"tokenizer: {superseded(older, version)}"
    if pin is None:
        return f"tokenizer: none pinned yet: trained on the current data, then pinned for later runs ({RETRAIN_HINT})"
    return f"tokenizer: pinned {pin.sha256[:12]} from {pin.step} ({pin.pinned}); {RETRAIN_HINT}"
