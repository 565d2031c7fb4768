"""Every on-disk contract between steps, spelled once: file names, directory names, relative paths.

A step's output directory is read by other steps (dedup reads normalize's main files, consolidate reads
the attribute sets, tokenize reads consolidate's main files, train reads the token caches) and by the
ferry validator, which re-derives every count from the files. Each of them used to spell the paths
("outputs/main", "attrs.json", "part-00000-of-00004.parquet", "ledger.json", ...) on its own, so a
renamed directory would silently split writer and readers. Here each contract is one typed value:

    DocumentsDir(root)    a step's documents: outputs/main, outputs/dups, outputs/rejects, outputs/removed
    AttributesDir(root)   one source's attribute set: files co-partitioned with its documents + attrs.json
    TokenCacheDir(root)   one source's token cache: train/ and validation/ split dirs, ledger, stats
    TrainDir(root)        the training stage's metrics, loss plot, checkpoints and result.json

The relative constants (``DocumentsDir.MAIN`` ...) are what step results record: a result names paths
relative to its step's output directory, so a run stays valid when its prefix is moved or mirrored.
The strings are exactly those of the original writers; changing one changes every output's bytes.

Foundation module: it imports only the standard library and ``datakit.core.fsio``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar, Iterable

from datakit.core.fsio import join, list_names

__all__ = [
    "PLAN_FILE",
    "RUNS_DIR",
    "TOKENIZER_FILE",
    "TOKENIZER_PINS_DIR",
    "AttributesDir",
    "DocumentsDir",
    "TokenCacheDir",
    "TrainDir",
    "join",
    "parquet_names",
    "parse_part_name",
    "parse_unit_part_name",
    "parse_work_part_name",
    "part_name",
    "part_names",
    "unit_part_name",
    "work_part_name",
]

PLAN_FILE = "plan.json"
"""The published plan of a run, at ``<prefix>/plan.json`` (``datakit.stages.plan``): every step with its
stage, source and kind of output, each source's chain of document steps, the mixture components and
the named products. Readers (report, ferry, ``mix show``) find steps through it, never by name."""

RUNS_DIR = ".datakit/runs"
"""Live run records, ``<prefix>/.datakit/runs/<run-id>.json`` (``datakit.steps.runs``): every step dir a
running run's plan reads, with a heartbeat; `gc` keeps what a live record names."""

VERIFIED_DIR = ".datakit/verified"
"""Output files whose xxh3-128 was read, by stat (``datakit.steps.stamps``): a built step's file whose
stat is recorded there is not read again to be trusted. A cache: safe to delete."""

TOKENIZER_FILE = "tokenizer.json"
"""What the tokenizer step writes (and the token cache keeps a copy of): one HF tokenizers JSON file."""

FETCHED_FILES_DIR = "files"
"""Where a download step keeps a remote source's fetched files, ``<step dir>/files/<relative name>``
(``datakit.sources.fetch``), which normalize then reads in place."""

TOKENIZER_PINS_DIR = ".datakit/tokenizer-pins"
"""Pinned tokenizers, ``<prefix>/.datakit/tokenizer-pins/`` (``datakit.tokenize.pin``): per set of
training settings, the record of the tokenizer later runs use instead of retraining, and the pinned
tokenizer files themselves (named by sha256), so no gc of step dirs can take a pinned tokenizer away."""

_PART_RE = re.compile(r"^part-(\d{5,})-of-(\d{5,})\.parquet$")
_WORK_PART_RE = re.compile(r"^part-(\d{5,})\.parquet$")
_UNIT_PART_RE = re.compile(r"^unit-([0-9a-f]{16})\.parquet$")


# ------------------------------------------------------------------------------------------ names


