"""Mixture weights that grow up: staged phases switch exactly at their step, per-component draw numbers
continue across phases, resume from a step number gives identical batches, epoch caps hold exactly,
proportional-by-tokens with a temperature, and the `mixture:` manifest section's checks."""

import numpy as np
import pytest

from datakit.manifest import ManifestInvalid
from datakit.mix.config import MixtureConfig
from datakit.mix.plan import MixtureError, proportional, resolve, windows_of
from datakit.mix.resolve import plan_mixture
from datakit.pipeline import manifest_from_dict
from datakit.shuffle import ExecConfig
from datakit.tokenize.fixtures import license_texts, stdlib_texts, write_source
from datakit.tokenize.mixture import BlockMixture, StagedMixture, mixture_for
from datakit.tokenize.reader import TrainBatches
from datakit.tokenize.tokenize_step import tokenize_source
from datakit.tokenize.tokenizer import train_tokenizer

SEQ, BATCH = 32, 8


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixw")
    corpora = {"code": stdlib_texts(200_000, subdir="json"), "prose": license_texts() or stdlib_texts(100_000,
                                                                                                     subdir="email")}
    for name, texts in corpora.items():
        write_source(str(root / "src" / name), texts, 1, source=name)
    tok = train_tokenizer([str(root / "src" / n) for n in corpora], str(root / "tok"), vocab_size=600,
                          max_bytes=300_000)
    return {n: tokenize_source(n, str(root / "src" / n), str(root / "cache" / n), tok["path"],
                               validation_fraction=0.0, exec_config=ExecConfig(backend="inline")).split_dir("train")
            for n in corpora}


SCHEDULE = [(0, {"code": 0.5, "prose": 0.5}), (7, {"code": 1.0, "prose": 0.0}), (12, {"code": 0.25, "prose": 0.75})]


def test_staged_weights_switch_exactly_at_the_step_boundary(caches):
    tb = TrainBatches(caches, SCHEDULE, seq_len=SEQ, batch_size=BATCH, seed=3, block_size=16)
    code = tb.sources.index("code")
    # phase 1 (steps 7..11) is all code; the steps just before and after it are not
    for step in range(7, 12):
        assert (tb.locate(step)[0] == code).all(), step
    assert not (tb.locate(6)[0] == code).all()
    assert not (tb.locate(12)[0] == code).all()
    # phase 2 starts its blocks at step 12: the first block (16 sequences = 2 steps) holds 4 code, 12 prose
    first_block = np.concatenate([tb.locate(12)[0], tb.locate(13)[0]])
    assert int((first_block == code).sum()) == 4


def test_draw_numbers_continue_across_phases_and_resume_is_identical(caches):
    tb = TrainBatches(caches, SCHEDULE, seq_len=SEQ, batch_size=BATCH, seed=3, block_size=16)
    mixture = tb.mixture
    assert isinstance(mixture, StagedMixture)
    source, draw = mixture.assign(np.arange(20 * BATCH))
    for s in np.unique(source):  # every source's draws over the run are exactly 0, 1, 2, ... (no repeats)
        assert sorted(draw[source == s].tolist()) == list(range(int((source == s).sum())))
    assert mixture.draws_in_prefix(20 * BATCH) == {n: int((source == i).sum()) for i, n in enumerate(tb.sources)}
    full = [tb.batch(s) for s in range(20)]
    resumed = TrainBatches(dict(reversed(list(caches.items()))), SCHEDULE, seq_len=SEQ, batch_size=BATCH, seed=3,
                           block_size=16)
    for s in (19, 12, 11, 7, 6, 0):  # any step, in any order, from the step number alone
        assert np.array_equal(resumed.batch(s), full[s])


def test_a_single_phase_schedule_is_the_plain_mixture():
    plain = BlockMixture.from_weights({"a": 0.3, "b": 0.7}, 64, 5)
    staged = mixture_for([(0, {"a": 0.3, "b": 0.7})], 64, 5, batch_size=4)
    g = np.arange(500)
    assert all(np.array_equal(x, y) for x, y in zip(plain.assign(g), staged.assign(g)))


def test_epoch_caps_hold_exactly():
    windows = {"big": 10_000, "small": 37}
    plan = resolve([(0, {"big": 0.5, "small": 0.5})], windows, steps=100, batch_size=8, block_size=1024, seed=1,
                   max_epochs={"small": 2.0})
    assert plan.capped == ("small",)
    assert plan.draws["small"] <= 74 and plan.draws["big"] + plan.draws["small"] == 800
    assert plan.draws["small"] >= 70  # water-filling keeps the capped share near its cap, not at zero
    # counted sequence by sequence by the mixture the trainer uses: the cap holds, and the plan says so
    mixture = mixture_for(plan.schedule(), plan.block_size, 1, 8)
    source, draw = mixture.assign(np.arange(800))
    small = mixture.names.index("small")
    assert int((source == small).sum()) == plan.draws["small"] and int(draw[source == small].max()) < 74
    # the schedule closes at the budget, so the draws are dense: 0 .. draws-1, no window skipped or repeated
    assert sorted(draw[source == small].tolist()) == list(range(plan.draws["small"]))
    assert plan.epochs["small"] == pytest.approx(plan.draws["small"] / 37)


