"""A fastText quality classifier trained on the corpus itself: gathering labelled examples (positive
sources or files plus a uniform sample of the corpus, or a labels file), training, held-out metrics, and
scoring with a model loaded once per worker process.

Determinism: examples are ordered by a hash of their id, the held-out split is stratified by a hash of
the id (`datakit.classify.heldout`, with the metrics), and fastText trains on one thread with a fixed
seed, so the same inputs give the same model file byte for byte (tests/test_quality_classifier.py checks
it). Scoring is a pure function of the model and the text.

The text a model sees is the document's first ``max_chars`` characters with newlines as spaces (fastText
reads one line; its tokenizer splits on whitespace, so this is the same input as datatrove's filter with
``newline_replacement=" "``).
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import math
import multiprocessing
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pyarrow.parquet as pq
import xxhash

from datakit.classify.config import ClassifierConfig
from datakit.core.documents import content_id

POSITIVE = "__label__hq"
NEGATIVE = "__label__lq"
_CLASS_WORDS = {"positive": True, "pos": True, "hq": True, "negative": False, "neg": False, "lq": False}
_lock = threading.Lock()
_models: dict[tuple[str, str], Any] = {}


@dataclass(frozen=True)
class Example:
    id: str
    text: str
    positive: bool


def model_line(text: str, max_chars: int) -> str:
    """What fastText reads for one document (module docstring)."""
    return text[:max_chars].replace("\n", " ").replace("\r", " ")


def id_hash(doc_id: str, salt: str) -> int:
    return xxhash.xxh3_64_intdigest(f"{salt}\0{doc_id}".encode())


def parquet_files(documents_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(documents_dir, "outputs", "main", "*.parquet")))


def read_docs(files: Iterable[str]) -> Iterable[tuple[str, str]]:
    for f in files:
        t = pq.read_table(f, columns=["id", "text"])
        yield from zip(t.column("id").to_pylist(), t.column("text").to_pylist())


def read_text_files(paths: Iterable[str]) -> list[tuple[str, str]]:
    """JSONL files with a "text" field: (content id, text) per line; a line without text fails, named."""
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    text = json.loads(line)["text"]
                except (ValueError, KeyError, TypeError):
                    raise ValueError(f"{path}:{n}: expected a JSON object with a \"text\" field; fix the line "
                                     "or leave the file out of positive_files") from None
                out.append((content_id(text), text))
    return out


def sample_ids(files: Iterable[str], n: int, salt: str) -> set[str]:
    """A uniform sample of ``n`` document ids (the smallest hashes of id+salt): independent of file layout."""
    best: list[tuple[int, str]] = []
    for f in files:
        ids = pq.read_table(f, columns=["id"]).column("id").to_pylist()
        best.extend((id_hash(i, salt), i) for i in ids)
        if len(best) > 4 * n:
            best = sorted(best)[:n]
    return {i for _, i in sorted(best)[:n]}


def examples_from_corpus(cfg: ClassifierConfig, positive_dirs: list[str], negative_dirs: list[str]) -> list[Example]:
    """Positives (every document of the positive sources and files) and a uniform negative sample."""
    pos = [(i, t) for d in positive_dirs for i, t in read_docs(parquet_files(d))]
    pos += read_text_files(cfg.positive_files)
    neg_files = [f for d in negative_dirs for f in parquet_files(d)]
    chosen = sample_ids(neg_files, cfg.negatives, f"negatives-{cfg.seed}")
    neg = [(i, t) for i, t in read_docs(neg_files) if i in chosen]
    out = [Example(i, t, True) for i, t in pos] + [Example(i, t, False) for i, t in neg]
    check_classes(out, "the positives and the negative sample")
    return out


def parse_label(value: Any, threshold: float) -> bool | None:
    """A label as the class it names: a number is a score (>= threshold: positive), a word a class."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value >= threshold
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _CLASS_WORDS:
            return _CLASS_WORDS[word]
        try:
            number = float(word)
        except ValueError:
            return None
        return number >= threshold if math.isfinite(number) else None
    return None


def read_labels(path: str, threshold: float) -> list[tuple[int, str, bool]]:
    """(line number, id, positive) per line of a JSONL labels file ({"id", "label" or "score"}); a bad
    line fails naming it, before anything is trained."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e}); each line is {{\"id\": ..., \"label\": ...}}") from None
            value = row.get("label", row.get("score")) if isinstance(row, dict) else None
            if not isinstance(row, dict) or not isinstance(row.get("id"), str) or value is None:
                raise ValueError(f"{path}:{n}: expected {{\"id\": \"<document id>\", \"label\": <score or class>}}")
            positive = parse_label(value, threshold)
            if positive is None:
                raise ValueError(f"{path}:{n}: label {value!r} is neither a number (a score) nor a class "
                                 f"({', '.join(sorted(_CLASS_WORDS))}); fix the line")
            out.append((n, row["id"], positive))
    return out


def examples_from_labels(cfg: ClassifierConfig, labels: list[tuple[int, str, bool]], dirs: list[str]) -> list[Example]:
    """The labelled documents of the corpus; an id the corpus lacks fails naming its line."""
    wanted = {i for _, i, _ in labels}
    texts = {i: t for d in dirs for i, t in read_docs(parquet_files(d)) if i in wanted}
    for n, i, _ in labels:
        if i not in texts:
            raise ValueError(f"{cfg.labels}:{n}: unknown id {i!r}: no document of the corpus has it (ids are "
                             "the ids of the documents at this point of the pipeline)")
    out = [Example(i, texts[i], p) for _, i, p in labels]
    check_classes(out, str(cfg.labels))
    return out


def check_classes(examples: list[Example], what: str) -> None:
    npos = sum(e.positive for e in examples)
    if npos == 0 or npos == len(examples):
        empty = "positive" if npos == 0 else "negative"
        raise ValueError(f"{what}: the {empty} class is empty ({len(examples)} examples, all of the other "
                         "class); a classifier needs examples of both")


def train_model(train: list[Example], cfg: ClassifierConfig, model_path: str) -> None:
    """fastText supervised training on one thread with cfg.seed (deterministic), saved to model_path.

    It runs in a fresh (spawned) process: fastText's trainer keeps process state, and a third training in
    one process was seen to diverge (NaN) where the same inputs train cleanly in a new one."""
    params = {"lr": cfg.lr, "dim": cfg.dim, "epoch": cfg.epoch, "wordNgrams": cfg.word_ngrams,
              "minCount": cfg.min_count, "bucket": cfg.bucket, "loss": "softmax", "thread": 1, "seed": cfg.seed,
              "verbose": 0}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "train.txt")
        with open(data, "w", encoding="utf-8") as fh:
            for e in train:
                fh.write(f"{POSITIVE if e.positive else NEGATIVE} {model_line(e.text, cfg.max_chars)}\n")
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
            pool.submit(train_file, data, params, model_path).result()


def train_file(data: str, params: dict[str, Any], model_path: str) -> None:
    """fastText's train_supervised on a prepared file (run in its own process by train_model)."""
    _fasttext().train_supervised(input=data, **params).save_model(model_path)