def part_name(index: int, total: int) -> str:
    """File name of shard ``index`` of ``total``: ``part-00003-of-00016.parquet``.

    Why the total is in the name: a reader can tell a complete set (every index of one total) from a
    partial one or a mix of two runs without any metadata, and sorting the names sorts the shards."""
    if not 0 <= index < total:
        raise ValueError(f"part index {index} outside [0, {total})")
    return f"part-{index:05d}-of-{total:05d}.parquet"


def parse_part_name(name: str) -> tuple[int, int] | None:
    """(index, total) of a :func:`part_name` (a base name or a path ending in one); None otherwise."""
    m = _PART_RE.match(name.rstrip("/").rsplit("/", 1)[-1])
    return (int(m.group(1)), int(m.group(2))) if m else None


def part_names(total: int) -> list[str]:
    """The names of a complete set of ``total`` shards, in order."""
    return [part_name(i, total) for i in range(total)]


def unit_part_name(digest: str) -> str:
    """File name of the part one *input unit* produced: ``unit-<16 hex>.parquet``.

    Why not an index: normalize writes one part per unit of input files, and the digest names the unit
    by its first member (see ``datakit.normalize.units``), so an unchanged unit keeps its name when
    another unit is inserted before it, and a rebuild can reuse it (and every later step its file of
    the same name). Sorting the names does not sort the units; no reader needs that."""
    if not re.fullmatch(r"[0-9a-f]{16}", digest):
        raise ValueError(f"unit part digest {digest!r} is not 16 lowercase hex digits")
    return f"unit-{digest}.parquet"


def parse_unit_part_name(name: str) -> str | None:
    """The digest of a :func:`unit_part_name` (a base name or a path ending in one); None otherwise."""
    m = _UNIT_PART_RE.match(name.rstrip("/").rsplit("/", 1)[-1])
    return m.group(1) if m else None


def work_part_name(index: int) -> str:
    """File name of partition ``index`` of a step's own work files (reject staging, edge lists,
    component rounds): numbered only, since no other step reads them and their total is not known
    when the file is written."""
    return f"part-{index:05d}.parquet"


