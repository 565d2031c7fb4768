"""The corpus of benchmarks/scale.py: gigabytes of this machine's real text, built once and resumably.

Why its own builder: ``_pipeline_corpus.build`` holds the whole corpus in memory and runs out of this
machine's real text long before 4 GB. Here the corpus is a stream of fixed-size files written one at a
time (a run at N MB reads the first N / --file-mb of them, so every size is a prefix of the largest and
the files are built once for the whole ladder), in three layers:

  pool         every distinct document this machine's text gives (``pool_sources``: the kinds
               ``benchmarks/filters.py`` reads, i.e. /usr/share/doc texts and HTML, which holds the
               python3-doc HTML and the Debian Administrator's Handbook when those packages are
               installed, man pages in every installed language with roff stripped, the Debian
               Reference, the Python standard library; topped up with the Python sources and package
               documents under /usr/lib/python3*, the interpreters' site-packages and the Google Cloud
               SDK, C headers under /usr/include, Perl modules and POD), cut like
               ``_pipeline_corpus`` cuts (blank lines, at most ~8,000 characters, no 1,000-character
               run without a space), each text once across all kinds.
  recombined   once a kind's pool is used up, its documents again as new documents: each pool block
               (BLOCK documents) cut into pieces of at most CHUNK_CHARS at line ends, shuffled, and dealt
               into documents of at least MIN_PIECES pieces from distinct pool documents, one pass per
               seed. No recombined document is an exact copy, and its word 5-gram Jaccard to any one pool
               document is bounded by one piece's share of it; the text itself (its words, lines and
               paragraphs) repeats, once per pass.
  plants       per file, as ``_pipeline_corpus`` plants them: 5% of the file's documents are exact
               copies of a document of the file, 10% near copies (1-3% of the words edited), so the
               duplicate rates are the same at every size.

Every file draws from every kind in proportion to the kind's share of the pool (a cumulative byte target
per kind), so the mix of kinds is the same in the first 100 MB as in 4 GB, and every kind runs out of
unique text at the same point. Each file ``part-NNNNN.jsonl.zst`` ({"id", "text"}) has a
``part-NNNNN.json`` beside it: its make-up (unique, recombined and planted bytes) and every kind's
cursor after it, so a build that stops resumes at the next file with the same bytes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import random
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import _pipeline_corpus as pc
from benchmarks import filters as fm

VERSION = 1  # bump when the bytes a given (pool, --file-mb, --seed) builds change
BLOCK = 2000  # pool documents recombined together
CHUNK_CHARS = 1000  # the largest piece of a recombined document
MIN_PIECES = 4
EXACT, NEAR = pc.EXACT_FRACTION, pc.NEAR_FRACTION
MAX_SOURCE_FILE_BYTES = 8_000_000  # larger files are generated data, not text anyone wrote


@dataclass
class Cursor:
    """Where a kind's stream stands: the pass (0: the pool itself), the pool block, and how many of that
    block's documents (as that pass gives them) are taken."""

    pass_no: int = 0
    block: int = 0
    taken: int = 0


@dataclass
class PartInfo:
    """One corpus file: its make-up and each kind's cursor and bytes taken after it."""

    name: str
    docs: int
    text_bytes: int
    unique_bytes: int
    recombined_bytes: int
    planted_bytes: int
    plants: dict[str, int]
    cursors: dict[str, dict]
    kind_bytes: dict[str, int] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ pool
def _under(roots: list[str], suffixes: tuple[str, ...], names: tuple[str, ...] = ()) -> list[Path]:
    """Regular files (no symlinks, at most MAX_SOURCE_FILE_BYTES) under the roots that exist, sorted."""
    out: set[Path] = set()
    for root in roots:
        for r in glob.glob(root):
            for p in Path(r).rglob("*"):
                if (p.name.endswith(suffixes) or p.name in names) and p.is_file() and not p.is_symlink() \
                        and p.stat().st_size <= MAX_SOURCE_FILE_BYTES:
                    out.add(p)
    return sorted(out)


