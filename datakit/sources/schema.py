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

A dataclass may define ``_cross_check(self, given: frozenset[str]) -> list[tuple[str, str]]`` returning
``(field, message)`` pairs for rules spanning several fields (``given`` = field names the user wrote).
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

from datakit.sources.yamlpos import Path


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


def is_remote(uri: str) -> bool:
    """True for anything with a protocol other than file:// (kept here so schema needs no fetch import)."""
    return "://" in uri and not uri.startswith("file://")


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

    def issue(self, path: Path, message: str, at: str = "key") -> None:
        self.issues.append(Issue(path, message, at))

    # ----- dataclasses ------------------------------------------------------------------------
    def build(self, cls: type, value: Any, path: Path, *, handled_elsewhere: tuple[str, ...] = ()) -> Any:
        """Instantiate `cls` from the mapping `value`; INVALID (with issues recorded) if it cannot.

        Keys in ``handled_elsewhere`` are known (not "unknown key", offered as suggestions) but are
        left to the caller.
        """
        if not isinstance(value, dict):
            self.issue(path, f"expected a mapping, got {describe_value(value)}")
            return INVALID
        before = len(self.issues)
        hints = typing.get_type_hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        settable = [f for f in fields if not f.metadata.get("internal")]
        by_key: dict[str, dataclasses.Field] = {}
        for f in settable:
            by_key[f.name] = f
            for alias in f.metadata.get("aliases", ()):
                by_key[alias] = f

        given: dict[str, str] = {}  # field name -> the key the user wrote
        for key in value:
            if key in handled_elsewhere:
                continue
            f = by_key.get(key)
            if f is None:
                self.issue(path + (key,), _unknown_key_message(key, [*by_key, *handled_elsewhere]))
                continue
            if f.name in given:
                self.issue(path + (key,), f"'{key}' and '{given[f.name]}' set the same field; give one")
                continue
            given[f.name] = key

        kwargs: dict[str, Any] = {}
        for f in fields:
            internal = f.metadata.get("internal")
            if internal == "index":
                kwargs[f.name] = path[-1] if path and isinstance(path[-1], int) else 0
                continue
            if internal == "given":
                kwargs[f.name] = frozenset(given)
                continue
            if internal:
                continue
            if f.name in given:
                key = given[f.name]
                kwargs[f.name] = self.coerce(hints[f.name], value[key], path + (key,), f.metadata)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                self.issue(path, f"missing required key '{f.name}'", at="parent")
                kwargs[f.name] = INVALID
            elif f.metadata.get("path") and isinstance(f.default, str):
                # A default path means the same as if the user had written it in the manifest.
                kwargs[f.name] = resolve_local(f.default, self.base_dir)
        if len(self.issues) > before or any(v is INVALID for v in kwargs.values()):
            return INVALID
        obj = cls(**kwargs)
        cross = getattr(obj, "_cross_check", None)
        if cross is not None:
            for name, message in cross(frozenset(given)):
                key = given.get(name, name)
                self.issue(path + (key,), message, at="key" if name in given else "parent")
            if len(self.issues) > before:
                return INVALID
        return obj

    # ----- values -----------------------------------------------------------------------------
    def coerce(self, tp: Any, value: Any, path: Path, meta: typing.Mapping[str, Any]) -> Any:
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
                return resolve_local(value, self.base_dir)
            if isinstance(value, tuple):
                return tuple(resolve_local(v, self.base_dir) for v in value)
        return value


def expand_vars(value: str) -> str:
    import sysconfig

    os.environ.setdefault("PYTHON_STDLIB", sysconfig.get_paths()["stdlib"])
    return os.path.expandvars(value)


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
