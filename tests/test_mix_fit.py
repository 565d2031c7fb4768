"""The search's numerics on synthetic losses: sampling around the prior and around a previous choice,
the model choice by leave-one-out error and its rejection when it cannot tell mixtures apart, the trust
region the choice stays in, the seed noise and the intervals, and the decision's rule."""

import numpy as np
import pytest

from datakit.mix.search import fit_models, sample_around, sample_mixtures
from datakit.mix.stats import gain_test, interval, seed_noise, t_quantile
from datakit.mix.trust import choose, trust_region
from datakit.mix.verdict import decide

PRIOR = {"a": 0.2, "b": 0.5, "c": 0.3}


def test_samples_start_at_the_prior_are_seeded_and_sum_to_one():
    s1 = sample_mixtures(PRIOR, 8, 4.0, seed=3)
    assert s1[0] == PRIOR and s1 == sample_mixtures(PRIOR, 8, 4.0, seed=3)
    assert s1 != sample_mixtures(PRIOR, 8, 4.0, seed=4)
    assert sample_mixtures(PRIOR, 12, 4.0, seed=3)[:8] == s1  # more proxies keep the first ones
    assert all(abs(sum(m.values()) - 1.0) < 1e-9 and min(m.values()) >= 0 for m in s1)
    mean_a = np.mean([m["a"] for m in sample_mixtures(PRIOR, 400, 4.0, seed=0)[1:]])
    assert mean_a == pytest.approx(0.2, abs=0.03)  # "around the prior": the Dirichlet's mean is the prior


def test_later_rounds_sample_around_the_previous_choice_seeded_by_round():
    center = {"a": 0.7, "b": 0.1, "c": 0.2}
    r2 = sample_around(center, 200, 20.0, seed=3, round_no=2)
    assert r2[:5] == sample_around(center, 5, 20.0, seed=3, round_no=2)  # draw j does not depend on n
    assert r2[:5] != sample_around(center, 5, 20.0, seed=3, round_no=3)
    assert np.mean([m["a"] for m in r2]) == pytest.approx(0.7, abs=0.02)
    assert np.std([m["a"] for m in r2]) < 0.08  # concentrated: a refinement, not a new round one


def _law(m):  # diminishing returns in a, b hurts: a data-mixing law with a floor of 2
    return 2.0 + np.exp(1.5 * m["b"] - 2.0 * m["a"] + 0.3 * m["c"])


def test_the_fit_recovers_a_mixing_law_and_prefers_it_by_leave_one_out_error():
    mixtures = sample_mixtures(PRIOR, 12, 2.0, seed=1)
    model = fit_models(mixtures, [_law(m) for m in mixtures])[0]
    assert model.kind == "law" and model.accepted and model.loo_rmse < 0.01 and model.r2 > 0.999
    assert model.floor == pytest.approx(2.0, abs=0.1)
    held_out = {"a": 0.6, "b": 0.1, "c": 0.3}
    assert model.predict([[held_out[k] for k in model.names]])[0] == pytest.approx(_law(held_out), rel=0.02)
    gain, se = model.difference(PRIOR, held_out)
    assert gain == pytest.approx(_law(PRIOR) - _law(held_out), rel=0.05) and 0 <= se < 0.05


def test_a_linear_truth_gets_the_linear_model():
    mixtures = sample_mixtures(PRIOR, 10, 2.0, seed=2)
    model = fit_models(mixtures, [3.0 * m["a"] + 4.0 * m["b"] + 5.0 * m["c"] for m in mixtures])[0]
    assert model.kind == "linear" and model.coef == pytest.approx((3.0, 4.0, 5.0), abs=1e-3)


def test_a_model_that_predicts_held_out_proxies_worse_than_its_own_differences_is_rejected():
    """Pure seed noise around a flat truth: every model's differences are noise, so none is used."""
    mixtures = sample_mixtures(PRIOR, 10, 2.0, seed=2)
    rng = np.random.default_rng(0)
    fits = fit_models(mixtures, list(4.0 + 0.02 * rng.standard_normal(len(mixtures))))
    assert fits and not any(f.accepted for f in fits)
    assert all(f.loo_rmse >= f.spread for f in fits)
    assert fits[0].to_dict()["accepted"] is False