def pool_sources() -> dict[str, tuple[str, list[Path]]]:
    """Each kind of this machine's text: (how to read it, as ``filters._text_of`` kinds, and its files)."""
    base = fm._files()
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                   "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
                   "/usr/local/lib/python3*/*-packages"})
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    sys_stdlib = [d for d in glob.glob("/usr/lib/python3.*") if Path(d).resolve() != stdlib]
    return {
        "doc": ("doc", base["doc"]), "man": ("man", base["man"]), "ref": ("ref", base["ref"]),
        "py": ("py", base["py"] + _under(sys_stdlib, (".py",))),
        "site_py": ("py", _under(site + ["/usr/lib/google-cloud-sdk"], (".py",))),
        "site_doc": ("doc", _under(site + ["/usr/lib/google-cloud-sdk"], (".md", ".rst", ".txt"), ("METADATA",))),
        "c_headers": ("doc", _under(["/usr/include"], (".h",))),
        "perl": ("doc", _under(["/usr/share/perl", "/usr/share/perl5", "/usr/lib/x86_64-linux-gnu/perl*"],
                               (".pm", ".pod"))),
    }


def _documents_of(kind: str, path: Path) -> list[str]:
    text = fm._text_of(kind, path)
    if not text or not text.strip():
        return []
    return [part for piece in fm._pieces(text) for part in pc.cap(piece, pc.MAX_DOC_CHARS)]


def build_pool(pool_dir: Path, sources: dict[str, tuple[str, list[Path]]]) -> dict[str, dict]:
    """Write each kind's distinct documents to ``pool_dir/<kind>.jsonl`` (one JSON string a line); return
    (and save as pool.json) each kind's files, documents and bytes. Reused when pool.json exists."""
    stamp = pool_dir / "pool.json"
    if stamp.exists():
        return json.loads(stamp.read_text())["kinds"]
    pool_dir.mkdir(parents=True, exist_ok=True)
    seen: set[bytes] = set()
    kinds: dict[str, dict] = {}
    for name, (kind, files) in sources.items():
        stats = {"files": len(files), "docs": 0, "bytes": 0}
        with open(pool_dir / f"{name}.jsonl.tmp", "w", encoding="utf-8") as f:
            for path in files:
                for doc in _documents_of(kind, path):
                    data = doc.encode("utf-8")
                    key = hashlib.blake2b(data, digest_size=16).digest()
                    if key not in seen:
                        seen.add(key)
                        f.write(json.dumps(doc, ensure_ascii=False) + "\n")
                        stats["docs"] += 1
                        stats["bytes"] += len(data)
        os.replace(pool_dir / f"{name}.jsonl.tmp", pool_dir / f"{name}.jsonl")
        kinds[name] = stats
        print(f"pool: {name}: {stats['files']} files -> {stats['docs']} documents, "
              f"{stats['bytes'] / 1e6:.1f} MB", file=sys.stderr, flush=True)
    kinds = {k: v for k, v in kinds.items() if v["docs"]}
    stamp.write_text(json.dumps({"version": VERSION, "kinds": kinds}, indent=1))
    return kinds


# ------------------------------------------------------------------------------------------------ streams
def _blocks(pool_file: Path, start_block: int) -> Iterator[list[str]]:
    """The pool's documents in blocks of BLOCK, from ``start_block`` on."""
    with open(pool_file, encoding="utf-8") as f:
        block: list[str] = []
        index = 0
        for line in f:
            if index >= start_block * BLOCK:
                block.append(json.loads(line))
            index += 1
            if len(block) == BLOCK:
                yield block
                block = []
        if block:
            yield block


def recombine(block: list[str], rng: random.Random) -> list[str]:
    """The block's text as new documents: pieces of at most CHUNK_CHARS (cut at line ends), shuffled,
    dealt into documents of at least MIN_PIECES pieces from distinct pool documents and at least as
    long as a pool document drawn at random (at most ``pc.MAX_DOC_CHARS``)."""
    pieces = [(i, p) for i, doc in enumerate(block) for p in pc.cap(doc, CHUNK_CHARS)]
    rng.shuffle(pieces)
    out: list[str] = []
    cur: list[str] = []
    used: set[int] = set()
    target, n = len(rng.choice(block)), 0
    waiting: list[tuple[int, str]] = []
    for i, piece in pieces:
        if i in used:
            waiting.append((i, piece))
            continue
        cur.append(piece)
        used.add(i)
        n += len(piece) + 2
        if len(cur) >= MIN_PIECES and (n >= target or n + CHUNK_CHARS > pc.MAX_DOC_CHARS):
            out.append("\n\n".join(cur))
            cur, used, n, target = [], set(), 0, len(rng.choice(block))
            pieces_back, waiting = waiting, []
            pieces.extend(pieces_back)  # retried with the next document (the list grows behind the loop)
    if len(cur) >= MIN_PIECES:
        out.append("\n\n".join(cur))
    return out