def parse_work_part_name(name: str) -> int | None:
    """The index of a :func:`work_part_name` (a base name or a path ending in one); None otherwise."""
    m = _WORK_PART_RE.match(name.rstrip("/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def parquet_names(dir_path: str) -> list[str]:
    """Base names of the visible parquet files in a directory, sorted; [] if it does not exist.

    Strays are included (a caller checking completeness should name them); dot-files are in-flight
    temporaries of an atomic write and are never part of a set."""
    return [n for n in list_names(dir_path) if n.endswith(".parquet") and not n.startswith(".")]


@dataclass(frozen=True)
class _Dir:
    """A directory with a fixed layout; ``root`` is a local path or an fsspec URL (a PathLike is
    taken as its string, so tests can pass pytest's tmp_path)."""

    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", os.fspath(self.root))


# ------------------------------------------------------------------------------------------ documents


@dataclass(frozen=True)
class DocumentsDir(_Dir):
    """The documents a step wrote under its output dir ``root``, by kind.

    main     the records that go on (normalize: first copy of each id; consolidate: what survived),
             each file sorted by id; normalize writes one ``unit-<16 hex>.parquet`` per unit of input
             files (older builds and test fixtures: ``part-NNNNN-of-MMMMM.parquet``);
    dups     normalize's non-first copies, same file names as main;
    rejects  normalize's unreadable/invalid records, one file (``part-00000-of-00001.parquet``);
    removed  consolidate's dropped ids with the reason, same file names as main;
    units    normalize's per-unit records kept for reuse by the next build (``units/<kind>/<part>``):
             a unit's rejects, and its parts as read when cross-unit dedup or the source-wide
             schema changed them (never listed as documents).

    Consolidate keeps normalize's file names, so every later step can pair files by name."""

    OUTPUTS: ClassVar[str] = "outputs"
    MAIN: ClassVar[str] = "outputs/main"
    DUPS: ClassVar[str] = "outputs/dups"
    REJECTS: ClassVar[str] = "outputs/rejects"
    REMOVED: ClassVar[str] = "outputs/removed"
    UNITS: ClassVar[str] = "units"
    KINDS: ClassVar[dict[str, str]] = {"main": MAIN, "dups": DUPS, "rejects": REJECTS, "removed": REMOVED}

    @classmethod
    def rel_dir(cls, kind: str) -> str:
        """The kind's directory relative to the step's output dir (what results record)."""
        try:
            return cls.KINDS[kind]
        except KeyError:
            raise ValueError(f"unknown document kind {kind!r}; expected one of {', '.join(cls.KINDS)}") from None

    @classmethod
    def rel_part(cls, kind: str, index: int, total: int) -> str:
        """``outputs/<kind>/part-NNNNN-of-MMMMM.parquet``: one shard, relative to the output dir."""
        return f"{cls.rel_dir(kind)}/{part_name(index, total)}"

    @classmethod
    def rel_parts(cls, kind: str, total: int) -> list[str]:
        """Every shard of a complete set of ``total``, relative to the output dir, in order."""
        return [cls.rel_part(kind, i, total) for i in range(total)]

    @property
    def outputs(self) -> str:
        return join(self.root, self.OUTPUTS)

    @property
    def main(self) -> str:
        return join(self.root, self.MAIN)

    @property
    def dups(self) -> str:
        return join(self.root, self.DUPS)

    @property
    def rejects(self) -> str:
        return join(self.root, self.REJECTS)

    @property
    def removed(self) -> str:
        return join(self.root, self.REMOVED)

    def dir(self, kind: str) -> str:
        return join(self.root, self.rel_dir(kind))

    def part(self, kind: str, index: int, total: int) -> str:
        return join(self.root, self.rel_part(kind, index, total))

    @classmethod
    def rel_file(cls, kind: str, name: str) -> str:
        """``outputs/<kind>/<name>``: a part named by its unit, relative to the output dir."""
        return f"{cls.rel_dir(kind)}/{name}"

    def file(self, kind: str, name: str) -> str:
        return join(self.root, self.rel_file(kind, name))

    @classmethod
    def rel_unit(cls, kind: str, name: str) -> str:
        """``units/<kind>/<name>``: normalize's kept per-unit record of ``kind`` (main, dups, rejects)."""
        cls.rel_dir(kind)
        return f"{cls.UNITS}/{kind}/{name}"

    def unit(self, kind: str, name: str) -> str:
        return join(self.root, self.rel_unit(kind, name))

    def parquet_names(self, kind: str) -> list[str]:
        """Base names of the parquet files in the kind's directory, sorted (strays included)."""
        return parquet_names(self.dir(kind))

    def parquet_paths(self, kind: str) -> list[str]:
        """Paths of the parquet files in the kind's directory, sorted by name (strays included)."""
        d = self.dir(kind)
        return [join(d, n) for n in self.parquet_names(kind)]


# ------------------------------------------------------------------------------------------ attributes


@dataclass(frozen=True)
class AttributesDir(_Dir):
    """One source's attribute set (exact, minhash, fuzzy, decontaminate marks) at ``root``.

    Its parquet files are co-partitioned with the source's main documents: the same file names, rows
    in the same id order (only the ids the set says something about). That is what makes
    consolidation a streaming merge per file instead of a shuffle. ``attrs.json`` records the kind,
    the parameters and the file list, so consumers refuse to mix sets made differently; it is written
    last and removed first, so a set without it is never valid."""

    PARENT: ClassVar[str] = "attributes"
    META: ClassVar[str] = "attrs.json"

    @classmethod
    def rel(cls, source: str) -> str:
        """``attributes/<source>``: a source's set relative to its step's output dir."""
        return f"{cls.PARENT}/{source}"

    @classmethod
    def of(cls, step_dir: str, source: str) -> "AttributesDir":
        """The set of ``source`` inside a dedup step's output dir."""
        return cls(join(step_dir, cls.rel(source)))

    @property
    def meta(self) -> str:
        return join(self.root, self.META)

    def file(self, documents_file: str) -> str:
        """The attribute file paired with a documents file (given by base name or path)."""
        return join(self.root, documents_file.rstrip("/").rsplit("/", 1)[-1])

    def files(self, documents_files: Iterable[str]) -> list[str]:
        return [self.file(f) for f in documents_files]

    def parquet_names(self) -> list[str]:
        """Base names of the attribute files present, sorted (strays included)."""
        return parquet_names(self.root)


# ------------------------------------------------------------------------------------------ token caches


@dataclass(frozen=True)
class TokenCacheDir(_Dir):
    """The token cache of one source at ``root`` (the tokenize step's output dir)::

        tokenizer.json          copy of the tokenizer the cache was built with
        train/, validation/     one split dir each:
            shard-NNNNN-of-MMMMM.tokens.npy / .offsets.npy / .json   per input part
            .stats.json         exact totals (tokens, docs, UTF-8 bytes)
            ledger.json         the commit point: finished flag, shards, tokenizer identity

    A split dir is self-describing (its ledger names its tokenizer as ``../tokenizer.json``), so the
    reader and ``datakit cache inspect`` take split dirs directly."""

    SPLITS: ClassVar[tuple[str, ...]] = ("train", "validation")
    LEDGER: ClassVar[str] = "ledger.json"
    STATS: ClassVar[str] = ".stats.json"
    TOKENIZER: ClassVar[str] = TOKENIZER_FILE
    TOKENIZER_FROM_SPLIT: ClassVar[str] = f"../{TOKENIZER_FILE}"
    SHARD_PREFIX: ClassVar[str] = "shard-"

    @staticmethod
    def split_rel(split: str) -> str:
        """A split dir relative to the cache root (what the tokenize result records)."""
        return split

    @staticmethod
    def shard_names(index: int, total: int) -> dict[str, str]:
        """File names of shard ``index`` of ``total`` in a split dir: tokens, offsets, done marker."""
        stem = f"{TokenCacheDir.SHARD_PREFIX}{index:05d}-of-{total:05d}"
        return {"tokens": f"{stem}.tokens.npy", "offsets": f"{stem}.offsets.npy", "marker": f"{stem}.json"}

    @property
    def tokenizer(self) -> str:
        return join(self.root, self.TOKENIZER)

    def split(self, split: str) -> str:
        return join(self.root, self.split_rel(split))

    def ledger(self, split: str) -> str:
        return join(self.split(split), self.LEDGER)

    def stats(self, split: str) -> str:
        return join(self.split(split), self.STATS)


# ------------------------------------------------------------------------------------------ training


@dataclass(frozen=True)
class TrainDir(_Dir):
    """The training stage's output dir ``root``: metrics.jsonl (appended per log step; a resume trims
    it back to its checkpoint), loss.png, checkpoints/ and result.json (written last: the completion
    record). The remote mirror publishes exactly these names."""

    METRICS: ClassVar[str] = "metrics.jsonl"
    PLOT: ClassVar[str] = "loss.png"
    RESULT: ClassVar[str] = "result.json"
    CHECKPOINTS: ClassVar[str] = "checkpoints"

    @property
    def metrics(self) -> str:
        return join(self.root, self.METRICS)

    @property
    def plot(self) -> str:
        return join(self.root, self.PLOT)

    @property
    def result(self) -> str:
        return join(self.root, self.RESULT)

    @property
    def checkpoints(self) -> str:
        return join(self.root, self.CHECKPOINTS)

    @classmethod
    def rel_checkpoint(cls, name: str) -> str:
        """A checkpoint file (base name) relative to root, as results record it: relative paths stay
        valid when the run directory is moved or is a local mirror of a remote one."""
        return f"{cls.CHECKPOINTS}/{name.rstrip('/').rsplit('/', 1)[-1]}"
