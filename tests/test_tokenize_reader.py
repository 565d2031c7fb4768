"""Training reader: windows, Feistel shuffle + block mixture over real caches, resume."""

import json
import os
import shutil

import numpy as np
import pytest

from datakit.shuffle import ExecConfig
from datakit.tokenize.cache import CacheNotReady, open_cache
from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
from datakit.tokenize.reader import TrainBatches
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer

INLINE = ExecConfig(backend="inline")
SEQ = 32


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader")
    corpora = {
        "code": stdlib_texts(300_000, subdir="json") + stdlib_texts(300_000, subdir="email"),
        "prose": license_texts() or stdlib_texts(150_000, subdir="asyncio"),
        "tiny": ["A tiny source: " + "short words here and there. " * 20, "Another tiny document. " * 15],
    }
    for name, texts in corpora.items():
        write_source(str(root / "src" / name), texts, 2 if name != "tiny" else 1, source=name)
    tok = train_tokenizer([str(root / "src" / n) for n in corpora], str(root / "tok"), vocab_size=800,
                          max_bytes=500_000)
    out = {"root": root, "tok": tok["path"], "train": {}, "validation": {}}
    for name in corpora:
        res = tokenize_source(name, str(root / "src" / name), str(root / "cache" / name), tok["path"],
                              validation_fraction=0.1 if name != "tiny" else 0.0, exec_config=INLINE)
        out["train"][name] = res.split_dir("train")
        out["validation"][name] = res.split_dir("validation")
    return out


WEIGHTS = {"code": 0.6, "prose": 0.3, "tiny": 0.1}


def test_batches_are_windows_of_the_caches(caches):
    tb = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=8, seed=0)
    opened = {n: open_cache(d) for n, d in caches["train"].items()}
    assert tb.tokens_per_batch == 8 * SEQ
    for name, c in opened.items():
        assert tb.num_windows[name] == (c.total_tokens - 1) // SEQ
    for step in (0, 1, 57):
        b = tb.batch(step)
        assert b.shape == (8, SEQ + 1) and b.dtype == np.int32
        src, win = tb.locate(step)
        for row in range(8):
            name = tb.sources[src[row]]
            start = int(win[row]) * SEQ
            assert np.array_equal(b[row], opened[name].tokens(start, start + SEQ + 1).astype(np.int32))


def test_batch_is_pure_in_seed_and_step_so_resume_needs_only_the_step(caches):
    run = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=4, seed=42)
    uninterrupted = [run.batch(s) for s in range(30)]
    # "restart" at step 17 in a fresh object, as a resumed job would
    resumed = TrainBatches(dict(reversed(list(caches["train"].items()))), WEIGHTS, seq_len=SEQ, batch_size=4, seed=42)
    for s in range(17, 30):
        assert np.array_equal(resumed.batch(s), uninterrupted[s])
    # the iterator yields the same sequence
    it = iter(run)
    assert all(np.array_equal(next(it), uninterrupted[s]) for s in range(5))
    # a different seed gives different data
    other = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=4, seed=43)
    assert not all(np.array_equal(other.batch(s), uninterrupted[s]) for s in range(3))


def test_mixture_proportions_follow_weights(caches):
    tb = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=10, seed=1, block_size=100)
    assert tb.counts_per_block == {"code": 60, "prose": 30, "tiny": 10}
    sources = np.concatenate([tb.locate(s)[0] for s in range(100)])  # 1000 sequences
    for i, name in enumerate(tb.sources):
        assert abs((sources == i).mean() - WEIGHTS[name]) < 0.05
    # every block of 100 sequences holds exactly the counts
    blocks = sources.reshape(10, 100)
    assert all(np.bincount(b, minlength=3).tolist() == [60, 30, 10] for b in blocks)


