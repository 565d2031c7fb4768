"""The manifest: one YAML file that declares a corpus and how to build it, validated before any work.

A manifest is a list of sources plus optional pipeline sections. The frozen dataclasses below are at
once the typed result and the schema (see `datakit.sources.schema`): to add a key, add a field. A
manifest holding only ``sources:`` is complete; every section has defaults.

Validation reports every problem at once, each as ``file:line:column: field.path: message`` — unknown
keys (with a "did you mean"), wrong types, values outside an enum or a range, duplicate source names,
duplicate YAML keys, globs that match nothing, missing paths, and http(s) URLs that do not answer a
HEAD — because a user fixing a manifest should not have to rerun it once per typo, and a bad manifest
must fail before anything is written.

Relative paths (source URIs, benchmark files, tokenizer, prefix, mirror) resolve against the
manifest's own directory, so a manifest means the same thing from any working directory. Top-level
keys starting with ``x-`` are ignored, so they can hold YAML anchors shared by several sources.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from datakit.sources.schema import (
    INVALID,
    Checker,
    Issue,
    describe_value,
    format_path,
    is_remote,
    resolve_local,
)
from datakit.sources.uris import check_uri, has_glob, http_probe, is_http, local_path
from datakit.sources.yamlpos import Located, Path, Pos, load_located

__all__ = [
    "FORMATS",
    "ManifestError",
    "ManifestInvalid",
    "SourceSpec",
    "NormalizeSpec",
    "DedupSpec",
    "BenchmarkSpec",
    "DecontamSpec",
    "TokenizeSpec",
    "TrainSpec",
    "Manifest",
    "load_manifest",
    "validate_manifest",
    "manifest_from_dict",
]

FORMATS = ("jsonl", "parquet", "text", "html", "warc")
Format = Literal["jsonl", "parquet", "text", "html", "warc"]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


# ----------------------------------------------------------------------------------------------
# errors


@dataclass(frozen=True)
class ManifestError:
    """One problem in a manifest, located: str() is ``file:line:column: field: message``."""

    file: str
    line: int | None
    column: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ManifestInvalid(ValueError):
    """Raised by `load_manifest` with every error found; str() is one error per line."""

    def __init__(self, errors: list[ManifestError]):
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


# ----------------------------------------------------------------------------------------------
# field checks


def _check_name(value: str) -> str | None:
    if not _NAME_RE.match(value):
        return f"invalid name {value!r}: use letters, digits, '.', '_' and '-' (it names output folders)"
    return None


def _check_sha(value: Any) -> str | None:
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        if not _SHA_RE.match(v):
            return f"{v!r} is not a sha256 (64 lowercase hex digits)"
    return None


def _check_uri(value: Any) -> str | None:
    uris = [value] if isinstance(value, str) else list(value)
    if not uris:
        return "empty list of URIs"
    if any(not u.strip() for u in uris):
        return "empty URI"
    return None


def _check_nonempty(value: Any) -> str | None:
    return "must not be empty" if not value else None


class _Spec:
    """Shared helpers for the manifest dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (tuples as lists), for logs, artifact records and identity hashing."""
        return _jsonable(dataclasses.asdict(self))  # type: ignore[call-overload]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, frozenset)):
        items = sorted(value) if isinstance(value, frozenset) else value
        return [_jsonable(v) for v in items]
    return value


# ----------------------------------------------------------------------------------------------
# sources


@dataclass(frozen=True)
class SourceSpec(_Spec):
    """One input corpus.

    ``uri``: local path, directory, glob, file:// or any fsspec URL (http(s), gs, s3, memory...), or a
    list of them (http(s) has no listing, so several web files are given as a list). ``sha256`` pins a
    single file's digest, or maps file names (relative names, basenames or full URLs) to digests.
    ``priority`` is the source's index in the manifest (earlier wins when deduplicating across sources).
    ``sha256`` may hold a dict, so a SourceSpec is not hashable; use its ``name``.
    """

    name: str = field(metadata={"check": _check_name})
    uri: str | tuple[str, ...] = field(metadata={"path": True, "check": _check_uri})
    format: Format
    text_field: str = "text"
    id_field: str | None = None
    revision: str | None = None
    sha256: str | dict[str, str] | None = field(default=None, metadata={"check": _check_sha})
    license: str | None = None
    weight: float = field(default=1.0, metadata={"min": 0})
    max_files: int | None = field(default=None, metadata={"min": 1})
    exclude: tuple[str, ...] = ()
    bare: bool = False
    dedup: Literal["exact", "none"] = "exact"
    # per-source override of normalize.html_main_content (html/warc); None = the section's value
    html_main_content: bool | None = None
    priority: int = field(default=0, metadata={"internal": "index"})

    @property
    def uris(self) -> tuple[str, ...]:
        return (self.uri,) if isinstance(self.uri, str) else tuple(self.uri)

    @property
    def remote(self) -> bool:
        """True when the files must be downloaded first (any non-local URI)."""
        return any(is_remote(u) for u in self.uris)

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        kinds = {is_remote(u) for u in self.uris}
        if len(kinds) > 1:
            return [("uri", "mixes local paths and remote URLs; split it into two sources")]
        if isinstance(self.sha256, str) and (len(self.uris) > 1 or any(has_glob(u) for u in self.uris)):
            return [("sha256", "a single sha256 pins a single file; map file names to digests instead")]
        return []


# ----------------------------------------------------------------------------------------------
# pipeline sections


@dataclass(frozen=True)
class NormalizeSpec(_Spec):
    """Normalize stage knobs (same names as `datakit.normalize.NormalizeConfig`)."""

    max_whitespace_run: int = field(default=128, metadata={"min": 1})
    max_record_chars: int = field(default=10_000_000, metadata={"min": 1})
    reject_fraction: float = field(default=0.01, metadata={"min": 0, "max": 1})
    strict: bool = False
    html_main_content: bool = True
    target_shard_bytes: int = field(default=268_435_456, metadata={"min": 1})


@dataclass(frozen=True)
class DedupSpec(_Spec):
    """Exact and MinHash fuzzy dedup. With ``threshold`` set, the dedup stage derives bands x rows
    from it (then bands/rows must not be given); otherwise bands x rows must fit in num_perms."""

    exact: bool = True
    fuzzy: bool = True
    ngram: int = field(default=5, metadata={"min": 1})
    ngram_unit: Literal["word", "char"] = "word"
    num_perms: int = field(default=112, metadata={"min": 1})
    bands: int = field(default=14, metadata={"min": 1})
    rows: int = field(default=8, metadata={"min": 1})
    threshold: float | None = field(default=None, metadata={"gt": 0, "lt": 1})
    seed: int = 42
    max_text_chars: int = field(default=500_000, metadata={"min": 1})
    verify: bool = True
    verify_threshold: float = field(default=0.7, metadata={"min": 0, "max": 1})

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        if self.threshold is not None:
            both = sorted({"bands", "rows"} & given)
            if both:
                return [(both[0], "give either threshold or bands/rows, not both")]
            return []
        if self.bands * self.rows > self.num_perms:
            name = "bands" if "bands" in given else ("rows" if "rows" in given else "num_perms")
            return [
                (name, f"bands x rows = {self.bands} x {self.rows} = {self.bands * self.rows} "
                       f"exceeds num_perms = {self.num_perms}")
            ]
        return []


@dataclass(frozen=True)
class BenchmarkSpec(_Spec):
    """A benchmark test set to decontaminate against: a local jsonl/parquet file (format from the
    extension unless given) and the fields holding its text."""

    name: str = field(metadata={"check": _check_name})
    path: str = field(metadata={"path": True})
    text_fields: tuple[str, ...] = field(default=("text",), metadata={"check": _check_nonempty})
    format: Literal["jsonl", "parquet"] | None = None


@dataclass(frozen=True)
class DecontamSpec(_Spec):
    benchmarks: tuple[BenchmarkSpec, ...] = ()
    ngram: int = field(default=13, metadata={"min": 1})

    def _cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]:
        seen: set[str] = set()
        for b in self.benchmarks:
            if b.name in seen:
                return [("benchmarks", f"duplicate benchmark name '{b.name}'")]
            seen.add(b.name)
        return []


@dataclass(frozen=True)
class TokenizeSpec(_Spec):
    """``tokenizer``: path or URL of a tokenizer.json; null trains a byte-level BPE on the corpus."""

    tokenizer: str | None = field(default=None, metadata={"path": True})
    vocab_size: int = field(default=8192, metadata={"min": 256})
    train_tokenizer_bytes: int = field(default=20_000_000, metadata={"min": 1})
    validation_fraction: float = field(default=0.01, metadata={"min": 0, "lt": 1})
    bos: bool = False
    seed: int = 0


def _unset(**meta: Any) -> Any:
    """A train field left to the preset when absent; an explicit null is an error."""
    return field(default=None, metadata={"nullable": False, **meta})


def _nullable(**meta: Any) -> Any:
    """A train field whose explicit null is meaningful (e.g. grad_clip: null = no clipping)."""
    return field(default=None, metadata=meta)


# Model-shape keys of the train section; `to_config_dict` nests them under "model".
TRAIN_MODEL_KEYS = (
    "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "rope_theta", "qk_norm",
    "tie_embeddings", "norm_eps", "init_std",
)


@dataclass(frozen=True)
class TrainSpec(_Spec):
    """The train section: a preset plus overrides. Every key mirrors `datakit.train.config.TrainConfig`
    (model-shape keys flattened in, see TRAIN_MODEL_KEYS); an absent key means "the preset's value".
    This class is the single list of allowed train keys: add a field here to allow a new one.
    ``lr`` and ``warmup`` are accepted as short names for learning_rate and warmup_steps."""

    preset: Literal["nano", "small", "150m"] = "nano"
    # loop
    seq_len: int | None = _unset(min=1)
    batch_size: int | None = _unset(min=1)
    steps: int | None = _unset(min=1)
    seed: int | None = _unset()
    data_seed: int | None = _unset()
    # optimizer and schedule
    learning_rate: float | None = _unset(gt=0, aliases=("lr",))
    min_lr_ratio: float | None = _unset(min=0, max=1)
    schedule: Literal["wsd", "cosine", "constant"] | None = _unset()
    warmup_steps: int | None = _unset(min=0, aliases=("warmup",))
    decay_fraction: float | None = _unset(min=0, max=1)
    weight_decay: float | None = _unset(min=0)
    beta1: float | None = _unset(min=0, lt=1)
    beta2: float | None = _unset(min=0, lt=1)
    adam_eps: float | None = _unset(gt=0)
    grad_clip: float | None = _nullable(gt=0)
    z_loss: float | None = _unset(min=0)
    decay_norms_and_embeddings: bool | None = _unset()
    compute_dtype: Literal["auto", "float32", "bfloat16"] | None = _unset()
    # cadence
    log_every: int | None = _unset(min=1)
    eval_every: int | None = _unset(min=0)
    eval_max_tokens: int | None = _nullable(min=1)
    eval_batch_size: int | None = _nullable(min=1)
    checkpoint_every: int | None = _unset(min=0)
    keep_checkpoints: int | None = _unset(min=1)
    # hardware
    num_devices: int | None = _nullable(min=1)
    peak_flops_per_device: float | None = _nullable(gt=0)
    prefetch: int | None = _unset(min=1)
    # model shape (flattened)
    d_model: int | None = _unset(min=1)
    n_layers: int | None = _unset(min=1)
    n_heads: int | None = _unset(min=1)
    n_kv_heads: int | None = _unset(min=1)
    d_ff: int | None = _unset(min=1)
    vocab_size: int | None = _nullable(min=1)
    rope_theta: float | None = _unset(gt=0)
    qk_norm: bool | None = _unset()
    tie_embeddings: bool | None = _unset()
    norm_eps: float | None = _unset(gt=0)
    init_std: float | None = _unset(gt=0)
    # the keys the user actually wrote (so an explicit null differs from an absent key)
    given: frozenset[str] = field(default=frozenset(), metadata={"internal": "given"})

    def overrides(self) -> dict[str, Any]:
        """The keys the manifest set (canonical names), flat."""
        return {name: getattr(self, name) for name in sorted(self.given) if name != "preset"}

    def to_config_dict(self) -> dict[str, Any]:
        """``{"preset": ..., <loop overrides>, "model": {<shape overrides>}}`` as `TrainConfig.from_dict`
        takes it."""
        out: dict[str, Any] = {"preset": self.preset}
        model: dict[str, Any] = {}
        for name, value in self.overrides().items():
            (model if name in TRAIN_MODEL_KEYS else out)[name] = value
        if model:
            out["model"] = model
        return out


# ----------------------------------------------------------------------------------------------
# the manifest


@dataclass(frozen=True)
class _TopLevel(_Spec):
    """The YAML's top level except ``sources`` (parsed item by item, see `_build_manifest`)."""

    prefix: str = field(default="datakit-out", metadata={"path": True})
    backend: Literal["local", "ray", "inline"] = "local"
    workers: int | None = field(default=None, metadata={"min": 1})
    mirror: str | None = field(default=None, metadata={"path": True})
    normalize: NormalizeSpec = field(default_factory=NormalizeSpec)
    dedup: DedupSpec = field(default_factory=DedupSpec)
    decontaminate: DecontamSpec = field(default_factory=DecontamSpec)
    tokenize: TokenizeSpec = field(default_factory=TokenizeSpec)
    train: TrainSpec | None = None


