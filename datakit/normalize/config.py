"""Configuration, typed result and errors of the normalize stage.

The result is what downstream steps read (through the step runner's artifact record): relative paths
only, so a result stays valid when its output directory is moved or mirrored, and a schema version so
an old artifact is refused instead of misread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class NormalizeConfig:
    """Knobs of the normalize stage: the manifest's `normalize:` section and the stage's runtime config.

    `max_record_chars` caps a record's text; raw units (a jsonl line, a file, a WARC payload) above
    `raw_bytes_per_char * max_record_chars` bytes are rejected before parsing, to bound memory.
    `target_shard_bytes` sizes the units of input files, `part_bytes` the output parts a unit is split
into by id (`units.py`).
    `input_shard_bytes`/`max_files_per_input_shard` size the *read* tasks (many small files are packed
    into one task); they never change the outputs, so they stay out of the step identity
    (``identity: False``).
    """

    max_whitespace_run: int = field(default=128, metadata={"min": 1})
    max_record_chars: int = field(default=10_000_000, metadata={"min": 1})
    reject_fraction: float = field(default=0.01, metadata={"min": 0, "max": 1})
    strict: bool = False
    html_main_content: bool = True
    # The most estimated text per unit of input, i.e. per output part (compressed inputs count several
    # times their size; units.py: units hold about half of it to all of it): small enough that a few
    # hundred MB feed every worker downstream.
    target_shard_bytes: int = field(default=64 * 2**20, metadata={"min": 1})
    # The most estimated text per output part: a unit is written as ceil(its text / part_bytes) parts,
    # each a range of the id space (units.py), so every per-file stage downstream has several tasks even
    # for a source of two files or of one huge file. A function of sizes only: outputs never depend on
    # the worker count.
    part_bytes: int = field(default=8 * 2**20, metadata={"min": 1})
    input_shard_bytes: int = field(default=64 * 2**20, metadata={"min": 1, "identity": False})
    max_files_per_input_shard: int = field(default=2000, metadata={"min": 1, "identity": False})
    # Stored input bytes up to which a read (or finish) job runs in the step's own process on the local
    # backend: starting the worker pool (the zygote's interpreter and imports, then the readers in each
    # worker: 0.5-0.8 CPU-s) costs more than reading this much (about 0.3 CPU-s), which is what an edit of
    # one file recomputes.
    # Outputs never depend on where a job runs (0: always the pool). The rule is the engine's
    # (`datakit.shuffle.small_job_config`); this key lets a manifest move normalize's limit.
    inline_bytes: int = field(default=8 * 2**20, metadata={"min": 0, "identity": False})
    raw_bytes_per_char: int = field(default=8, metadata={"min": 1})
    # A document more than this fraction of whose characters are U+FFFD (undecodable bytes), control
    # characters or NULs is not text: it is rejected with reason `binary` (file:line, counted). 1 turns
    # the check off. Real text sits far below (a stray NUL, a form feed); random bytes sit near 0.5+.
    binary_fraction: float = field(default=0.3, metadata={"min": 0, "max": 1})
    # The same verdict for control characters alone (C0 but tab and newlines, DEL, C1, NUL), which text
    # never holds at that rate while a mis-decoded page may hold many U+FFFD: random bytes decoded one
    # byte a character (JSON "\u0085\u0003...") are about 0.23 controls and no U+FFFD at all.
    control_fraction: float = field(default=0.1, metadata={"min": 0, "max": 1})
    # Control characters (NUL, escaped \u0000 in JSON, other C0/C1 controls; tab, newlines and form
    # feed are text) in kept documents are always counted (`control_chars`, `nul_chars`); `strip`
    # removes them from the text, `keep` leaves the text as it was.
    control_chars: Literal["keep", "strip"] = "keep"

    @property
    def max_record_bytes(self) -> int:
        """The raw size (bytes of one line, file or WARC payload) above which a unit is rejected unparsed."""
        return self.raw_bytes_per_char * self.max_record_chars

    def __post_init__(self) -> None:
        for name in ("max_whitespace_run", "max_record_chars", "target_shard_bytes", "part_bytes", "input_shard_bytes",
                     "max_files_per_input_shard", "raw_bytes_per_char"):
            if getattr(self, name) < 1:
                raise ValueError(f"NormalizeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.reject_fraction <= 1:
            raise ValueError(f"NormalizeConfig.reject_fraction must be in [0, 1], got {self.reject_fraction}")
        for name in ("binary_fraction", "control_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"NormalizeConfig.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.control_chars not in ("keep", "strip"):
            raise ValueError(f"NormalizeConfig.control_chars must be 'keep' or 'strip', got {self.control_chars!r}")


@dataclass(frozen=True)
class PlannedFile:
    """One input file as the run planned it: where it is, its size and its content hash (sha256;
    None when unknown). Normalize fails, naming the file, when what it reads differs."""

    path: str
    size: int
    sha256: str | None = None


# Counters every result carries (zero when nothing happened), in a stable order.
COUNTER_NAMES = (
    "records_in", "records_out", "dups", "empty_dropped", "rejects", "whitespace_compacted",
    "decode_replacements", "empty_missing_field", "empty_null", "empty_blank", "whitespace_runs_capped",
    "blank_lines", "warc_non_html_skipped", "html_deep_fallback", "hidden_files_skipped", "control_chars",
    "nul_chars", "control_chars_stripped",
)


@dataclass
class NormalizeResult:
    """What one normalize step produced. Paths are relative to the step's `out_dir`.

    Invariant: records_in == records_out + dups + empty_dropped + rejects.
    """

    source: str
    fmt: str
    num_shards: int
    main_files: list[str]
    dups_files: list[str]
    rejects_files: list[str]
    counters: dict[str, int]
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)
    num_files: int = 0
    input_bytes: int = 0
    # Records read per input file, by its name relative to the source root (empty when a unit taken from
    # an earlier build did not record them): what `run --dry-run` says a changed or removed file costs.
    input_documents: dict[str, int] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NormalizeResult":
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"normalize result has schema_version {version!r}; this datakit reads version {SCHEMA_VERSION} "
                "(rebuild the normalize step)"
            )
        names = {f.name for f in fields(cls)}
        missing = [n for n in ("source", "fmt", "num_shards", "main_files", "dups_files", "rejects_files",
                               "counters") if n not in data]
        if missing:
            raise ValueError(f"normalize result is missing {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def check_counts(self) -> bool:
        c = self.counters
        return c["records_in"] == c["records_out"] + c["dups"] + c["empty_dropped"] + c["rejects"]


class NormalizeError(RuntimeError):
    """The normalize step failed; `result` holds what was produced when outputs exist (for inspection)."""

    def __init__(self, message: str, result: NormalizeResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class SchemaConflictError(NormalizeError):
    """One column has incompatible types in two input files (e.g. int in one, string in another)."""
