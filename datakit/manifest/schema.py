"""Typed validation of plain YAML values against frozen dataclasses.

The manifest's dataclasses ARE its schema: a field's type hint says what the YAML may hold, its
default makes the key optional, and ``field(metadata=...)`` adds bounds and checks. Adding a manifest
key is therefore one line in one dataclass, and validation, defaults and the typed result cannot drift
apart. The checker never stops at the first problem: it collects every issue with the path of the
field, so a user fixes a manifest in one round trip.

Field metadata understood here:

- ``min`` / ``max``: inclusive numeric bounds; ``gt`` / ``lt``: exclusive bounds.
- ``nullable=False``: an explicit ``null`` is an error even though the type is ``X | None`` (used when
  ``None`` only means "not given", so a preset or stage default applies).
- ``path=True``: a relative local path is resolved against the manifest's directory.
- ``check``: ``fn(value) -> str | None``, an extra check returning an error message.
- ``aliases``: other key names accepted for this field.
- ``internal``: not settable from YAML; ``"index"`` = the item's index in its list, ``"given"`` =
  the frozenset of keys the user actually wrote in this mapping.
- ``flatten=True`` on a dataclass-typed field: that dataclass's keys are written at this level (the
  train section's model shape: ``d_model: 128`` next to ``steps: 100``).
- ``probe``: ``fn(value, timeout) -> list[str]``, a reachability check (file exists, URL answers) run in
  parallel after parsing, only when the caller asks for probes. A dataclass may also define
  ``_probe(self, timeout) -> list[tuple[field, message]]`` for checks that read the data it names
  (a benchmark file holds its declared text fields).
- ``identity=False``: the field never changes a stage's output (read-task sizes, cadence); stages leave
  it out of their steps' identities. The checker itself ignores it.

A dataclass may define a classmethod ``_manifest_defaults(raw: dict) -> dict`` giving defaults that
depend on what the user wrote (the train section's ``preset`` picks the defaults of every other key);
keys it returns override the fields' own defaults, a flattened field's default object included.

A dataclass may define ``_cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]`` returning
``(field, message)`` pairs for rules spanning several fields (``given`` = field names the user wrote);
``field`` may be a tuple, a path below the mapping, to point at a nested key.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from datakit.manifest.yamlpos import Path


class _Invalid:
    def __repr__(self) -> str:
        return "INVALID"


INVALID: Any = _Invalid()
_NONE = type(None)


@dataclass(frozen=True)
class Issue:
    """One schema problem. ``at="key"`` points at the field itself, ``"parent"`` at its mapping."""

    path: Path
    message: str
    at: str = "key"


def format_path(path: Path) -> str:
    """``("sources", 2, "format")`` -> ``"sources[2].format"``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def resolve_local(value: str, base_dir: str) -> str:
    """Resolve a manifest path: remote URIs and file:// URIs untouched, plain relative paths joined to
    the manifest's directory, ``~`` expanded."""
    if "://" in value:
        return value
    value = os.path.expanduser(value)
    if not os.path.isabs(value):
        value = os.path.join(base_dir, value)
    return os.path.normpath(value)


def _describe_type(tp: Any) -> str:
    origin = get_origin(tp)
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is _NONE:
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe_type(a) for a in get_args(tp))
    if origin is tuple:
        return f"a list of {_plural(get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _plural(tp: Any) -> str:
    return {str: "strings", int: "integers", float: "numbers", bool: "booleans"}.get(tp, "mappings")


def describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return f"a date ({value})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _accepts(tp: Any, value: Any) -> bool:
    """Does `value`'s shape match `tp` (used to pick a Union member before coercing)?"""
    origin = get_origin(tp)
    if tp is str:
        return isinstance(value, str)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(tp))
    if origin is tuple:
        return isinstance(value, list)
    if origin is dict or dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return False