@dataclass(frozen=True)
class Manifest(_Spec):
    """A validated manifest. ``raw`` is the YAML as parsed (before defaults), ``path`` the file it came
    from (absolute; None when built in code)."""

    path: str | None
    sources: tuple[SourceSpec, ...]
    prefix: str = "datakit-out"
    backend: str = "local"
    workers: int | None = None
    mirror: str | None = None
    normalize: NormalizeSpec = field(default_factory=NormalizeSpec)
    dedup: DedupSpec = field(default_factory=DedupSpec)
    decontaminate: DecontamSpec = field(default_factory=DecontamSpec)
    tokenize: TokenizeSpec = field(default_factory=TokenizeSpec)
    train: TrainSpec | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def base_dir(self) -> str:
        return os.path.dirname(self.path) if self.path else os.getcwd()

    def source(self, name: str) -> SourceSpec:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(f"no source named {name!r}; sources: {', '.join(s.name for s in self.sources)}")

    @property
    def weights(self) -> dict[str, float]:
        """Training mixture weights by source name."""
        return {s.name: s.weight for s in self.sources}


_TOP_FIELDS = tuple(f.name for f in dataclasses.fields(_TopLevel))


def _build_manifest(
    data: Any, *, path: str | None, base_dir: str, check_uris: bool, timeout: float
) -> tuple[Manifest | None, list[Issue]]:
    """Validate plain data into a Manifest, collecting every issue (schema, duplicates, reachability).

    Sources are built one by one, apart from the other sections, so that one bad section does not
    hide the sources' own errors (or their reachability problems) from the same report.
    """
    checker = Checker(base_dir)
    if data is None:
        checker.issue((), "the manifest is empty; it needs at least a 'sources:' list")
        return None, checker.issues
    if not isinstance(data, dict):
        checker.issue((), "the manifest must be a mapping with a 'sources:' list")
        return None, checker.issues

    # Top-level keys starting with "x-" are free, to hold YAML anchors (as in docker-compose files).
    extensions = tuple(k for k in data if isinstance(k, str) and k.startswith("x-"))
    top = checker.build(_TopLevel, data, (), handled_elsewhere=("sources", *extensions))

    sources: list[SourceSpec] = []
    sources_raw = data.get("sources")
    if "sources" not in data:
        checker.issue((), "missing required key 'sources'", at="parent")
    elif not isinstance(sources_raw, list):
        checker.issue(("sources",), f"expected a list of sources, got {describe_value(sources_raw)}")
    elif not sources_raw:
        checker.issue(("sources",), "must list at least one source")
    else:
        first_index: dict[str, int] = {}
        for i, item in enumerate(sources_raw):
            spec = checker.build(SourceSpec, item, ("sources", i))
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str):
                if name in first_index:
                    checker.issue(
                        ("sources", i, "name"),
                        f"duplicate source name '{name}' (also sources[{first_index[name]}])",
                    )
                    continue
                first_index[name] = i
            if spec is not INVALID:
                sources.append(spec)

    if check_uris:
        _check_reachable(checker, data, base_dir, timeout)

    if checker.issues or top is INVALID:
        return None, checker.issues
    fields = {name: getattr(top, name) for name in _TOP_FIELDS}
    manifest = Manifest(path=path, sources=tuple(sources), raw=data, **fields)
    return manifest, []


