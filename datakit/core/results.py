"""Typed step results: one type per kind of data a step hands to the steps after it.

A step's function returns a JSON dict that the runner records as ``artifact.json``'s ``result`` and
hands to its dependents (``ctx.deps[name].result``). Readers used to index those dicts by string
(``rec.result["splits"]["train"]["tokens"]``) in a dozen modules, so a renamed key split writer and
readers silently. Here each kind of data has one frozen dataclass: the step that produces the kind
returns its dict through it (``TokensResult.written(raw)``), and every reader goes through it
(``TokensResult.of(record)``: a record is anything with ``name`` and ``result``, such as
``ctx.deps[name]``, a report's step view or a ferry check's ``ctx.record(name)``).

    FilesResult       a source's downloaded files (download)
    DocumentsResult   a documents dir: main (+ removed, dups, rejects) files (normalize, user stages, quality,
                      consolidate, linededup, pii, the classifier's scoring and selection)
    AttributesResult  per-source attribute sets (exact, fuzzy, decontaminate)
    TokenizerResult   a tokenizer.json (tokenizer)
    TokensResult      a token cache with its train/validation splits (tokenize)
    MixtureResult     a searched mixture and its file (mix-search)
    ModelResult       a trained model's figures, checkpoints and plot (train)

``to_dict`` gives back exactly the keys ``from_dict`` read, so a step built before these types existed
loads, skips and reads as before, and ``artifact.json`` stays byte-identical: the typed fields are the
keys other steps read; every other key a producer records rides along in ``extra`` untouched. A record
of the wrong kind fails in ``from_dict`` with a message naming the step, the kind asked for and the
keys it has.

Foundation module: it imports only the standard library and ``datakit.core.layout``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar

from datakit.core.layout import DocumentsDir

# The kinds of data stages exchange (what a stage's `consumes` / `produces` name).
FILES = "files"            # a source's raw files, downloaded
DOCUMENTS = "documents"    # a documents dir per source: outputs/main (+ dups, rejects, removed)
ATTRIBUTES = "attributes"  # per-source attribute files co-partitioned with the documents
SIGNATURES = "signatures"  # per-source MinHash signatures and LSH band keys (fuzzy dedup's input)
TOKENIZER = "tokenizer"    # a tokenizer.json
TOKENS = "tokens"          # a token cache per source
MODEL = "model"            # a trained model's checkpoints and metrics
MIXTURE = "mixture"        # a searched training mixture (its chosen weights and mixture file)
KINDS = (FILES, DOCUMENTS, SIGNATURES, ATTRIBUTES, TOKENIZER, TOKENS, MIXTURE, MODEL)

R = TypeVar("R", bound="Record")
ONE, MAP, LIST = "one", "map", "list"  # a nested field holds one record, a dict of them, a list of them


class WrongResult(ValueError):
    """A step's result read as a kind it is not (or missing a key its kind always has)."""


class HasResult(Protocol):
    """What ``of`` reads: a built step's name and its result dict."""

    name: str
    result: dict | None


@dataclass(frozen=True, kw_only=True)
class Record:
    """A JSON object with typed fields (the keys readers use) and ``extra`` (every other key, kept as
    written). ``NESTED`` names the fields holding records: field -> (record type, ONE | MAP | LIST)."""

    LABEL: ClassVar[str] = "record"
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    NESTED: ClassVar[dict[str, tuple[type["Record"], str]]] = {}

    extra: dict[str, Any] = field(default_factory=dict)
    # The keys the dict it was read from had: a field read as null is written back as null, a field
    # that was absent stays absent (a record built in code writes the fields that are not None).
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def missing(cls, d: dict) -> list[str]:
        """The keys ``d`` lacks to be this record (each always written by its producer)."""
        return [k for k in cls.REQUIRED if k not in d]

    @classmethod
    def from_dict(cls: type[R], d: Any, where: str = "a step") -> R:
        if not isinstance(d, dict):
            raise WrongResult(f"{where}: its result is not {cls.LABEL} ({cls.__name__}): "
                              f"a {type(d).__name__}, not an object")
        missing = cls.missing(d)
        if missing:
            raise WrongResult(f"{where}: its result is not {cls.LABEL} ({cls.__name__}): no {', '.join(missing)} "
                              f"(its keys: {', '.join(sorted(d)) or 'none'}); read it as the kind the plan "
                              "says its step produces")
        names = {f.name for f in fields(cls)} - {"extra", "given"}
        typed = {k: _decode(cls.NESTED.get(k), v, f"{where}: {k}") for k, v in d.items() if k in names}
        return cls(**typed, extra={k: v for k, v in d.items() if k not in names}, given=frozenset(d))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "given") or (value is None and f.name not in self.given
                                                  and f.name not in self.REQUIRED):
                continue
            out[f.name] = _encode(value)
        return {**out, **self.extra}