class Checker:
    """Builds dataclass instances from plain values, collecting `Issue`s instead of raising."""

    def __init__(self, base_dir: str):
        self.base_dir = base_dir
        self.issues: list[Issue] = []
        self.probes: list[tuple[Path, Any, Any]] = []  # (field path, probe fn, value) for `run_probes`

    def issue(self, path: Path, message: str, at: str = "key") -> None:
        self.issues.append(Issue(path, message, at))

    # ----- dataclasses ------------------------------------------------------------------------
    def build(self, cls: type, value: Any, path: Path, *, handled_elsewhere: tuple[str, ...] = (),
              fixed: dict[str, Any] | None = None, defaults: dict[str, Any] | None = None) -> Any:
        """Instantiate `cls` from the mapping `value`; INVALID (with issues recorded) if it cannot.

        Keys in ``handled_elsewhere`` are known (not "unknown key", offered as suggestions) but are
        left to the caller, which passes the built values in ``fixed``. ``defaults`` replace the fields'
        own defaults (a flattened field's default object, or the class's `_manifest_defaults`).
        """
        if not isinstance(value, dict):
            self.issue(path, f"expected a mapping, got {describe_value(value)}")
            return INVALID
        before = len(self.issues)
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        defaults = {**(defaults or {}), **self._class_defaults(cls, value, path)}
        by_key = self._keys(fields, hints)
        given = self._given_keys(value, path, by_key, handled_elsewhere)
        kwargs: dict[str, Any] = dict(fixed or {})
        for f in fields:
            if f.name in kwargs:
                continue
            internal = f.metadata.get("internal")
            if internal == "index":
                kwargs[f.name] = path[-1] if path and isinstance(path[-1], int) else 0
            elif internal == "given":
                kwargs[f.name] = frozenset(given)
            elif internal:
                continue
            elif f.metadata.get("flatten"):
                sub = {k: value[k] for k in given.get(f.name, ())}
                kwargs[f.name] = self.build(hints[f.name], sub, path, defaults=_as_defaults(defaults.get(f.name)))
            elif f.name in given:
                key = given[f.name]
                kwargs[f.name] = self.coerce(hints[f.name], value[key], path + (key,), f.metadata)
            elif f.name in defaults:
                kwargs[f.name] = defaults[f.name]
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.issue(path, f"missing required key '{f.name}'", at="parent")
                kwargs[f.name] = INVALID
            elif f.metadata.get("path") and isinstance(f.default, str):
                # A default path means the same as if the user had written it in the manifest.
                kwargs[f.name] = resolve_local(f.default, self.base_dir)
        if len(self.issues) > before or any(v is INVALID for v in kwargs.values()):
            return INVALID
        obj = cls(**kwargs)
        return self._cross_checked(obj, given, path, before)

    def _keys(self, fields: list[dataclasses.Field], hints: dict[str, Any]) -> dict[str, dataclasses.Field]:
        """Every key a mapping may hold -> its field (aliases and flattened sub-keys included)."""
        by_key: dict[str, dataclasses.Field] = {}
        for f in fields:
            if f.metadata.get("internal"):
                continue
            if f.metadata.get("flatten"):
                for sub in dataclasses.fields(hints[f.name]):
                    if sub.init and not sub.metadata.get("internal"):
                        by_key[sub.name] = f
                continue
            by_key[f.name] = f
            for alias in f.metadata.get("aliases", ()):
                by_key[alias] = f
        return by_key

    def _given_keys(self, value: dict, path: Path, by_key: dict[str, dataclasses.Field],
                    handled_elsewhere: tuple[str, ...]) -> dict[str, Any]:
        """Field name -> the key the user wrote (a flattened field: the list of its keys written)."""
        given: dict[str, Any] = {}
        for key in value:
            if key in handled_elsewhere:
                continue
            f = by_key.get(key)
            if f is None:
                self.issue(path + (key,), _unknown_key_message(key, [*by_key, *handled_elsewhere]))
            elif f.metadata.get("flatten"):
                given.setdefault(f.name, []).append(key)
            elif f.name in given:
                self.issue(path + (key,), f"'{key}' and '{given[f.name]}' set the same field; give one")
            else:
                given[f.name] = key
        return given

    def _class_defaults(self, cls: type, value: dict, path: Path) -> dict[str, Any]:
        hook = getattr(cls, "_manifest_defaults", None)
        if hook is None:
            return {}
        try:
            return hook(value)
        except ValueError:
            return {}  # the offending key is reported when its own field is checked

    def _cross_checked(self, obj: Any, given: dict[str, Any], path: Path, before: int) -> Any:
        if hasattr(obj, "_probe"):  # a check that reads the data it names: run with the other probes
            self.probes.append((path, _object_probe, obj))
        cross = getattr(obj, "_cross_check", None)
        if cross is None:
            return obj
        for name, message in cross(frozenset(given)):
            if isinstance(name, tuple):  # a path below this mapping, e.g. ("quality", "sources", "kode")
                self.issue(path + name, message)
                continue
            key = given.get(name, name)
            if isinstance(key, list):  # a flattened field: point at its first key
                key = key[0]
            self.issue(path + (key,), message, at="key" if name in given else "parent")
        return INVALID if len(self.issues) > before else obj

    # ----- values -----------------------------------------------------------------------------
    def coerce(self, tp: Any, value: Any, path: Path, meta: typing.Mapping[str, Any]) -> Any:
        if tp is Any:  # free-form (a user stage's own config): any YAML value, kept as written
            return value
        origin = get_origin(tp)
        members = get_args(tp) if origin in (Union, types.UnionType) else (tp,)
        if value is None:
            if _NONE in members and meta.get("nullable", True):
                return None
            self.issue(path, f"expected {_describe_type(_without_none(members))}, got null")
            return INVALID
        candidates = [m for m in members if m is not _NONE]
        chosen = next((m for m in candidates if _accepts(m, value)), None)
        if chosen is None:
            # A lone string where a list of strings is wanted is the list of one.
            chosen = next(
                (m for m in candidates if get_origin(m) is tuple and get_args(m)[0] is str), None
            )
            if chosen is not None and isinstance(value, str):
                value = [value]
            else:
                self._type_issue(_without_none(members), value, path)
                return INVALID
        if not self._in_bounds(value, path, meta):
            return INVALID
        out = self._coerce_one(chosen, value, path)
        if out is INVALID:
            return INVALID
        return self._post(out, path, meta)

    def _coerce_one(self, tp: Any, value: Any, path: Path) -> Any:
        origin = get_origin(tp)
        if tp is float:
            return float(value)
        if tp in (str, int, bool):
            return value
        if origin is Literal:
            return value
        if origin is tuple:
            item_tp = get_args(tp)[0]
            items = []
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item_tp):
                    items.append(self.build(item_tp, item, path + (i,)))
                else:
                    items.append(self.coerce(item_tp, item, path + (i,), {}))
            return INVALID if any(x is INVALID for x in items) else tuple(items)
        if origin is dict:
            _, val_tp = get_args(tp)
            out = {}
            for k, v in value.items():
                out[str(k)] = self.coerce(val_tp, v, path + (str(k),), {})
            return INVALID if any(x is INVALID for x in out.values()) else out
        if dataclasses.is_dataclass(tp):
            return self.build(tp, value, path)
        raise TypeError(f"schema type {tp!r} not supported")  # a bug in a dataclass, not user input

    def _type_issue(self, tp: Any, value: Any, path: Path) -> None:
        if get_origin(tp) is Literal:
            choices = ", ".join(str(a) for a in get_args(tp))
            self.issue(path, f"{value!r} is not one of {choices}")
            return
        message = f"expected {_describe_type(tp)}, got {describe_value(value)}"
        wants_str = tp is str or (get_origin(tp) in (Union, types.UnionType) and str in get_args(tp))
        if wants_str and isinstance(value, (int, float, bool, datetime.date)):
            message += "; quote it to keep it a string"
        self.issue(path, message)

    def _in_bounds(self, value: Any, path: Path, meta: typing.Mapping[str, Any]) -> bool:
        """Numeric bounds, checked on the value as written (so messages show what the user typed)."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return True
        lo, hi = meta.get("min"), meta.get("max")
        gt, lt = meta.get("gt"), meta.get("lt")
        bad = (
            (lo is not None and value < lo)
            or (hi is not None and value > hi)
            or (gt is not None and value <= gt)
            or (lt is not None and value >= lt)
        )
        if bad:
            self.issue(path, f"must be {_bounds_text(lo, hi, gt, lt)}, got {value}")
        return not bad

    def _post(self, value: Any, path: Path, meta: typing.Mapping[str, Any]) -> Any:
        """Custom checks and path resolution, after the type is known to be right.

        Path fields expand environment variables first ($HOME, ${DATA_ROOT}, and $PYTHON_STDLIB which
        datakit sets to this interpreter's standard library), so one manifest works across machines.
        """
        if meta.get("path"):
            if isinstance(value, str):
                value = expand_vars(value)
            elif isinstance(value, tuple):
                value = tuple(expand_vars(v) if isinstance(v, str) else v for v in value)
        check = meta.get("check")
        if check is not None:
            message = check(value)
            if message:
                self.issue(path, message)
                return INVALID
        if meta.get("path"):
            if isinstance(value, str):
                value = resolve_local(value, self.base_dir)
            elif isinstance(value, tuple):
                value = tuple(resolve_local(v, self.base_dir) for v in value)
        if meta.get("probe") is not None:
            self.probes.append((path, meta["probe"], value))
        return value

    def run_probes(self, timeout: float) -> None:
        """Run every recorded reachability probe in parallel (HEAD requests are slow) and record what
        they report; a probe that crashes in its own way is reported, never raised."""
        from concurrent.futures import ThreadPoolExecutor

        if not self.probes:
            return
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [(path, pool.submit(fn, value, timeout)) for path, fn, value in self.probes]
            for path, future in futures:
                try:
                    messages = future.result()
                except Exception as exc:  # noqa: BLE001 - a storage library failing in its own way
                    messages = [f"cannot check: {type(exc).__name__}: {exc}"]
                for message in messages:
                    if isinstance(message, tuple):  # (field, message) from an object's _probe
                        self.issue(path + (message[0],), message[1])
                    else:
                        self.issue(path, message)


def _object_probe(obj: Any, timeout: float) -> list[tuple[str, str]]:
    return obj._probe(timeout)


def _as_defaults(obj: Any) -> dict[str, Any]:
    """A default object (e.g. a preset's ModelConfig) as per-field defaults for `Checker.build`."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}


def expand_vars(value: str) -> str:
    """``value`` with environment variables expanded, ``$PYTHON_STDLIB`` (this interpreter's standard
    library) among them. sysconfig is asked once per process: it costs ~0.3 ms a call, and a manifest
    has a hundred string values."""
    if "PYTHON_STDLIB" not in os.environ:
        import sysconfig

        os.environ["PYTHON_STDLIB"] = sysconfig.get_paths()["stdlib"]
    return os.path.expandvars(value) if "$" in value else value


def _without_none(members: tuple) -> Any:
    rest = tuple(m for m in members if m is not _NONE)
    if len(rest) == 1:
        return rest[0]
    return Union[rest]  # type: ignore[valid-type]


def _bounds_text(lo: Any, hi: Any, gt: Any, lt: Any) -> str:
    parts = []
    if lo is not None:
        parts.append(f">= {lo}")
    if gt is not None:
        parts.append(f"> {gt}")
    if hi is not None:
        parts.append(f"<= {hi}")
    if lt is not None:
        parts.append(f"< {lt}")
    return " and ".join(parts)


def _unknown_key_message(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key '{key}' (did you mean '{close[0]}'?)"
    return f"unknown key '{key}' (allowed: {', '.join(sorted(allowed))})"