def _field_value(cls: type, name: str, raw: Any, base_dir: str, default: Any = INVALID) -> Any:
    """One field of a raw mapping, coerced on its own (issues discarded; INVALID if it does not parse).

    Reachability probes read fields this way rather than from the built objects, so an unreachable
    URI is reported in the same round as unrelated errors in the same item or section."""
    if not isinstance(raw, dict) or name not in raw:
        return default
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}[name]
    return Checker(base_dir).coerce(typing.get_type_hints(cls)[name], raw[name], (), meta)


def _check_reachable(checker: Checker, data: dict, base_dir: str, timeout: float) -> None:
    """Source URIs, benchmark files and the tokenizer exist: probes run in parallel (HEADs are slow)."""
    jobs: list[tuple[Path, Any]] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        items = data.get("sources")
        for i, item in enumerate(items if isinstance(items, list) else []):
            uri = _field_value(SourceSpec, "uri", item, base_dir)
            exclude = _field_value(SourceSpec, "exclude", item, base_dir, default=())
            if uri is not INVALID and exclude is not INVALID:
                future = pool.submit(check_uri, uri, exclude=exclude, timeout=timeout)
                jobs.append((("sources", i, "uri"), future))
        decontam = data.get("decontaminate")
        benches = decontam.get("benchmarks") if isinstance(decontam, dict) else None
        for i, item in enumerate(benches if isinstance(benches, list) else []):
            bench_path = _field_value(BenchmarkSpec, "path", item, base_dir)
            if isinstance(bench_path, str):
                future = pool.submit(_check_local_file, bench_path)
                jobs.append((("decontaminate", "benchmarks", i, "path"), future))
        tok = _field_value(TokenizeSpec, "tokenizer", data.get("tokenize"), base_dir)
        if isinstance(tok, str):
            jobs.append((("tokenize", "tokenizer"), pool.submit(_check_tokenizer, tok, timeout)))
        for path, future in jobs:
            try:
                messages = future.result()
            except Exception as exc:  # a storage library failing in its own way: report, don't crash
                messages = [f"cannot check: {type(exc).__name__}: {exc}"]
            for message in messages:
                checker.issue(path, message)