def kind_stream(pool_dir: Path, kind: str, cur: Cursor, seed: int) -> Iterator[tuple[str, bool, Cursor]]:
    """A kind's documents from ``cur`` on, forever: (text, recombined?, the cursor after it)."""
    pass_no, block_no, skip = cur.pass_no, cur.block, cur.taken
    while True:
        for block in _blocks(pool_dir / f"{kind}.jsonl", block_no):
            docs = block if pass_no == 0 else recombine(block, random.Random(f"{seed}/{kind}/{pass_no}/{block_no}"))
            for k in range(skip, len(docs)):
                yield docs[k], pass_no > 0, Cursor(pass_no, block_no, k + 1)
            block_no, skip = block_no + 1, 0
        pass_no, block_no = pass_no + 1, 0


# ------------------------------------------------------------------------------------------------ files
def _plant(rows: list[tuple[str, str]], rng: random.Random, prefix: str) -> tuple[list[tuple[str, str]], dict]:
    """The file's rows plus exact and near copies of some of them, shuffled (``_pipeline_corpus``'s
    fractions; originals of at least ``pc.MIN_PLANT_WORDS`` words)."""
    total = round(len(rows) / (1 - EXACT - NEAR))
    n_exact, n_near = round(EXACT * total), round(NEAR * total)
    eligible = [r for r in rows if len(r[1].split()) >= pc.MIN_PLANT_WORDS]
    originals = rng.sample(eligible, min(len(eligible), n_exact + n_near))
    out = list(rows)
    for k, (_, text) in enumerate(originals):
        if k < n_exact:
            out.append((f"{prefix}e{k:06d}", text))
        else:
            out.append((f"{prefix}n{k:06d}", pc.edit_words(text, rng.uniform(0.01, 0.03), rng)))
    rng.shuffle(out)
    return out, {"exact": min(n_exact, len(originals)), "near": max(0, len(originals) - n_exact)}


def _write_part(corpus_dir: Path, info: PartInfo, rows: list[tuple[str, str]]) -> None:
    import zstandard

    lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in rows)
    data = zstandard.ZstdCompressor(level=3).compress(lines.encode("utf-8"))
    tmp = corpus_dir / f".{info.name}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, corpus_dir / info.name)
    (corpus_dir / info.name.replace(".jsonl.zst", ".json")).write_text(json.dumps(asdict(info)))


def _done_parts(corpus_dir: Path) -> list[PartInfo]:
    """The files built so far, in order, up to the first missing one."""
    out = []
    while True:
        name = f"part-{len(out):05d}.jsonl.zst"
        meta = corpus_dir / name.replace(".jsonl.zst", ".json")
        if not (meta.exists() and (corpus_dir / name).exists()):
            return out
        out.append(PartInfo(**json.loads(meta.read_text())))