def _decode(nested: tuple[type[Record], str] | None, value: Any, where: str) -> Any:
    if nested is None or value is None:
        return value
    kind, shape = nested
    if shape == ONE:
        return kind.from_dict(value, where)
    if shape == MAP and isinstance(value, dict):
        return {k: kind.from_dict(v, f"{where}.{k}") for k, v in value.items()}
    if shape == LIST and isinstance(value, list):
        return tuple(kind.from_dict(v, f"{where}[{i}]") for i, v in enumerate(value))
    raise WrongResult(f"{where}: expected {'an object' if shape == MAP else 'a list'} of {kind.LABEL}, "
                      f"got {type(value).__name__}")


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict) and any(isinstance(v, Record) for v in value.values()):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class StepResult(Record):
    """The result of a step that produces one kind of data (``LABEL``)."""

    @classmethod
    def of(cls: type[R], record: HasResult) -> R:
        """The typed result of a built step (a dependency's record, a report's step view)."""
        return cls.from_dict(record.result, f"step {record.name}")

    @classmethod
    def written(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """A producing step's return value: its result checked as this kind and written back with
        exactly its keys, its own ``counters`` (a flat str -> int dict the runner records beside the
        result) passed through."""
        counters = raw.get("counters")
        result = cls.from_dict({k: v for k, v in raw.items() if k != "counters"}, f"a {cls.LABEL} step").to_dict()
        return result if counters is None else {**result, "counters": counters}


# ------------------------------------------------------------------------------------------ files


@dataclass(frozen=True, kw_only=True)
class DownloadedFile(Record):
    """One fetched file: its name (relative to the step's files dir), size and sha256."""

    LABEL: ClassVar[str] = "a downloaded file"
    REQUIRED: ClassVar[tuple[str, ...]] = ("name", "size")

    name: str
    size: int
    sha256: str | None = None
    size_unconfirmed: bool | None = None


@dataclass(frozen=True, kw_only=True)
class FilesResult(StepResult):
    LABEL: ClassVar[str] = FILES
    REQUIRED: ClassVar[tuple[str, ...]] = ("files",)
    NESTED: ClassVar[dict[str, tuple[type[Record], str]]] = {"files": (DownloadedFile, LIST)}

    files: tuple[DownloadedFile, ...]


# -------------------------------------------------------------------------------------- documents


@dataclass(frozen=True, kw_only=True)
class DocumentsResult(StepResult):
    """A documents dir. Per-file stages list their files (``main_files``, ``removed_files``; normalize
    also ``dups_files``, ``rejects_files``); consolidate names its dirs (``main``, ``removed``)."""

    LABEL: ClassVar[str] = DOCUMENTS

    source: str | None = None
    main_files: list[str] | None = None
    removed_files: list[str] | None = None
    dups_files: list[str] | None = None
    rejects_files: list[str] | None = None
    main: str | None = None
    removed: str | None = None

    @classmethod
    def missing(cls, d: dict) -> list[str]:
        return [] if "main_files" in d or "main" in d else ["main_files (or main)"]

    @property
    def main_dir(self) -> str:
        """The kept documents' dir, relative to the step's output."""
        return self.main or DocumentsDir.MAIN

    @property
    def removed_dir(self) -> str:
        return self.removed or DocumentsDir.REMOVED


# ------------------------------------------------------------------------------------- attributes


@dataclass(frozen=True, kw_only=True)
class SourceAttributes(Record):
    """One source's attribute set: its dir, relative to the step's output."""

    LABEL: ClassVar[str] = "a source's attributes"
    REQUIRED: ClassVar[tuple[str, ...]] = ("attributes",)

    attributes: str


@dataclass(frozen=True, kw_only=True)
class AttributesResult(StepResult):
    LABEL: ClassVar[str] = ATTRIBUTES
    REQUIRED: ClassVar[tuple[str, ...]] = ("sources",)
    NESTED: ClassVar[dict[str, tuple[type[Record], str]]] = {"sources": (SourceAttributes, MAP)}

    sources: dict[str, SourceAttributes]
    params: dict | None = None

    def attributes(self, source: str) -> str:
        """``source``'s attribute dir, relative to the step's output."""
        if source not in self.sources:
            raise KeyError(f"no attribute set for source {source!r} (sets: {', '.join(sorted(self.sources))})")
        return self.sources[source].attributes


# ------------------------------------------------------------------------------------- signatures


@dataclass(frozen=True, kw_only=True)
class SignaturesResult(StepResult):
    """A source's MinHash signatures (a minhash step): its attribute dir of band keys per document,
    relative to the step's output, and the minhash parameters they were made with."""

    LABEL: ClassVar[str] = SIGNATURES
    REQUIRED: ClassVar[tuple[str, ...]] = ("source", "attributes")

    source: str
    attributes: str
    num_files: int | None = None
    params: dict | None = None


# ------------------------------------------------------------------------------ tokenizer, tokens


@dataclass(frozen=True, kw_only=True)
class TokenizerResult(StepResult):
    """A tokenizer.json. A trained one records its sha256 and vocab size; a copied one its ``identity``."""

    LABEL: ClassVar[str] = TOKENIZER
    REQUIRED: ClassVar[tuple[str, ...]] = ("tokenizer",)

    tokenizer: str
    sha256: str | None = None
    vocab_size: int | None = None
    identity: dict | None = None

    @property
    def vocab(self) -> int | None:
        """The vocabulary size, trained or copied."""
        return self.vocab_size or (self.identity or {}).get("vocab_size")


@dataclass(frozen=True, kw_only=True)
class Split(Record):
    """One split of a token cache: its dir (relative to the step's output) and exact totals."""

    LABEL: ClassVar[str] = "a token cache split"
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)

    path: str
    docs: int | None = None
    tokens: int | None = None
    bytes: int | None = None
    shards: int | None = None


