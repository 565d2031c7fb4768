"""Loading, identifying and training HF `tokenizers` tokenizers.

Why identity matters: a token cache is only meaningful together with the exact tokenizer that made it,
so the sha256 of the tokenizer's JSON (plus vocab size and BOS/EOS ids) is recorded in every cache
ledger and in the step identity; a changed tokenizer can then never silently reuse an old cache.

Why train our own: `datakit run` must work with no tokenizer given and without network access to a
model hub, so the default is a byte-level BPE trained on the first bytes of the corpus itself.
Byte-level BPE is lossless (any text decodes back exactly), which the cache's round-trip test relies on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import asdict, dataclass
from typing import Iterator

import pyarrow.parquet as pq
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from datakit.core.fsio import atomic_write_bytes, exists, is_dir, join, open_read, read_bytes, store_url
from datakit.core.layout import TOKENIZER_FILE, DocumentsDir, parquet_names
from datakit.tokenize.byte_level import SPLIT_PATTERN, bytes_to_unicode

__all__ = [
    "EOS_TOKEN",
    "BOS_TOKEN",
    "PAD_TOKEN",
    "TokenizerError",
    "TokenizerIdentity",
    "load_tokenizer",
    "shared_tokenizer",
    "tokenizer_identity",
    "train_tokenizer",
    "find_source_files",
]

EOS_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|begin_of_text|>"
PAD_TOKEN = "<|pad|>"

# Special-token spellings used by common tokenizers, tried in order when a loaded tokenizer does not
# say which token is EOS/BOS.
_EOS_CANDIDATES = (EOS_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "<|im_end|>", "[SEP]")
_BOS_CANDIDATES = (BOS_TOKEN, "<s>", "<bos>", "<|bos|>", "<|startoftext|>", "[CLS]")

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


class TokenizerError(ValueError):
    """A tokenizer could not be loaded or is unusable; the message says what to do."""


@dataclass(frozen=True)
class TokenizerIdentity:
    """What a token cache depends on: sha256 of the tokenizer JSON bytes, vocab size, BOS/EOS ids."""

    sha256: str
    vocab_size: int
    bos_id: int | None
    eos_id: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TokenizerIdentity":
        return cls(str(d["sha256"]), int(d["vocab_size"]), d.get("bos_id"), int(d["eos_id"]))


def _is_url(s: str) -> bool:
    return "://" in s


def _looks_like_hub_name(s: str) -> bool:
    return (
        not _is_url(s)
        and not s.startswith((".", "/", "~"))
        and not s.endswith(".json")
        and os.sep not in s.replace("/", "", 1)
        and bool(_HUB_NAME.match(s))
    )


def _read_tokenizer_bytes(path_or_url: str) -> tuple[bytes, str]:
    path = store_url(path_or_url)
    if is_dir(path):
        path = join(path, TOKENIZER_FILE)
    if not exists(path):
        if _looks_like_hub_name(path_or_url):
            raise TokenizerError(
                f"tokenizer {path_or_url!r} looks like a Hugging Face Hub name, but datakit cannot fetch "
                "from a model hub here (no network access to hubs at run time). Download its "
                "tokenizer.json once, elsewhere, and point `tokenize.tokenizer` at that file's path or an "
                "fsspec URL (e.g. /data/tokenizers/llama3/tokenizer.json or s3://bucket/tokenizer.json); "
                "or leave it null to train a byte-level BPE on the corpus."
            )
        raise TokenizerError(f"tokenizer file not found: {path_or_url!r} (looked for {path!r})")
    return read_bytes(path), path


def _special_id(tok: Tokenizer, candidates: tuple[str, ...], explicit: str | None, what: str, where: str):
    if explicit is not None:
        tid = tok.token_to_id(explicit)
        if tid is None:
            raise TokenizerError(f"{where}: {what} token {explicit!r} is not in the tokenizer's vocabulary")
        return tid
    for name in candidates:
        tid = tok.token_to_id(name)
        if tid is not None:
            return tid
    return None


def tokenizer_identity(tok: Tokenizer, json_bytes: bytes, *, eos_token: str | None = None,
                       bos_token: str | None = None, where: str = "tokenizer") -> TokenizerIdentity:
    """Identity of a loaded tokenizer; raises TokenizerError if no EOS token can be found."""
    eos = _special_id(tok, _EOS_CANDIDATES, eos_token, "EOS", where)
    if eos is None:
        raise TokenizerError(
            f"{where}: no end-of-document token found (tried {', '.join(_EOS_CANDIDATES)}); documents are "
            "separated by EOS in the token cache, so pass eos_token=... naming the tokenizer's EOS token"
        )
    bos = _special_id(tok, _BOS_CANDIDATES, bos_token, "BOS", where)
    return TokenizerIdentity(
        sha256=hashlib.sha256(json_bytes).hexdigest(),
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        bos_id=bos,
        eos_id=eos,
    )


def load_tokenizer(path_or_url: str, *, eos_token: str | None = None,
                   bos_token: str | None = None) -> tuple[Tokenizer, TokenizerIdentity]:
    """Load a tokenizer.json from a local path, a directory holding tokenizer.json, or an fsspec URL.

    Hub names ("gpt2", "meta-llama/Llama-3.1-8B") raise a TokenizerError explaining how to point at a
    file instead. The returned tokenizer encodes special-token spellings found inside documents as
    plain text, so a document that mentions "<|endoftext|>" cannot inject a real EOS."""
    return _parsed(*_tokenizer_bytes(path_or_url), eos_token=eos_token, bos_token=bos_token)


def _tokenizer_bytes(path_or_url: str) -> tuple[bytes, str]:
    if not isinstance(path_or_url, (str, os.PathLike)):
        raise TokenizerError(f"tokenizer must be a path or URL string, got {type(path_or_url).__name__}")
    return _read_tokenizer_bytes(os.fspath(path_or_url))


def _parsed(data: bytes, where: str, *, eos_token: str | None = None,
            bos_token: str | None = None) -> tuple[Tokenizer, TokenizerIdentity]:
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # tokenizers raises plain Exception subclasses with serde messages
        raise TokenizerError(f"{where}: not a valid tokenizers JSON file: {e}") from e
    identity = tokenizer_identity(tok, data, eos_token=eos_token, bos_token=bos_token, where=where)
    tok.encode_special_tokens = True
    return tok, identity


_SHARED: dict[str, tuple[Tokenizer, TokenizerIdentity]] = {}


def shared_tokenizer(path_or_url: str, sha256: str | None = None) -> tuple[Tokenizer, TokenizerIdentity]:
    """`load_tokenizer` parsed once per process per content (the file's sha256, its identity): a run's
    tokenize steps and the shards they encode in this process share one object (each parse of a
    tokenizer.json is 10 ms and more). Callers must not change it; `load_tokenizer` gives a fresh one.
    ``sha256``: the content the caller expects; when this process holds it, the file is not read again."""
    if sha256 is not None and sha256 in _SHARED:
        return _SHARED[sha256]
    data, where = _tokenizer_bytes(path_or_url)
    key = hashlib.sha256(data).hexdigest()
    if key not in _SHARED:
        _SHARED[key] = _parsed(data, where)
    return _SHARED[key]


# ---------------------------------------------------------------------------------------------- training


def find_source_files(input_dir: str) -> list[str]:
    """The parquet parts of a consolidated source: its main documents (``DocumentsDir.MAIN``,
    ``<dir>/outputs/main/*.parquet``), or ``<dir>/*.parquet``.

    Sorted by name so every consumer sees the same order; dot-files are skipped."""
    root = store_url(input_dir)
    for sub in (DocumentsDir.MAIN, ""):
        base = join(root, sub) if sub else root
        found = parquet_names(base)
        if found:
            return [join(base, n) for n in found]
    raise FileNotFoundError(
        f"no parquet files in source {input_dir!r}: expected {DocumentsDir(input_dir).main}/*.parquet"
    )


def _iter_texts(path: str, batch_rows: int = 256) -> Iterator[str]:
    with open_read(path) as f:
        pf = pq.ParquetFile(f)
        if "text" not in pf.schema_arrow.names:
            raise ValueError(f"{path}: no 'text' column (columns: {pf.schema_arrow.names})")
        for batch in pf.iter_batches(batch_size=batch_rows, columns=["text"]):
            for t in batch.column(0).to_pylist():
                if isinstance(t, str) and t:
                    yield t


def sample_corpus(input_dirs: list[str], max_bytes: int, seed: int = 0) -> list[str]:
    """Documents for tokenizer training: round-robin over sources, one document at a time, until
    ``max_bytes`` UTF-8 bytes are taken. Within a source the files are read starting at file
    ``seed % n_files`` (wrapping), so different seeds train on different slices. Ids are content hashes
    and files are sorted by id, so the first documents of a file are already a uniform-looking sample."""
    streams = []
    for d in sorted(input_dirs):
        files = find_source_files(d)
        start = seed % len(files)
        order = files[start:] + files[:start]
        streams.append((t for p in order for t in _iter_texts(p)))
    texts: list[str] = []
    used = 0
    while streams and used < max_bytes:
        alive = []
        for s in streams:
            t = next(s, None)
            if t is None:
                continue
            alive.append(s)
            texts.append(t)
            used += len(t.encode("utf-8"))
            if used >= max_bytes:
                break
        streams = alive
    return texts


def new_bpe_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE (split by `SPLIT_PATTERN`, then GPT-2's byte alphabet; no normaliser:
    lossless)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _merge_of(token: bytes, rank: int, rank_of: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two tokens whose merge made ``token`` (of ``rank``): byte-level BPE of its bytes with the
    merges made before it (the lowest-ranked adjacent pair first, as tiktoken encodes), which leaves
    exactly the pair the trainer merged."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        found = [(rank_of.get(parts[i] + parts[i + 1], rank), i) for i in range(len(parts) - 1)]
        best, at = min(found)
        if best >= rank:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        raise RuntimeError(f"BPE training gave token {token!r} (rank {rank}) no pair of earlier tokens")
    return parts[0], parts[1]


def _bpe_from_ranks(ranks: list[tuple[bytes, int]], specials: list[str]) -> Tokenizer:
    """The HF byte-level BPE of trained ranks (the 256 bytes at ranks 0-255 in byte order, then one rank
    per merge): ``specials`` take ids 0.., then byte b id len(specials) + b, then each merge its rank
    plus len(specials), so ids follow merge order (what `engine.convert` needs for tiktoken)."""
    alphabet = bytes_to_unicode()
    rank_of = dict(ranks)
    if any(rank_of.get(bytes([b])) != b for b in range(256)):
        raise RuntimeError("BPE training did not give the 256 bytes ranks 0-255 in byte order")
    spelled = {token: "".join(alphabet[b] for b in token) for token in rank_of}
    vocab = {s: i for i, s in enumerate(specials)}
    merges = []
    for token, rank in sorted(ranks, key=lambda tr: tr[1]):
        vocab[spelled[token]] = len(specials) + rank
        if rank >= 256:
            left, right = _merge_of(token, rank, rank_of)
            merges.append((spelled[left], spelled[right]))
    tok = new_bpe_tokenizer()
    tok.model = models.BPE(vocab=vocab, merges=merges)
    tok.add_special_tokens(specials)
    return tok


# rustbpe's rayon threads while it trains. Only its word counting runs in parallel, a small share of the
# training; its merge loop runs on one thread while the others spin. On the pipeline benchmark's 20 MB
# sample (vocab 8,192 and 32,768, 2 cores), two threads took 2.6-3.1 CPU-s for 1.6-1.9 s of wall, one
# thread 1.7-2.0 CPU-s for 1.7-2.0 s: a third of the CPU saved, the wall the same.
TRAIN_THREADS = 1


@contextlib.contextmanager
def _rayon_threads(n: int) -> Iterator[None]:
    """``RAYON_NUM_THREADS=n`` while rustbpe trains, unless the user set it. Rayon reads it once per
    process, when the library's pool first starts (during the first training), so rustbpe keeps ``n``
    threads in this process; the variable is restored after, so a pool that starts later (HF tokenizers'
    in the driver) keeps its default. Nothing else runs in the driver while a step trains."""
    if "RAYON_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["RAYON_NUM_THREADS"] = str(n)
    try:
        yield
    finally:
        os.environ.pop("RAYON_NUM_THREADS", None)


def train_tokenizer(input_dirs: list[str], out_dir: str, *, vocab_size: int = 8192,
                    max_bytes: int = 20_000_000, seed: int = 0) -> dict:
    """Train a byte-level BPE on up to ``max_bytes`` of the sources; write ``out_dir/tokenizer.json``.

    The merges are learned by rustbpe (split by `byte_level.SPLIT_PATTERN`, the most frequent pair merged
    first, ties broken by the pair's ranks; on `TRAIN_THREADS` rayon thread unless RAYON_NUM_THREADS is set),
    then written as a HF tokenizer. Why not HF's BpeTrainer: it tracks each byte's alignment while counting
    words, 6.8 of its 8.4 CPU-s on the benchmark's 20 MB sample; rustbpe took 2.9 for a tokenizer as good
    (3.1422 bytes per token on 6 MB of held-out documents, both; HF's token count 1 higher). Merging stops at
    ``vocab_size`` or when no pair is left: on a small sample a pair seen once can be merged (HF's trainer
    stopped at pairs seen twice). Deterministic: the same inputs and arguments give byte-identical
    tokenizer.json whatever the thread count (the sample order is fixed; the counts are sums). Special tokens
    take ids 0..2: EOS, BOS, PAD. Returns the identity dict plus the path and how much text was used."""
    import rustbpe

    specials = [EOS_TOKEN, BOS_TOKEN, PAD_TOKEN]
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size must be >= {256 + len(specials)} (256 bytes + {len(specials)} special "
                         f"tokens), got {vocab_size}")
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    texts = sample_corpus(list(input_dirs), max_bytes, seed)
    if not texts:
        raise ValueError(f"no non-empty text found to train a tokenizer in {list(input_dirs)}")
    trainer = rustbpe.Tokenizer()
    with _rayon_threads(TRAIN_THREADS):
        trainer.train_from_iterator(iter(texts), vocab_size - len(specials), pattern=SPLIT_PATTERN)
    tok = _bpe_from_ranks(trainer.get_mergeable_ranks(), specials)
    data = tok.to_str(pretty=False).encode("utf-8")
    final = join(store_url(out_dir), TOKENIZER_FILE)
    atomic_write_bytes(final, data)
    identity = tokenizer_identity(tok, data, where=final)
    return {
        **identity.to_dict(),
        "path": f"{out_dir.rstrip('/')}/{TOKENIZER_FILE}",
        "docs_used": len(texts),
        "bytes_used": sum(len(t.encode("utf-8")) for t in texts),
        "requested_vocab_size": vocab_size,
    }
