"""Page text extraction with Resiliparse, bounded per page: a pathological page costs one reject, never a
stalled worker.

Resiliparse's extractor is native code that never returns to the interpreter, so neither SIGALRM nor
Resiliparse's own `time_guard` can stop it mid-page (measured: a 1 MB page of 100 sibling 990-deep
<div> chains takes ~2 s in main-content mode and runs to the end under both). Its cost grows with tags
times DOM depth, and depth is capped (pages deeper than MAX_MAIN_CONTENT_DEPTH with more than
DEPTH_CHECK_TAGS tags are extracted in full-text mode), so pages of at most GUARD_TAGS tags and
GUARD_CHARS characters cannot be slow (worst cases measured: ~0.25 s): they are extracted inline, the
fast path. Bigger ones are extracted in a forked child (it inherits the parsed tree: nothing is
serialized but the text coming back) that is killed after EXTRACT_TIMEOUT_S (`ExtractTimeout`); a child
that dies (out of memory, a crash in native code) raises `ExtractDied`. The fork costs a few
milliseconds, paid only by big pages (about 1% of benchmarks/normalize.py's), whose extraction takes
tens of milliseconds anyway. Where fork is unavailable every page is extracted inline.

The depth check is one CSS query run by Lexbor in C (`*>*>...>*`, MAX_MAIN_CONTENT_DEPTH compounds: it
matches an element with that many element ancestors, i.e. depth > MAX_MAIN_CONTENT_DEPTH counting the
document as 1), 50-300x cheaper than walking the tree from Python (the tests compare the two).
"""

from __future__ import annotations

import os
import select
import signal
import time

# Resiliparse's main-content heuristics are superlinear in DOM depth (20k nested divs: seconds; 100k:
# minutes). Pages deeper than this are extracted in full-text mode instead. Depth is only measured on
# pages with many tags, so ordinary pages pay nothing.
MAX_MAIN_CONTENT_DEPTH = 1000
DEPTH_CHECK_TAGS = 5000
# Pages above either size are extracted in a forked, time-limited child; below both, inline.
GUARD_TAGS = 20_000
GUARD_CHARS = 2_000_000
EXTRACT_TIMEOUT_S = 60.0

_DEEP_SELECTOR = ">".join(["*"] * MAX_MAIN_CONTENT_DEPTH)


class ExtractTimeout(Exception):
    """The page's extraction ran past EXTRACT_TIMEOUT_S and was stopped."""


class ExtractDied(Exception):
    """The child extracting the page died without an answer."""


def deeper_than_limit(tree) -> bool:
    """Whether the DOM is deeper than MAX_MAIN_CONTENT_DEPTH (the document node counted as depth 1)."""
    return tree.document is not None and tree.document.query_selector(_DEEP_SELECTOR) is not None


def extract_text(tree, html: str, main_content: bool, n_tags: int) -> str:
    """Resiliparse's plain text of a parsed page; big pages in a time-limited child (see module doc)."""
    if (n_tags > GUARD_TAGS or len(html) > GUARD_CHARS) and hasattr(os, "fork"):
        return _extract_forked(tree, main_content, EXTRACT_TIMEOUT_S)
    return _extract_inline(tree, main_content)


def _extract_inline(tree, main_content: bool) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(tree, preserve_formatting=True, main_content=main_content)


def _child(tree, main_content: bool, w: int) -> None:
    """In the forked child: extract, write a status byte + UTF-8 text, leave without cleanup."""
    code = 0
    try:
        try:
            data = b"\x00" + _extract_inline(tree, main_content).encode("utf-8", "surrogatepass")
        except BaseException as e:  # noqa: BLE001 - reported to the parent as a parse error
            data = b"\x01" + str(e).encode("utf-8", "replace")
        view = memoryview(data)
        while view:
            view = view[os.write(w, view):]
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        os._exit(code)


def _read_until(r: int, timeout: float) -> list[bytes]:
    """All bytes from pipe ``r`` until its writer closes; ExtractTimeout after ``timeout`` seconds."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ExtractTimeout(f"text extraction took longer than {timeout:g} s; the extractor was stopped")
        if not select.select([r], [], [], left)[0]:
            continue
        b = os.read(r, 1 << 20)
        if not b:
            return chunks
        chunks.append(b)


def _extract_forked(tree, main_content: bool, timeout: float) -> str:
    """extract_plain_text in a forked child that inherits `tree`; killed after `timeout` seconds."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(tree, main_content, w)
    os.close(w)
    done = False
    try:
        data = b"".join(_read_until(r, timeout))
        done = True
    finally:  # timed out, or interrupted: the child must not outlive this call
        os.close(r)
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    if not data:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        raise ExtractDied(f"the extractor process died ({how}), e.g. out of memory")
    if data[:1] == b"\x01":
        raise ValueError(data[1:].decode("utf-8", "replace"))
    return data[1:].decode("utf-8", "surrogatepass")


__all__ = ["DEPTH_CHECK_TAGS", "EXTRACT_TIMEOUT_S", "ExtractDied", "ExtractTimeout", "GUARD_CHARS", "GUARD_TAGS",
           "MAX_MAIN_CONTENT_DEPTH", "deeper_than_limit", "extract_text"]
