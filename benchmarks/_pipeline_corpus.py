"""The corpus of benchmarks/pipeline.py: real text of this machine with planted exact and near duplicates.

Why planted copies: a dedup pipeline's quality can only be scored against a known truth. Base documents
are this machine's real text (``benchmarks/filters.py``'s builders: /usr/share/doc texts, man pages with
roff stripped, the Python standard library's sources; then the stdlib's site-packages sources when those
run short), cut at blank lines into documents of at most ~8,000 characters (a longer paragraph is cut at
line ends: at most 10,000; see ``cap``), each distinct text once (so the base holds no exact duplicates
of its own). Then, with a fixed seed:
  exact copies  5% of the final documents: an original's text again, under a new id
  near copies   10%: an original with 1-3% of its words substituted, inserted or deleted (whitespace kept)
Each original gets at most one copy, so every planted pair is {original, copy} and a tool catches it by
removing either one. Each near copy's true Jaccard of word 5-grams (lowercased, whitespace-split words)
to its original is recorded, so recall can be scored by Jaccard bin. Copies land at random positions, so
they are spread over the files. Written as ``--files`` jsonl.zst files of {"id", "text"}.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sysconfig
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import filters as fm

EXACT_FRACTION, NEAR_FRACTION = 0.05, 0.10
MIN_PLANT_WORDS = 100  # originals this short give Jaccards dominated by a handful of 5-grams
NGRAM = 5
_WS = re.compile(r"(\s+)")
_LONG_RUN = re.compile(r"\S{1001}")
MAX_DOC_CHARS = 10_000
VERSION = 2  # bump when the corpus a given --mb/--files/--seed builds changes (invalidates --reuse)


@dataclass
class CorpusInfo:
    """What was written: sizes, make-up and the planted truth (each copy id -> its original id)."""

    files: list[str]
    docs: int
    mb: float
    base_docs: int
    by_kind: dict[str, int]
    exact_plants: dict[str, str] = field(default_factory=dict)
    near_plants: dict[str, str] = field(default_factory=dict)
    near_jaccard: dict[str, float] = field(default_factory=dict)
    near_edit_fraction: dict[str, float] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> "CorpusInfo":
        return cls(**json.loads(path.read_text()))


def shingles(text: str) -> set[tuple[str, ...]]:
    """Word 5-grams of lowercased whitespace-split words: the yardstick of a plant's true Jaccard."""
    w = text.lower().split()
    if len(w) < NGRAM:
        return {tuple(w)}
    return {tuple(w[i : i + NGRAM]) for i in range(len(w) - NGRAM + 1)}


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa or sb else 1.0


def edit_words(text: str, fraction: float, rng: random.Random) -> str:
    """``text`` with about ``fraction`` of its words substituted, inserted or deleted; the whitespace
    between untouched words is kept, so the copy reads like the original."""
    parts = _WS.split(text)
    word_idx = [i for i, p in enumerate(parts) if p and not p.isspace()]
    vocab = [parts[i] for i in word_idx]
    n_edits = max(1, round(fraction * len(word_idx)))
    for i in sorted(rng.sample(word_idx, min(n_edits, len(word_idx))), reverse=True):
        op = rng.randrange(3)
        if op == 0:
            parts[i] = rng.choice(vocab)
        elif op == 1:
            parts[i] = parts[i] + " " + rng.choice(vocab)
        else:
            parts[i] = ""
    return "".join(parts)


def _extra_python_files() -> list[Path]:
    """The stdlib directory's site-packages sources: more real text, used only once the rest runs out."""
    site = Path(sysconfig.get_paths()["stdlib"]) / "site-packages"
    return sorted(p for p in site.rglob("*.py") if p.is_file() and not p.is_symlink()) if site.is_dir() else []


def cap(piece: str, max_chars: int) -> list[str]:
    """``piece`` cut at line ends (a longer line at spaces) into parts of at most ``max_chars``; parts
    with a run of over 1,000 characters without whitespace (tables, encoded blobs) are dropped. Why: a
    file without blank lines would otherwise be one huge document, and HF's BPE is superlinear on huge
    texts that datakit splits before encoding and datatrove does not; the benchmark measures pipelines
    on ordinary documents, not that one pathology."""
    if len(piece) <= max_chars:
        return [] if _LONG_RUN.search(piece) else [piece]
    units = []
    for line in piece.splitlines(keepends=True):
        units.extend([line] if len(line) <= max_chars else re.findall(r"\S*\s*", line))
    out, cur, n = [], [], 0
    for u in units:
        if cur and n + len(u) > max_chars:
            out.append("".join(cur).strip())
            cur, n = [], 0
        cur.append(u)
        n += len(u)
    if cur:
        out.append("".join(cur).strip())
    return [p for p in out if p and not _LONG_RUN.search(p)]