def _fasttext() -> Any:
    try:
        import fasttext
    except ImportError:
        raise RuntimeError("the quality classifier needs fasttext-numpy2-wheel: pip install -e .") from None
    if not hasattr(fasttext, "train_supervised"):
        raise RuntimeError("the installed `fasttext` module can only predict (fasttext-predict); training needs "
                           "fasttext-numpy2-wheel: pip install --force-reinstall fasttext-numpy2-wheel")
    return fasttext


def load(path: str, sha256: str) -> Any:
    """The model at ``path``, loaded once per process (keyed by path and content hash)."""
    key = (path, sha256)
    if key not in _models:
        with _lock:
            if key not in _models:
                import fasttext

                _models[key] = fasttext.load_model(path)
    return _models[key]


def load_scorer(path: str, sha256: str) -> Any:
    """The compact model at ``path`` (``compact_model``) read for vectorised scoring
    (``datakit.classify.compact.Scorer``), once per process (keyed by path and content hash)."""
    key = (path, sha256, "scorer")
    if key not in _models:
        with _lock:
            if key not in _models:
                from datakit.classify.compact import Scorer

                _models[key] = Scorer(path, POSITIVE)
    return _models[key]


def compact_model(path: str, out_path: str) -> None:
    """The scoring model of the 2-label softmax model at ``path``, written to ``out_path``: dimension 1,
    each input row ``s[id] = E[id] . (w_pos - w_neg)`` and output rows ``[1]`` (positive), ``[0]``
    (negative). fastText scores a line with softmax(W mean(E[ids])), and for two labels
    softmax(...)[pos] = sigmoid(mean(E[ids]) . (w_pos - w_neg)) = sigmoid(mean(s[ids])), which the compact
    model computes with the same dictionary, word n-grams and smoothing: the same probabilities up to
    float32 rounding (tests/test_quality_classifier.py checks it), 32x less vector work per token and a
    row table small enough to stay in cache; ``datakit.classify.compact`` scores with it without
    fastText's per-word loop. Deterministic: the same model file gives the same bytes."""
    import fasttext

    model = fasttext.load_model(path)
    labels = list(model.get_labels())
    if sorted(labels) != sorted([POSITIVE, NEGATIVE]) or model.f.isQuant():
        raise ValueError(f"{path}: not a 2-label ({POSITIVE}, {NEGATIVE}) unquantized model: {labels}")
    emb = model.get_input_matrix().astype(np.float64)
    out = model.get_output_matrix().astype(np.float64)
    w = out[labels.index(POSITIVE)] - out[labels.index(NEGATIVE)]
    rows = (emb @ w).astype(np.float32).reshape(-1, 1)
    logits = np.zeros((len(labels), 1), dtype=np.float32)
    logits[labels.index(POSITIVE), 0] = 1.0
    model.set_matrices(rows, logits)
    model.save_model(out_path)


def score(model: Any, texts: list[str], max_chars: int) -> np.ndarray:
    """P(positive) per text as float64 (from fastText's float32, clipped to [0, 1])."""
    if not texts:
        return np.zeros(0, dtype=np.float64)
    # fastText's predict wants one line ending in "\n" per text; calling its C++ side directly spares the
    # Python wrapper's per-text check and copy ("\r" needs no replacing: fastText splits words on it).
    lines = [text[:max_chars].replace("\n", " ") + "\n" for text in texts]
    labels, probs = model.f.multilinePredict(lines, 2, 0.0, "strict")
    del lines
    if all(len(ls) == 2 for ls in labels):  # both labels, best first (always so with threshold 0)
        first = np.fromiter((ls[0] == POSITIVE for ls in labels), dtype=bool, count=len(texts))
        p = np.array(probs, dtype=np.float32)
        out = np.where(first, p[:, 0], p[:, 1]).astype(np.float64)
    else:
        out = np.empty(len(texts), dtype=np.float64)
        for i, (ls, ps) in enumerate(zip(labels, probs)):
            by_label = dict(zip(ls, ps))
            p = by_label.get(POSITIVE)
            out[i] = float(np.float32(p)) if p is not None else 1.0 - float(np.float32(by_label[NEGATIVE]))
    return np.clip(out, 0.0, 1.0)