@dataclass(frozen=True, kw_only=True)
class TokensResult(StepResult):
    LABEL: ClassVar[str] = TOKENS
    REQUIRED: ClassVar[tuple[str, ...]] = ("splits",)
    NESTED: ClassVar[dict[str, tuple[type[Record], str]]] = {"splits": (Split, MAP)}

    splits: dict[str, Split]
    name: str | None = None
    num_shards: int | None = None
    bad_records: int | None = None

    def split(self, which: str) -> Split:
        if which not in self.splits:
            raise KeyError(f"the token cache has no {which!r} split (splits: {', '.join(sorted(self.splits))})")
        return self.splits[which]

    def split_dir(self, output: str, which: str) -> str:
        """The ``which`` split's dir under the step's ``output``."""
        return posixpath.join(output, self.split(which).path)

    def tokens_in(self, which: str) -> int:
        """Tokens in the ``which`` split (0 when it has none or is absent)."""
        split = self.splits.get(which)
        return int(split.tokens or 0) if split is not None else 0

    def has_documents(self, which: str) -> bool:
        split = self.splits.get(which)
        return split is not None and bool(split.docs)

    @property
    def total_tokens(self) -> int:
        return sum(int(s.tokens or 0) for s in self.splits.values())

    @property
    def total_docs(self) -> int:
        return sum(int(s.docs or 0) for s in self.splits.values())


# ----------------------------------------------------------------------------------------- mixture


@dataclass(frozen=True, kw_only=True)
class MixtureChoice(Record):
    """A mixture the search measured: its weights, predicted target bits per byte, and measured bits per
    byte (the mean of ``runs``: one per training seed)."""

    LABEL: ClassVar[str] = "a mixture"
    REQUIRED: ClassVar[tuple[str, ...]] = ("weights",)

    weights: dict[str, float]
    predicted_bpb: float | None = None
    measured_bpb: float | None = None
    runs: list[float] | None = None


@dataclass(frozen=True, kw_only=True)
class MixtureResult(StepResult):
    """The searched mixture: ``chosen`` (what ``weights: search`` trains on: the fit's ``candidate`` when
    it beat the proportional ``baseline`` by more than the noise, else proportional), the ``decision``
    and its reason, the seed ``noise``, predicted and measured ``gain``, the ``trust`` region, the
    ``rounds``, every proxy's record, the fit and the mixture file."""

    LABEL: ClassVar[str] = MIXTURE
    REQUIRED: ClassVar[tuple[str, ...]] = ("chosen",)
    NESTED: ClassVar[dict[str, tuple[type[Record], str]]] = {"chosen": (MixtureChoice, ONE),
                                                             "baseline": (MixtureChoice, ONE),
                                                             "candidate": (MixtureChoice, ONE)}

    chosen: MixtureChoice
    baseline: MixtureChoice | None = None
    candidate: MixtureChoice | None = None
    decision: dict | None = None
    noise: dict | None = None
    gain: dict | None = None
    trust: dict | None = None
    rounds: list[dict] | None = None
    file: str | None = None
    proxies: list[dict] | None = None
    fit: dict | None = None


# ------------------------------------------------------------------------------------------- model


@dataclass(frozen=True, kw_only=True)
class ModelResult(StepResult):
    """The trained model's figures, its checkpoints and loss plot (paths relative to the step's output),
    the sources it skipped and, under a ``mixture:`` section, the resolved mixture plan."""

    LABEL: ClassVar[str] = MODEL
    REQUIRED: ClassVar[tuple[str, ...]] = ("steps",)

    steps: int
    final_loss: float | None = None
    eval_loss: float | None = None
    bpb: float | None = None
    tokens_per_sec: float | None = None
    num_params: int | None = None
    skipped_steps: int | None = None
    skipped_sources: list[str] | None = None
    checkpoints: list[str] | None = None
    plot_path: str | None = None
    mixture: dict | None = None

    @property
    def phases(self) -> list[dict] | None:
        """The resolved mixture's phases (each ``{"start", "weights"}``), or None without a mixture."""
        return (self.mixture or {}).get("phases")
