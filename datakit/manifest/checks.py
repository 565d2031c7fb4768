"""Field checks and reachability probes that config dataclasses name in their field metadata.

They live here, beside the schema, so any room's config class can use them (``check`` runs on the
parsed value; ``probe`` runs after parsing, in parallel, only when the caller asks for probes).
"""

from __future__ import annotations

import os
import re
from typing import Any

from datakit.core.fsio import local_path
from datakit.core.listing import is_http
from datakit.core.uris import check_uri, http_probe, is_remote

# fullmatch, never match with "$": "$" also matches before a final newline, so "web\n" would pass
# and name folders that `gc` and `verify` cannot see.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA_RE = re.compile(r"[0-9a-f]{64}")


def check_name(value: str) -> str | None:
    if not _NAME_RE.fullmatch(value):
        return f"invalid name {value!r}: use letters, digits, '.', '_' and '-' (it names output folders)"
    return None


def check_sha(value: Any) -> str | None:
    values = value.values() if isinstance(value, dict) else [value]
    for v in values:
        if not _SHA_RE.fullmatch(v):
            return f"{v!r} is not a sha256 (64 lowercase hex digits)"
    return None


def check_uri_list(value: Any) -> str | None:
    uris = [value] if isinstance(value, str) else list(value)
    if not uris:
        return "empty list of URIs"
    if any(not u.strip() for u in uris):
        return "empty URI"
    return None


def check_nonempty(value: Any) -> str | None:
    return "must not be empty" if not value else None


def probe_tokenizer(tok: str, timeout: float) -> list[str]:
    """A tokenizer.json by path or URL; a hub name gets a hint, since nothing can be fetched from a hub."""
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