def _check_local_file(p: str) -> list[str]:
    if is_remote(p):
        return [f"{p}: benchmark files must be local paths"]
    if not os.path.isfile(local_path(p)):
        return [f"file not found: {p}"]
    return []


def _check_tokenizer(tok: str, timeout: float) -> list[str]:
    if is_http(tok):
        reason = http_probe(tok, timeout=timeout)
        return [f"unreachable: {tok}: {reason}"] if reason else []
    if is_remote(tok):
        return check_uri(tok, timeout=timeout)
    if not os.path.isfile(local_path(tok)):
        hint = ""
        if not tok.endswith(".json"):
            hint = (" (hub names like 'gpt2' cannot be fetched here; point at a tokenizer.json file "
                    "or leave tokenizer null to train one)")
        return [f"tokenizer file not found: {tok}{hint}"]
    return []


def _locate(issue: Issue, located_marks: dict[Path, tuple[Pos, Pos]]) -> Pos | None:
    """Position for an issue: the field's key, or for a missing key its mapping; else the nearest
    ancestor that has a position."""
    path = issue.path
    if issue.at == "parent":
        mark = located_marks.get(path)
        if mark is not None:
            return mark[1]
    while True:
        mark = located_marks.get(path)
        if mark is not None:
            return mark[0]
        if not path:
            return None
        path = path[:-1]