def build_parts(corpus_dir: Path, pool_dir: Path, kinds: dict[str, dict], n_files: int, file_mb: float,
                seed: int) -> list[PartInfo]:
    """Make sure ``part-00000`` .. ``part-{n_files - 1}`` exist (building the missing ones in order)."""
    corpus_dir.mkdir(parents=True, exist_ok=True)
    done = _done_parts(corpus_dir)
    if len(done) >= n_files:
        return done[:n_files]
    pool_total = sum(v["bytes"] for v in kinds.values())
    last = done[-1] if done else None
    streams = {k: kind_stream(pool_dir, k, Cursor(**last.cursors[k]) if last else Cursor(), seed) for k in kinds}
    taken = dict(last.kind_bytes) if last else {k: 0 for k in kinds}
    for i in range(len(done), n_files):
        base_target = (i + 1) * file_mb * 1e6 * (1 - EXACT - NEAR)
        rows, unique, recombined, cursors = [], 0, 0, {}
        for k in kinds:
            goal = base_target * kinds[k]["bytes"] / pool_total
            while taken[k] < goal:
                text, again, cursors[k] = next(streams[k])
                n = len(text.encode("utf-8"))
                taken[k] += n
                recombined, unique = recombined + n * again, unique + n * (not again)
                rows.append((f"p{i:05d}-{len(rows):06d}", text))
            cursors[k] = asdict(cursors.get(k) or (Cursor(**done[-1].cursors[k]) if done else Cursor()))
        rows, plants = _plant(rows, random.Random(f"{seed}/plant/{i}"), f"p{i:05d}")
        text_bytes = sum(len(t.encode("utf-8")) for _, t in rows)
        info = PartInfo(f"part-{i:05d}.jsonl.zst", len(rows), text_bytes, unique, recombined,
                        text_bytes - unique - recombined, plants, cursors, dict(taken))
        _write_part(corpus_dir, info, rows)
        done.append(info)
        print(f"corpus: {info.name} {text_bytes / 1e6:.1f} MB ({len(rows)} documents, "
              f"{recombined / max(text_bytes, 1):.0%} recombined)", file=sys.stderr, flush=True)
    return done


# ------------------------------------------------------------------------------------------------ disjoint copies
# Why: each doubling of the corpus above samples more of the same pool, so it also holds more members of
# the pool's own near-duplicate families (a package's sources in several site-packages, man pages of many
# versions): the fuzzy step's work (documents in a candidate pair) grows faster than the megabytes. A copy
# of a file with every letter and digit rotated is text of the same shape (the same bytes per document,
# words, lines, exact and near copies, Jaccards within the copy) that shares no word with the original or
# another copy, so a ladder of copies grows the work exactly as the corpus: what it measures is the step's
# own growth.
_BLOCK_BITS = 6  # a non-ASCII letter rotates among the letters of its 64-code-point block (same UTF-8 length)


def _rotated(cp: int, j: int) -> int:
    """Code point ``cp`` in copy ``j``: ASCII letters rotated by j within their case, digits by j within
    0-9, other letters and digits within their block's letters and digits; everything else kept."""
    c = chr(cp)
    if "a" <= c <= "z" or "A" <= c <= "Z":
        base = ord("a") if c >= "a" else ord("A")
        return base + (cp - base + j) % 26
    if "0" <= c <= "9":
        return ord("0") + (cp - ord("0") + j) % 10
    if cp < 128 or not c.isalnum():
        return cp
    start = cp >> _BLOCK_BITS << _BLOCK_BITS
    peers = [p for p in range(start, start + (1 << _BLOCK_BITS)) if chr(p).isalnum()]
    return peers[(peers.index(cp) + j) % len(peers)]


class _Rotation(dict):
    """``str.translate``'s table for copy ``j``, filled as characters are met."""

    def __init__(self, j: int) -> None:
        super().__init__()
        self.j = j

    def __missing__(self, cp: int) -> int:
        self[cp] = _rotated(cp, self.j)
        return self[cp]


def disjoint_copy(corpus_dir: Path, copies_dir: Path, name: str, j: int) -> Path:
    """Copy ``j`` (1, 2, ...) of corpus file ``name``: every document's text rotated (`_rotated`), its id
    prefixed ``c<j>-``. Built once (resumable: a copy that exists is kept)."""
    import zstandard

    out = copies_dir / f"copy{j:02d}-{name}"
    if out.exists():
        return out
    copies_dir.mkdir(parents=True, exist_ok=True)
    table = _Rotation(j)
    raw = zstandard.ZstdDecompressor().decompress((corpus_dir / name).read_bytes(), max_output_size=1 << 32)
    lines = []
    for line in raw.decode("utf-8").splitlines():
        rec = json.loads(line)
        lines.append(json.dumps({"id": f"c{j}-{rec['id']}", "text": rec["text"].translate(table)},
                                ensure_ascii=False) + "\n")
    tmp = copies_dir / f".{out.name}.tmp"
    tmp.write_bytes(zstandard.ZstdCompressor(level=3).compress("".join(lines).encode("utf-8")))
    os.replace(tmp, out)
    return out