def test_small_source_wraps_and_every_window_is_drawn(caches):
    tb = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=16, seed=5, block_size=160)
    tiny = tb.sources.index("tiny")
    w = tb.num_windows["tiny"]
    assert w < 30  # genuinely small: it runs out and wraps many times below
    drawn, draw_numbers = [], []
    for step in range(40):
        src, win = tb.locate(step)
        drawn.extend(win[src == tiny].tolist())
        _, draw = tb.mixture.assign(np.arange(step * 16, (step + 1) * 16))
        draw_numbers.extend(draw[src == tiny].tolist())
    assert len(drawn) > 3 * w
    assert set(drawn) == set(range(w))  # all elements eventually drawn
    # each epoch (draw numbers e*w .. e*w+w-1) is a permutation of the source's windows
    by_draw = [win for _, win in sorted(zip(draw_numbers, drawn))]
    assert sorted(draw_numbers) == list(range(len(drawn)))
    for e in range(3):
        assert sorted(by_draw[e * w : (e + 1) * w]) == list(range(w))
    assert by_draw[:w] != by_draw[w : 2 * w]  # a fresh order each epoch


def test_big_source_windows_are_shuffled_without_repeats_within_an_epoch(caches):
    tb = TrainBatches({"code": caches["train"]["code"]}, {"code": 1.0}, seq_len=SEQ, batch_size=64, seed=3)
    wins = np.concatenate([tb.locate(s)[1] for s in range(10)])
    assert len(np.unique(wins)) == len(wins)  # 640 draws < num_windows: no repeats
    assert abs(np.corrcoef(np.arange(len(wins)), wins)[0, 1]) < 0.2  # not in corpus order


def test_lcg_baseline_is_selectable(caches):
    f = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=4, seed=0)
    lcg = TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=4, seed=0, permutation="lcg")
    assert lcg.batch(3).shape == (4, SEQ + 1)
    assert np.array_equal(f.locate(3)[0], lcg.locate(3)[0])  # same mixture
    assert not np.array_equal(f.locate(3)[1], lcg.locate(3)[1])  # different windows
    with pytest.raises(ValueError, match="permutation"):
        TrainBatches(caches["train"], WEIGHTS, seq_len=SEQ, batch_size=4, seed=0, permutation="random")


def test_configuration_errors(caches, tmp_path):
    with pytest.raises(ValueError, match="no cache"):
        TrainBatches(caches["train"], {**WEIGHTS, "missing": 1.0}, seq_len=SEQ, batch_size=4, seed=0)
    with pytest.raises(ValueError, match="no mixture weight"):
        TrainBatches(caches["train"], {"code": 1.0}, seq_len=SEQ, batch_size=4, seed=0)
    with pytest.raises(ValueError, match="fewer than one window"):
        TrainBatches(caches["train"], WEIGHTS, seq_len=100_000, batch_size=4, seed=0)
    # a zero weight excludes a source, even one too small for the window
    tb = TrainBatches(caches["train"], {"code": 1.0, "prose": 0.0, "tiny": 0.0}, seq_len=SEQ, batch_size=4, seed=0)
    assert tb.sources == ["code"]
    # an unfinished cache refuses to load
    broken = str(tmp_path / "prose")
    shutil.copytree(caches["train"]["prose"], broken)
    ledger = json.load(open(os.path.join(broken, "ledger.json")))
    ledger["finished"] = False
    json.dump(ledger, open(os.path.join(broken, "ledger.json"), "w"))
    with pytest.raises(CacheNotReady, match="unfinished"):
        TrainBatches({**caches["train"], "prose": broken}, WEIGHTS, seq_len=SEQ, batch_size=4, seed=0)
    # caches from different tokenizers cannot be mixed
    other = str(tmp_path / "other")
    shutil.copytree(caches["train"]["prose"], other)
    ledger = json.load(open(os.path.join(other, "ledger.json")))
    ledger["tokenizer"]["sha256"] = "0" * 64
    json.dump(ledger, open(os.path.join(other, "ledger.json"), "w"))
    with pytest.raises(ValueError, match="different tokenizers"):
        TrainBatches({**caches["train"], "prose": other}, WEIGHTS, seq_len=SEQ, batch_size=4, seed=0)