def test_caps_hold_across_staged_phases():
    windows = {"a": 500, "b": 20}
    plan = resolve([(0, {"a": 0.9, "b": 0.1}), (30, {"a": 0.2, "b": 0.8})], windows, steps=50, batch_size=4,
                   block_size=64, seed=0, max_epochs={"b": 1.5})
    assert plan.draws["b"] <= 30 and sum(plan.draws.values()) == 200
    staged = mixture_for(plan.schedule(), 64, 0, 4)
    source, _ = staged.assign(np.arange(200))
    assert int((source == staged.names.index("b")).sum()) == plan.draws["b"]


def test_caps_that_cannot_hold_say_so():
    with pytest.raises(MixtureError, match="caps allow 40 sequences but the budget is 800"):
        resolve([(0, {"a": 1.0})], {"a": 20}, steps=100, batch_size=8, block_size=1024, seed=0, max_epochs={"a": 2})
    with pytest.raises(MixtureError, match="a needs 400 windows, its cap allows 40.*a phase mixes only capped"):
        resolve([(0, {"a": 0.5, "b": 0.5}), (50, {"a": 1.0})], {"a": 20, "b": 1000}, steps=100, batch_size=8,
                block_size=64, seed=0, max_epochs={"a": 2})


def test_proportional_by_tokens_with_temperature():
    assert proportional({"a": 300, "b": 100}) == {"a": 0.75, "b": 0.25}
    flat = proportional({"a": 400, "b": 100}, temperature=2.0)  # sqrt: 20 vs 10
    assert flat["a"] == pytest.approx(2 / 3) and flat["b"] == pytest.approx(1 / 3)
    assert windows_of({"a": 65, "b": 64}, 32) == {"a": 2, "b": 1}


def test_plan_mixture_resolves_modes_on_exact_counts():
    tokens = {"web.high": 30_000, "web.low": 10_000, "code": 0}
    manifest = {"web.high": 1.0, "web.low": 1.0, "code": 1.0}
    mix = MixtureConfig(weights="proportional")
    plan = plan_mixture(mix, tokens, manifest, steps=10, batch_size=8, seq_len=32, seed=0)
    assert plan.weights == {"web.high": 0.75, "web.low": 0.25}  # code has no tokens: left out
    explicit = MixtureConfig(weights={"web.high": 1.0, "web.low": 3.0})
    assert plan_mixture(explicit, tokens, manifest, steps=10, batch_size=8, seq_len=32, seed=0).weights == {
        "web.high": 0.25, "web.low": 0.75}
    with pytest.raises(MixtureError, match="not a training component"):
        plan_mixture(MixtureConfig(weights={"web": 1.0}), tokens, manifest, steps=10, batch_size=8, seq_len=32, seed=0)
    with pytest.raises(MixtureError, match="code, which has no training tokens"):
        plan_mixture(MixtureConfig(weights={"code": 1.0}), tokens, manifest, steps=10, batch_size=8, seq_len=32,
                     seed=0)


def _manifest(tmp_path, mixture):
    (tmp_path / "a.txt").write_text("hello")
    return manifest_from_dict({"prefix": str(tmp_path / "out"), "sources": [
        {"name": "a", "uri": str(tmp_path / "a.txt"), "format": "text"}], "mixture": mixture})


def test_mixture_section_is_checked_with_located_errors(tmp_path):
    m = _manifest(tmp_path, {"weights": "proportional", "temperature": 2,
                             "schedule": [{"start": 100, "weights": {"a": 1}}], "max_epochs": {"a": 3}})
    mix = m.sections["mixture"]
    assert mix.weights == "proportional" and mix.schedule[0].start == 100 and mix.max_epochs == {"a": 3.0}
    bad = [({"weights": "tokens"}, "weights"), ({"weights": "search"}, "needs a search"),
           ({"schedule": [{"start": 9, "weights": "manifest"}, {"start": 5, "weights": "manifest"}]}, "increase"),
           ({"weights": {"a": -1}}, ">= 0"), ({"max_epochs": {"a": 0}}, "max_epochs must be > 0"),
           ({"search": {"proxies": 4}}, "target")]
    for mixture, message in bad:
        with pytest.raises(ManifestInvalid, match=message):
            _manifest(tmp_path, mixture)