def _errors(file: str, issues: list[Issue], marks: dict[Path, tuple[Pos, Pos]]) -> list[ManifestError]:
    out = []
    for issue in issues:
        pos = _locate(issue, marks)
        out.append(
            ManifestError(
                file=file,
                line=pos.line if pos else None,
                column=pos.column if pos else None,
                field=format_path(issue.path),
                message=issue.message,
            )
        )
    return out


def _load(
    path: str | os.PathLike, *, check_uris: bool, timeout: float
) -> tuple[Manifest | None, list[ManifestError]]:
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None, [ManifestError(file, None, None, "", "manifest file not found")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [ManifestError(file, None, None, "", f"cannot read manifest: {exc}")]
    located: Located = load_located(text)
    errors = [
        ManifestError(
            file,
            p.pos.line if p.pos else None,
            p.pos.column if p.pos else None,
            format_path(p.path),
            p.message,
        )
        for p in located.problems
    ]
    if located.value is None and located.problems:
        return None, errors  # a syntax error: nothing further can be checked
    abspath = os.path.abspath(file)
    manifest, issues = _build_manifest(
        located.value, path=abspath, base_dir=os.path.dirname(abspath), check_uris=check_uris, timeout=timeout
    )
    errors += _errors(file, issues, located.marks)
    # File order; ties keep discovery order (the sort is stable).
    errors.sort(key=lambda e: (e.line or 0, e.column or 0))
    return (manifest if not errors else None), errors


def validate_manifest(
    path: str | os.PathLike, *, check_uris: bool = True, timeout: float = 5.0
) -> list[ManifestError]:
    """Every problem in the manifest (empty list = valid). ``check_uris=False`` skips the file and
    network probes (offline editing); ``timeout`` bounds each HEAD request."""
    return _load(path, check_uris=check_uris, timeout=timeout)[1]


def load_manifest(path: str | os.PathLike, *, check_uris: bool = True, timeout: float = 5.0) -> Manifest:
    """Load and validate; raises ManifestInvalid carrying every error."""
    manifest, errors = _load(path, check_uris=check_uris, timeout=timeout)
    if errors or manifest is None:
        raise ManifestInvalid(errors)
    return manifest


def manifest_from_dict(
    data: dict[str, Any], *, base_dir: str | None = None, check_uris: bool = True, timeout: float = 5.0
) -> Manifest:
    """Build a manifest in code (same validation; errors carry field paths but no line numbers).
    Relative paths resolve against ``base_dir`` (default: the current directory)."""
    base = os.path.abspath(base_dir or os.getcwd())
    manifest, issues = _build_manifest(data, path=None, base_dir=base, check_uris=check_uris, timeout=timeout)
    if issues or manifest is None:
        raise ManifestInvalid(_errors("<manifest>", issues, {}))
    return manifest


def resolve_path(manifest: Manifest, value: str) -> str:
    """Resolve a path the way the manifest's own paths were (e.g. for a CLI override)."""
    return resolve_local(value, manifest.base_dir)