def test_the_choice_stays_in_the_trust_region_never_on_a_corner_no_proxy_visited():
    """The issue's failure: a linear fit of proxies that held at most ~0.5 of `b` put its minimum at
    100% b. Confined to the samples' hull expanded by `expand`, the choice moves toward b only so far."""
    samples = [m for m in sample_mixtures(PRIOR, 40, 8.0, seed=5) if m["b"] <= 0.5][:8]
    model = fit_models(samples, [4.0 - 1.0 * m["b"] for m in samples])[0]
    assert model.kind == "linear"
    top = max(m["b"] for m in samples)
    for expand in (0.0, 0.3):
        region = trust_region(samples, expand)
        chosen, pred, n = choose(model, region, candidates=2000, seed=0, min_weight={}, max_weight={})
        assert chosen["b"] == pytest.approx((1 - expand) * top + expand, abs=2e-4)  # the region's furthest point
        assert chosen["b"] < 0.99 and region.box()["b"][1] == pytest.approx((1 - expand) * top + expand)
        assert region.nearest_sample(chosen) <= 2 * expand + 0.01 and pred == pytest.approx(4.0 - chosen["b"], abs=1e-3)
    assert region.to_dict()["vertices"] <= len(samples) * 3


def test_choose_minimises_the_prediction_within_the_constraints():
    mixtures = sample_mixtures(PRIOR, 12, 2.0, seed=1)
    model = fit_models(mixtures, [_law(m) for m in mixtures])[0]
    region = trust_region(mixtures, 1.0)  # expand 1: the whole simplex
    free, _, _ = choose(model, region, candidates=5000, seed=0, min_weight={}, max_weight={})
    assert free["a"] > 0.95  # the law falls fastest along a
    capped, pred, n = choose(model, region, candidates=5000, seed=0, min_weight={"b": 0.1}, max_weight={"a": 0.5})
    assert capped["a"] <= 0.5 + 1e-6 and capped["b"] >= 0.1 - 1e-6 and 0 < n < 5000 + 40
    assert pred == pytest.approx(_law(capped), rel=0.02)
    assert choose(model, region, candidates=5000, seed=0, min_weight={}, max_weight={})[0] == free  # seeded
    with pytest.raises(ValueError, match="no mixture in the search's trust region satisfies"):
        choose(model, trust_region(mixtures, 0.0), candidates=100, seed=0, min_weight={"a": 0.95}, max_weight={})


def test_t_quantiles_seed_noise_and_the_gain_interval():
    # Student's t table values (two-sided 95%: the 0.975 quantile)
    for df, t in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (6, 2.4469), (30, 2.0423)):
        assert t_quantile(0.975, df) == pytest.approx(t, abs=1e-4)
    assert t_quantile(0.95, 5) == pytest.approx(2.0150, abs=1e-4)
    noise = seed_noise({"p": [4.0, 4.1, 4.2], "q": [3.0, 3.2], "single": [5.0]})
    assert noise.df == 3 and set(noise.groups) == {"p", "q"}
    assert noise.sd == pytest.approx(np.sqrt((0.01 + 0 + 0.01 + 0.01 + 0.01) / 3))
    gain = gain_test([4.0, 4.1, 4.2], [3.0, 3.2], noise, 0.95)
    assert gain.value == pytest.approx(4.1 - 3.1) and gain.se == pytest.approx(noise.sd * np.sqrt(1 / 3 + 1 / 2))
    assert gain.lo == pytest.approx(gain.value - t_quantile(0.975, 3) * gain.se)
    with pytest.raises(ValueError, match="at least two seeds"):
        seed_noise({"p": [4.0]})


def test_the_decision_returns_the_candidate_only_past_the_noise_and_says_why():
    common = dict(accepted=True, loo_rmse=0.01, spread=0.05, same_as_prior=False, seed_sd=0.02,
                  predicted=interval(0.1, 0.02, 5, 0.95))
    win = decide(measured=interval(0.1, 0.02, 6, 0.95), min_gain=0.0, **common)
    assert win.returned == "candidate" and "measured gain +0.1000" in win.reason
    within = decide(measured=interval(0.03, 0.02, 6, 0.95), min_gain=0.0, **common)
    assert within.returned == "proportional" and "within the seed noise" in within.reason
    worse = decide(measured=interval(-0.05, 0.02, 6, 0.95), min_gain=0.0, **common)
    assert worse.returned == "proportional" and "measured worse" in worse.reason
    margin = decide(measured=interval(0.1, 0.02, 6, 0.95), min_gain=0.06, **common)
    assert margin.returned == "proportional"  # the interval's lower end (0.051) is under min_gain
    unverified = decide(measured=None, min_gain=0.0, **common)
    assert unverified.returned == "candidate" and "not verified" in unverified.reason
    rejected = decide(measured=None, min_gain=0.0, **{**common, "accepted": False, "loo_rmse": 0.06})
    assert rejected.returned == "proportional" and "no model was accepted" in rejected.reason
    same = decide(measured=None, min_gain=0.0, **{**common, "same_as_prior": True})
    assert same.returned == "proportional" and "proportional itself" in same.reason
    assert "pooled two-sample t-test" in win.to_dict(0.95, 0.0)["test"]
