"""The training stage entry point: token caches in, trained model + metrics out.

``train_model`` is what the step layer wraps. It opens the caches through the tokenize reader (the
only thing `train` reads), checks them against each other and the model before any compilation, and
hands ``run_training`` a batch source and exact evaluation sets.

Bits per byte, exactly. A validation split's stream is its documents' tokens, each document ending
in EOS. We evaluate the stream prefixed by one EOS token (the same "start of document" context every
later document gets from its predecessor's EOS), in stride-``seq_len`` windows, masking the padding
of the last window. So every token of the evaluated documents is a target exactly once, and the
byte count is the ledger's UTF-8 byte count of those same documents: the cache's ``total_bytes``, or
the sum of per-shard ``bytes`` when ``eval_max_tokens`` limits the evaluation to a prefix of whole
shards. EOS targets are included in the NLL (they encode where documents end); nothing is estimated
or pro-rated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Callable, Iterable, Iterator

import numpy as np

from datakit.core.fsio import is_local, local_path
from datakit.tokenize.reader import CacheNotReady, TokenCache, TrainBatches, open_cache
from datakit.train.config import ConfigError, TrainConfig
from datakit.train.evaluate import EvalSet
from datakit.train.loop import TrainResult, run_training
from datakit.train.remote import RemoteMirror


def _open(kind: str, name: str, path: str) -> TokenCache:
    try:
        return open_cache(path)
    except CacheNotReady as e:
        raise CacheNotReady(f"{kind} cache for source {name!r}: {e}") from e


def cache_eval_set(
    name: str, cache: TokenCache, seq_len: int, rows_per_batch: int, max_tokens: int | None = None
) -> EvalSet:
    """Exact evaluation over whole shards of one validation cache (see module docstring)."""
    shards = cache.ledger["shards"]
    take, n_tokens, n_bytes = 0, 0, 0
    for entry in shards:
        if max_tokens is not None and take > 0 and n_tokens >= max_tokens:
            break
        take += 1
        n_tokens += int(entry["tokens"])
        n_bytes += int(entry["bytes"])
    # the evaluated prefix of the stream: shards are concatenated in ledger order
    context = int(cache.eos_id)
    n_windows = math.ceil(n_tokens / seq_len) if n_tokens else 0

    def batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for first in range(0, n_windows, rows_per_batch):
            rows = min(rows_per_batch, n_windows - first)
            out = np.zeros((rows, seq_len + 1), np.int32)
            mask = np.zeros((rows, seq_len), np.float32)
            for r in range(rows):
                # window j covers virtual-stream positions [j*T, j*T + T] where virtual position 0
                # is the EOS context and position p >= 1 is token p - 1 of the cache stream
                start = (first + r) * seq_len
                stop = min(start + seq_len + 1, n_tokens + 1)
                if start == 0:
                    out[r, 0] = context
                    cache.read_into(out[r, 1 : stop], 0)
                else:
                    cache.read_into(out[r, : stop - start], start - 1)
                mask[r, : stop - start - 1] = 1.0
            yield out, mask

    def bytes_for(targets: int) -> float | None:
        # only vouch for the byte count when exactly the tokens we planned were evaluated
        return float(n_bytes) if targets == n_tokens else None

    return EvalSet(name, batches, bytes_for, n_windows)


def _weights_blob(weights: dict[str, float] | list[tuple[int, dict[str, float]]]) -> object:
    if isinstance(weights, dict):
        return {k: float(v) for k, v in sorted(weights.items())}
    return [[int(s), {k: float(v) for k, v in sorted(w.items())}] for s, w in weights]


def _data_fingerprint(
    identity: dict, train: dict[str, TokenCache], weights: dict[str, float] | list, data_seed: int
) -> str:
    """What the batches depend on, without absolute paths (a moved cache is the same data)."""
    blob = {
        "tokenizer": identity.get("sha256"),
        "weights": _weights_blob(weights),
        "data_seed": data_seed,
        "sources": {
            n: [c.total_tokens, c.total_docs, c.total_bytes, c.num_shards] for n, c in sorted(train.items())
        },
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def train_model(
    cfg: TrainConfig,
    train_caches: dict[str, str],
    weights: dict[str, float] | list[tuple[int, dict[str, float]]],
    validation_caches: dict[str, str],
    out_dir: str,
    *,
    inject_nan_steps: Iterable[int] = (),
    stop_at: int | None = None,
    on_log: Callable[[dict], None] | None = None,
) -> TrainResult:
    """Train ``cfg`` on the mixture of ``train_caches`` (source -> split dir) by ``weights`` (a dict, or
    a schedule of (start step, weights) phases: see TrainBatches), evaluating on
    ``validation_caches``; write metrics.jsonl, loss.png, checkpoints/, result.json
    under ``out_dir`` (``TrainDir``; the result names them relative to ``out_dir``, for a remote
    out_dir too). Resumes from the latest checkpoint there. See run_training for the hooks."""
    cfg.validate()
    if not train_caches:
        raise ConfigError("train_model needs at least one training cache")
    train = {n: _open("train", n, p) for n, p in sorted(train_caches.items())}
    val = {n: _open("validation", n, p) for n, p in sorted(validation_caches.items())}

    identities = {}
    for kind, caches in (("train", train), ("validation", val)):
        for n, c in caches.items():
            identities.setdefault(c.tokenizer_identity.get("sha256"), []).append(f"{kind}:{n} ({c.path})")
    if len(identities) > 1:
        listing = "; ".join(f"{sha[:12]}: {', '.join(v)}" for sha, v in identities.items())
        raise ConfigError(f"caches were built with different tokenizers: {listing}")

    cache_vocab = max(c.vocab_size for c in (*train.values(), *val.values()))
    model_vocab = cfg.model.vocab_size if cfg.model.vocab_size is not None else cache_vocab
    for kind, caches in (("train", train), ("validation", val)):
        for n, c in caches.items():
            if c.vocab_size > model_vocab:
                raise ConfigError(
                    f"vocab mismatch: {kind} cache {n!r} ({c.path}) has vocab_size={c.vocab_size} but "
                    f"model.vocab_size={model_vocab}; token ids would index past the embedding table. "
                    "Raise model.vocab_size (or leave it null to take it from the cache)."
                )
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=model_vocab))

    weights = dict(weights) if isinstance(weights, dict) else [(int(s), dict(w)) for s, w in weights]
    batches = TrainBatches(dict(train_caches), weights, cfg.seq_len, cfg.batch_size, cfg.data_seed)
    eval_bs = cfg.eval_batch_size or cfg.batch_size
    eval_sets = [cache_eval_set(n, c, cfg.seq_len, eval_bs, cfg.eval_max_tokens) for n, c in val.items()]
    identity = next(iter(train.values())).tokenizer_identity
    run_info = {
        "tokenizer": identity,
        "train_sources": {
            n: {"path": c.path, "tokens": c.total_tokens, "docs": c.total_docs, "bytes": c.total_bytes,
                "windows": batches.num_windows.get(n),
                "weight": (weights if isinstance(weights, dict) else weights[0][1]).get(n)}
            for n, c in train.items()
        },
        "validation_sources": {
            n: {"path": c.path, "tokens": c.total_tokens, "docs": c.total_docs, "bytes": c.total_bytes}
            for n, c in val.items()
        },
    }
    if not isinstance(weights, dict):
        run_info["schedule"] = _weights_blob(weights)
    kwargs = dict(data_fingerprint=_data_fingerprint(identity, train, weights, cfg.data_seed),
                  run_info=run_info, inject_nan_steps=inject_nan_steps, stop_at=stop_at, on_log=on_log)
    if is_local(out_dir):
        return run_training(cfg, batches, eval_sets, local_path(out_dir), model_vocab, **kwargs)
    mirror = RemoteMirror(out_dir)  # s3://, gs://, ...: train in a local mirror, publish each checkpoint
    try:
        mirror.pull()
        res = run_training(cfg, batches, eval_sets, mirror.local, model_vocab,
                           on_checkpoint=mirror.on_checkpoint, **kwargs)
        return mirror.finish(res)
    finally:
        mirror.cleanup()
