"""Step identity: a short hash of WHAT a step computes, never of WHERE it runs.

identity = sha256(canonical JSON of {scheme, name, config, version, sorted dep identities})[:10].

Why these rules:
- Output dirs are ``<prefix>/<name>-<identity>``; the runner trusts any dir whose status says SUCCESS.
  So every input that changes the bytes a step writes must be in the identity (its config, its
  implementation version, its deps' identities), or a fixed bug keeps serving stale data.
- Moving a run (laptop -> bucket, /home/alice -> /home/bob, a read-only mirror) must NOT change
  identities, or nothing is ever reused. Hence configs are checked for machine-local absolute paths
  and rejected with the offending key. Put relative paths, content hashes or remote URIs (``gs://``,
  ``https://``: global names of input data) in config; put machine-local locations, worker counts and
  other knobs that do not change outputs in the step's function closure or the runner's exec_config.
- Canonical JSON (sorted keys, no whitespace, tuples == lists, NaN rejected) so the same config
  always hashes the same, whatever dict order or Python version produced it.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

IDENTITY_CHARS = 10
_SCHEME = "datakit.steps/1"  # bump if the hashing rule itself ever changes
# Path-looking strings only: "/data/x", "~/x", "~alice/x", "file:/x", "C:\\x". A lone "/" or "//"
# (separators, comment markers) is a value, not a location.
_ABSOLUTE = re.compile(r"^(?:/[\w.~@+-]|~[\w.-]*/|file:|[A-Za-z]:[\\/])")


class ConfigError(ValueError):
    """A step config that cannot be hashed faithfully (names the step and the key path)."""


def canonical_config(config: Any, *, where: str = "config") -> Any:
    """Validated deep copy of ``config`` as plain JSON values (dict/list/str/int/float/bool/None).

    Raises ConfigError naming the key path (e.g. ``config.paths[2]``) for anything JSON cannot carry
    faithfully (sets, objects, non-string keys, NaN) and for machine-local absolute paths.
    """
    if config is None or isinstance(config, (bool, int, str)):
        if isinstance(config, str):
            _check_not_absolute(config, where)
        return config
    if isinstance(config, float):
        if math.isnan(config) or math.isinf(config):
            raise ConfigError(f"{where}: {config!r} has no canonical JSON form (use a string or None)")
        return config
    if isinstance(config, dict):
        out = {}
        for key, value in config.items():
            if not isinstance(key, str):
                raise ConfigError(f"{where}: key {key!r} is {type(key).__name__}, keys must be str")
            out[key] = canonical_config(value, where=f"{where}.{key}")
        return out
    if isinstance(config, (list, tuple)):
        return [canonical_config(v, where=f"{where}[{i}]") for i, v in enumerate(config)]
    raise ConfigError(
        f"{where}: {type(config).__name__} value {config!r} is not JSON "
        "(use dict/list/str/int/float/bool/None so the step identity is well defined)"
    )


def canonical_json(value: Any) -> str:
    """The one serialization that identities are computed from."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def compute_identity(name: str, config: Any, version: str, dep_identities: list[str]) -> str:
    payload = {
        "scheme": _SCHEME,
        "name": name,
        "config": config,
        "version": version,
        "deps": sorted(dep_identities),
    }
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()[:IDENTITY_CHARS]


def identity_of(step) -> str:
    """Identity of a Step (computed once and cached on the step)."""
    return step.identity


def config_mentions(config: Any, roots: list[str]) -> str | None:
    """Key path of the first string in ``config`` that contains one of ``roots`` (an output prefix or
    mirror), else None. The runner uses this to refuse configs that would tie identity to a prefix."""
    def walk(value: Any, where: str) -> str | None:
        if isinstance(value, str):
            return where if any(len(r) > 1 and r in value for r in roots) else None
        if isinstance(value, dict):
            for k, v in value.items():
                hit = walk(v, f"{where}.{k}")
                if hit:
                    return hit
        if isinstance(value, list):
            for i, v in enumerate(value):
                hit = walk(v, f"{where}[{i}]")
                if hit:
                    return hit
        return None

    return walk(config, "config")


def _check_not_absolute(value: str, where: str) -> None:
    if _ABSOLUTE.match(value):
        raise ConfigError(
            f"{where}: {value!r} is a machine-local absolute path; step identities must not depend on "
            "where data lives. Use a path relative to the manifest/prefix, a content hash, or a remote "
            "URI in config, and pass the local location through the step function's closure instead."
        )
