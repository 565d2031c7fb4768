"""The Debian packages some tests read real text from (translated manuals and man pages) or run
(headless Chromium), and the skip that names them. Why: the README's test command must pass on a
machine with nothing but Python; a test whose text is missing skips, saying which packages bring it
and how to install them, and `.ci/run` installs them all, so CI runs every such test."""

from __future__ import annotations

import glob
import shutil

import pytest

# package -> a glob that matches only once it is installed (a program: its name on PATH)
FILES = {
    "debian-reference-en": "/usr/share/debian-reference/*.en.html",
    "debian-reference-de": "/usr/share/debian-reference/*.de.html",
    "debian-reference-fr": "/usr/share/debian-reference/*.fr.html",
    "debian-reference-es": "/usr/share/debian-reference/*.es.html",
    "debian-reference-it": "/usr/share/debian-reference/*.it.html",
    "debian-reference-ja": "/usr/share/debian-reference/*.ja.html",
    "debian-reference-zh-cn": "/usr/share/debian-reference/*.zh-cn.html",
    "manpages-de": "/usr/share/man/de/man*/*.gz",
    "manpages-es": "/usr/share/man/es/man*/*.gz",
    "manpages-fr": "/usr/share/man/fr/man*/*.gz",
    "manpages-ja": "/usr/share/man/ja/man*/*.gz",
    "manpages-ru": "/usr/share/man/ru/man*/*.gz",
}
PROGRAMS = {"chromium": ("chromium", "chromium-browser", "google-chrome")}


def program(package: str) -> str | None:
    """The path of the program ``package`` installs (its first name found on PATH), or None."""
    return next((p for p in map(shutil.which, PROGRAMS[package]) if p), None)


def missing(*packages: str) -> list[str]:
    """The packages of ``packages`` whose files (or program) this machine lacks."""
    return [p for p in packages if not (program(p) if p in PROGRAMS else glob.glob(FILES[p]))]


def reason(packages: list[str]) -> str:
    """"needs X, Y (apt-get install X Y; .ci/run installs them)"."""
    them = "it" if len(packages) == 1 else "them"
    return f"needs {', '.join(packages)} (apt-get install {' '.join(packages)}; .ci/run installs {them})"


def needs(*packages: str) -> pytest.MarkDecorator:
    """Skip unless every one of ``packages`` is installed, naming the missing ones."""
    lacking = missing(*packages)
    return pytest.mark.skipif(bool(lacking), reason=reason(lacking))
