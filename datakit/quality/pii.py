"""PII redaction: email addresses, public IPv4/IPv6 addresses and (optionally) phone numbers, each
replaced by a placeholder, with counts per kind.

IP addresses are redacted only when public: private, loopback, link-local, multicast, reserved and
documentation ranges (``ipaddress``'s ``is_global``; for IPv6 only global unicast 2000::/3) identify
nobody. Version-like strings: a dotted quad is a *version*, not an address, when it is part of a longer
dotted number (1.2.3.4.5), has a leading zero in a part (01.2.3.4), or follows a version word ("version",
"ver", "v", "release", "rev", "revision", "build", "python", "kernel", "firmware") on the same line, e.g.
"version 1.2.3.4", "v1.2.3.4"; a bare public dotted quad such as "see 1.2.3.4 for details" is redacted
(an address cannot be told from a version by its digits, and leaking an address is the worse error).
"""

from __future__ import annotations

import ipaddress
import re

from .config import PiiRules

EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
                   r"[A-Za-z]{2,24}(?![\w-])")
IPV4 = re.compile(r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![\w]|\.\d)")
IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{1,4}:){1,7}(?::|(?::[0-9A-Fa-f]{1,4}){1,7}|[0-9A-Fa-f]{1,4})"
                  r"(?![\w:.])")
PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\d{2,4}[ .-])\d{3,4}[ .-]\d{3,4}(?![\w])")
_VERSION_WORD = re.compile(r"(?:\b(?:version|ver|release|rev|revision|build|python|kernel|firmware)\s*[:=]?\s*v?"
                           r"|\bv)$", re.IGNORECASE)
_GLOBAL_V6 = ipaddress.ip_network("2000::/3")


def is_public_ip(text: str) -> bool:
    """A globally routable unicast address (see the module docstring)."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    if ip.version == 6:
        return ip in _GLOBAL_V6 and ip.is_global
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


def is_version_like(text: str, start: int, quad: str) -> bool:
    """Whether the dotted quad at ``start`` reads as a version number (see the module docstring)."""
    if any(len(p) > 1 and p.startswith("0") for p in quad.split(".")):
        return True
    line_start = text.rfind("\n", 0, start) + 1
    return _VERSION_WORD.search(text[max(line_start, start - 24):start]) is not None


def _ipv4(text: str, placeholder: str, counts: dict[str, int]) -> str:
    def sub(m: re.Match) -> str:
        quad = m.group(0)
        if is_version_like(text, m.start(), quad) or not is_public_ip(quad):
            return quad
        counts["ipv4"] += 1
        return placeholder

    return IPV4.sub(sub, text)


def _ipv6(text: str, placeholder: str, counts: dict[str, int]) -> str:
    def sub(m: re.Match) -> str:
        if not is_public_ip(m.group(0)):
            return m.group(0)
        counts["ipv6"] += 1
        return placeholder

    return IPV6.sub(sub, text) if ":" in text else text


def redact(text: str, o: PiiRules = PiiRules()) -> tuple[str, dict[str, int]]:
    """(redacted text, counts by kind: email, ipv4, ipv6, phone). Emails go first, so an address
    inside an email (user@[1.2.3.4] aside) is never half-redacted."""
    counts = {"email": 0, "ipv4": 0, "ipv6": 0, "phone": 0}
    if o.emails and "@" in text:
        text, counts["email"] = EMAIL.subn(o.email_placeholder, text)
    if o.ips:
        text = _ipv4(text, o.ip_placeholder, counts)
        text = _ipv6(text, o.ip_placeholder, counts)
    if o.phones:
        text, counts["phone"] = PHONE.subn(o.phone_placeholder, text)
    return text, counts
