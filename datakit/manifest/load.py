"""Loading a manifest: YAML with positions -> validated `Manifest`, or every error at once, located.

Validation reports every problem in one round — unknown keys (with a "did you mean"), wrong types,
values outside an enum or a range, duplicate source names, duplicate YAML keys, globs that match
nothing, missing paths, and http(s) URLs that do not answer a HEAD — because a user fixing a manifest
should not have to rerun it once per typo, and a bad manifest must fail before anything is written.

The stage sections are not known here: callers pass them (`Section`: key, config dataclass, optional).
`datakit.pipeline.load_manifest` passes the stage registry's sections; that is the function users call.

Relative paths (source URIs, benchmark files, tokenizer, prefix, mirror) resolve against the
manifest's own directory, so a manifest means the same thing from any working directory. Top-level
keys starting with ``x-`` are ignored, so they can hold YAML anchors shared by several sources.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

from datakit.core.uris import check_uri
from datakit.manifest.errors import ManifestError, ManifestInvalid
from datakit.manifest.model import Manifest, SourceSpec
from datakit.manifest.schema import INVALID, Checker, Issue, describe_value, format_path
from datakit.manifest.yamlpos import Located, Path, Pos, load_located


@dataclass(frozen=True)
class Section:
    """A top-level manifest section owned by a stage: its key, its config dataclass, and whether leaving
    it out means "this stage does not run" (optional: the value is None) or "all defaults"."""

    key: str
    config: type
    optional: bool = False


def _build_manifest(data: Any, *, path: str | None, base_dir: str, check_uris: bool, timeout: float,
                    sections: Sequence[Section]) -> tuple[Manifest | None, list[Issue]]:
    """Validate plain data into a Manifest, collecting every issue (schema, duplicates, reachability).

    Sources and each section are built on their own, so one bad section does not hide the sources' own
    errors (or their reachability problems) from the same report.
    """
    checker = Checker(base_dir)
    if data is None:
        checker.issue((), "the manifest is empty; it needs at least a 'sources:' list")
        return None, checker.issues
    if not isinstance(data, dict):
        checker.issue((), "the manifest must be a mapping with a 'sources:' list")
        return None, checker.issues

    sources = _build_sources(checker, data)
    built = {s.key: _build_section(checker, data, s) for s in sections}
    # Top-level keys starting with "x-" are free, to hold YAML anchors (as in docker-compose files).
    extensions = tuple(k for k in data if isinstance(k, str) and k.startswith("x-"))
    fixed = {"path": path, "sources": tuple(sources), "sections": built, "raw": data}
    manifest = checker.build(Manifest, data, (), fixed=fixed,
                             handled_elsewhere=("sources", *(s.key for s in sections), *extensions))
    if check_uris:
        _check_sources_reachable(checker, data, base_dir, timeout)
        checker.run_probes(timeout)
    if checker.issues or manifest is INVALID or any(v is INVALID for v in built.values()):
        return None, checker.issues
    return manifest, []


def _build_sources(checker: Checker, data: dict) -> list[SourceSpec]:
    sources: list[SourceSpec] = []
    raw = data.get("sources")
    if "sources" not in data:
        checker.issue((), "missing required key 'sources'", at="parent")
        return sources
    if not isinstance(raw, list):
        checker.issue(("sources",), f"expected a list of sources, got {describe_value(raw)}")
        return sources
    if not raw:
        checker.issue(("sources",), "must list at least one source")
        return sources
    first_index: dict[str, int] = {}
    for i, item in enumerate(raw):
        spec = checker.build(SourceSpec, item, ("sources", i))
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str):
            if name in first_index:
                checker.issue(("sources", i, "name"), f"duplicate source name '{name}' (also sources[{first_index[name]}])")
                continue
            first_index[name] = i
        if spec is not INVALID:
            sources.append(spec)
    return sources


def _build_section(checker: Checker, data: dict, section: Section) -> Any:
    value = data.get(section.key)
    if value is None and section.optional:
        return None
    return checker.build(section.config, {} if value is None else value, (section.key,))


def _field_value(cls: type, name: str, raw: Any, base_dir: str, default: Any = INVALID) -> Any:
    """One field of a raw mapping, coerced on its own (issues discarded; INVALID if it does not parse).

    Reachability probes read fields this way rather than from the built objects, so an unreachable
    URI is reported in the same round as unrelated errors in the same item."""
    if not isinstance(raw, dict) or name not in raw:
        return default
    meta = {f.name: f.metadata for f in dataclasses.fields(cls)}[name]
    return Checker(base_dir).coerce(typing.get_type_hints(cls)[name], raw[name], (), meta)


def _check_sources_reachable(checker: Checker, data: dict, base_dir: str, timeout: float) -> None:
    """Every source URI names data (globs match, URLs answer): probes run in parallel."""
    items = data.get("sources")
    jobs: list[tuple[Path, Any]] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        for i, item in enumerate(items if isinstance(items, list) else []):
            uri = _field_value(SourceSpec, "uri", item, base_dir)
            exclude = _field_value(SourceSpec, "exclude", item, base_dir, default=())
            follow = _field_value(SourceSpec, "follow_symlinks", item, base_dir, default=False)
            if uri is not INVALID and exclude is not INVALID and follow is not INVALID:
                jobs.append((("sources", i, "uri"), pool.submit(check_uri, uri, exclude=exclude, timeout=timeout,
                                                                follow_symlinks=follow)))
        for path, future in jobs:
            try:
                messages = future.result()
            except Exception as exc:  # noqa: BLE001 - a storage library failing in its own way: report it
                messages = [f"cannot check: {type(exc).__name__}: {exc}"]
            for message in messages:
                checker.issue(path, message)


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
        out.append(ManifestError(file=file, line=pos.line if pos else None, column=pos.column if pos else None,
                                 field=format_path(issue.path), message=issue.message))
    return out


def _load(path: str | os.PathLike, *, check_uris: bool, timeout: float,
          sections: Sequence[Section]) -> tuple[Manifest | None, list[ManifestError]]:
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None, [ManifestError(file, None, None, "", "manifest file not found")]
    except (OSError, UnicodeDecodeError) as exc:
        return None, [ManifestError(file, None, None, "", f"cannot read manifest: {exc}")]
    located: Located = load_located(text)
    errors = [ManifestError(file, p.pos.line if p.pos else None, p.pos.column if p.pos else None,
                            format_path(p.path), p.message) for p in located.problems]
    if located.value is None and located.problems:
        return None, errors  # a syntax error: nothing further can be checked
    abspath = os.path.abspath(file)
    manifest, issues = _build_manifest(located.value, path=abspath, base_dir=os.path.dirname(abspath),
                                       check_uris=check_uris, timeout=timeout, sections=sections)
    errors += _errors(file, issues, located.marks)
    # File order; ties keep discovery order (the sort is stable).
    errors.sort(key=lambda e: (e.line or 0, e.column or 0))
    return (manifest if not errors else None), errors


def validate_manifest(path: str | os.PathLike, sections: Sequence[Section], *, check_uris: bool = True,
                      timeout: float = 5.0) -> list[ManifestError]:
    """Every problem in the manifest (empty list = valid). ``check_uris=False`` skips the file and
    network probes (offline editing); ``timeout`` bounds each HEAD request."""
    return _load(path, check_uris=check_uris, timeout=timeout, sections=sections)[1]


def load_manifest(path: str | os.PathLike, sections: Sequence[Section], *, check_uris: bool = True,
                  timeout: float = 5.0) -> Manifest:
    """Load and validate; raises ManifestInvalid carrying every error."""
    manifest, errors = _load(path, check_uris=check_uris, timeout=timeout, sections=sections)
    if errors or manifest is None:
        raise ManifestInvalid(errors)
    return manifest


def manifest_from_dict(data: dict[str, Any], sections: Sequence[Section], *, base_dir: str | None = None,
                       check_uris: bool = True, timeout: float = 5.0) -> Manifest:
    """Build a manifest in code (same validation; errors carry field paths but no line numbers).
    Relative paths resolve against ``base_dir`` (default: the current directory)."""
    base = os.path.abspath(base_dir or os.getcwd())
    manifest, issues = _build_manifest(data, path=None, base_dir=base, check_uris=check_uris, timeout=timeout,
                                       sections=sections)
    if issues or manifest is None:
        raise ManifestInvalid(_errors("<manifest>", issues, {}))
    return manifest