def base_documents(target_bytes: int) -> list[str]:
    """Distinct real-text documents, round-robin over the kinds of text, about ``target_bytes`` in all."""
    files = fm._files()
    iters = {k: iter(v) for k, v in files.items() if v}
    seen: set[bytes] = set()
    docs: list[str] = []
    total = 0
    extra = iter(_extra_python_files())
    while total < target_bytes:
        if not iters:
            p = next(extra, None)
            if p is None:
                break
            iters = {"py": iter([p])}
        for kind in list(iters):
            p = next(iters[kind], None)
            if p is None:
                del iters[kind]
                continue
            text = fm._text_of(kind, p)
            pieces = fm._pieces(text) if text and text.strip() else []
            for piece in (part for p in pieces for part in cap(p, MAX_DOC_CHARS)):
                key = hashlib.blake2b(piece.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                if key in seen:
                    continue
                seen.add(key)
                docs.append(piece)
                total += len(piece.encode("utf-8", "surrogatepass"))
            if total >= target_bytes:
                break
    return docs


def _plant(base: list[str], seed: int) -> tuple[list[tuple[str, str]], CorpusInfo]:
    """Base docs plus planted copies, in a seeded random order; the truth in a CorpusInfo (no files)."""
    rng = random.Random(seed)
    n_base = len(base)
    total = round(n_base / (1 - EXACT_FRACTION - NEAR_FRACTION))
    n_exact, n_near = round(EXACT_FRACTION * total), round(NEAR_FRACTION * total)
    eligible = [i for i, t in enumerate(base) if len(t.split()) >= MIN_PLANT_WORDS]
    if len(eligible) < n_exact + n_near:
        raise SystemExit(f"only {len(eligible)} base documents have >= {MIN_PLANT_WORDS} words; "
                         f"{n_exact + n_near} plants needed: ask for a larger --mb")
    originals = rng.sample(eligible, n_exact + n_near)
    rows = [(f"b{i:07d}", t) for i, t in enumerate(base)]
    info = CorpusInfo(files=[], docs=0, mb=0.0, base_docs=n_base, by_kind={})
    for k, i in enumerate(originals):
        orig_id, text = f"b{i:07d}", base[i]
        if k < n_exact:
            cid = f"e{k:07d}"
            info.exact_plants[cid] = orig_id
            rows.append((cid, text))
            continue
        frac = rng.uniform(0.01, 0.03)
        copy = edit_words(text, frac, rng)
        cid = f"n{k:07d}"
        info.near_plants[cid] = orig_id
        info.near_jaccard[cid] = round(jaccard(text, copy), 4)
        info.near_edit_fraction[cid] = round(frac, 4)
        rows.append((cid, copy))
    rng.shuffle(rows)
    info.docs = len(rows)
    info.by_kind = {"base": n_base, "exact_copies": n_exact, "near_copies": n_near}
    return rows, info


def build(out_dir: Path, mb: float, num_files: int, seed: int = 0) -> CorpusInfo:
    """Write the corpus as ``num_files`` jsonl.zst files under ``out_dir``; return (and save) its truth."""
    import zstandard

    out_dir.mkdir(parents=True, exist_ok=True)
    base = base_documents(int(mb * 1e6 * (1 - EXACT_FRACTION - NEAR_FRACTION)))
    rows, info = _plant(base, seed)
    per_file = -(-len(rows) // num_files)
    total_bytes = 0
    for f in range(num_files):
        path = out_dir / f"part-{f:03d}.jsonl.zst"
        chunk = rows[f * per_file : (f + 1) * per_file]
        lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in chunk)
        total_bytes += sum(len(t.encode("utf-8", "surrogatepass")) for _, t in chunk)
        path.write_bytes(zstandard.ZstdCompressor(level=3).compress(lines.encode("utf-8", "surrogatepass")))
        info.files.append(str(path))
    info.mb = round(total_bytes / 1e6, 1)
    info.save(out_dir.parent / "truth.json")
    return info


def sample_texts(info: CorpusInfo, max_bytes: int) -> list[str]:
    """The first ``max_bytes`` of the corpus's texts, in file order: the tokenizer's training sample."""
    import zstandard

    texts, n = [], 0
    for f in info.files:
        data = zstandard.ZstdDecompressor().decompress(Path(f).read_bytes(), max_output_size=2**34)
        for line in data.decode("utf-8", "surrogatepass").splitlines():
            t = json.loads(line)["text"]
            texts.append(t)
            n += len(t)
            if n >= max_bytes:
                return texts
    return texts
