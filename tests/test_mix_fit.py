"""The search's numerics on synthetic losses: sampling around the prior, the model choice by
leave-one-out error, and the constrained choice."""

import numpy as np
import pytest

from datakit.mix.search import choose, fit, sample_mixtures

PRIOR = {"a": 0.2, "b": 0.5, "c": 0.3}


def test_samples_start_at_the_prior_are_seeded_and_sum_to_one():
    s1 = sample_mixtures(PRIOR, 8, 4.0, seed=3)
    assert s1[0] == PRIOR and s1 == sample_mixtures(PRIOR, 8, 4.0, seed=3)
    assert s1 != sample_mixtures(PRIOR, 8, 4.0, seed=4)
    assert sample_mixtures(PRIOR, 12, 4.0, seed=3)[:8] == s1  # more proxies keep the first ones
    assert all(abs(sum(m.values()) - 1.0) < 1e-9 and min(m.values()) >= 0 for m in s1)
    mean_a = np.mean([m["a"] for m in sample_mixtures(PRIOR, 400, 4.0, seed=0)[1:]])
    assert mean_a == pytest.approx(0.2, abs=0.03)  # "around the prior": the Dirichlet's mean is the prior


def _law(m):  # diminishing returns in a, b hurts: a data-mixing law with a floor of 2
    return 2.0 + np.exp(1.5 * m["b"] - 2.0 * m["a"] + 0.3 * m["c"])


def test_the_fit_recovers_a_mixing_law_and_prefers_it_by_leave_one_out_error():
    mixtures = sample_mixtures(PRIOR, 12, 2.0, seed=1)
    model = fit(mixtures, [_law(m) for m in mixtures])
    assert model.kind == "law" and model.loo_rmse < 0.01 and model.r2 > 0.999
    assert model.floor == pytest.approx(2.0, abs=0.1)
    held_out = {"a": 0.6, "b": 0.1, "c": 0.3}
    assert model.predict([[held_out[k] for k in model.names]])[0] == pytest.approx(_law(held_out), rel=0.02)


def test_a_linear_truth_gets_the_linear_model():
    mixtures = sample_mixtures(PRIOR, 10, 2.0, seed=2)
    model = fit(mixtures, [3.0 * m["a"] + 4.0 * m["b"] + 5.0 * m["c"] for m in mixtures])
    assert model.kind == "linear" and model.coef == pytest.approx((3.0, 4.0, 5.0), abs=1e-3)


def test_choose_minimises_the_prediction_within_the_constraints():
    mixtures = sample_mixtures(PRIOR, 12, 2.0, seed=1)
    model = fit(mixtures, [_law(m) for m in mixtures])
    free, _, _ = choose(model, PRIOR, mixtures, candidates=5000, seed=0, min_weight={}, max_weight={})
    assert free["a"] > 0.95  # the law falls fastest along a
    capped, pred, n = choose(model, PRIOR, mixtures, candidates=5000, seed=0, min_weight={"b": 0.1},
                             max_weight={"a": 0.5})
    assert capped["a"] <= 0.5 + 1e-6 and capped["b"] >= 0.1 - 1e-6 and 0 < n < 5000 + 15
    assert pred == pytest.approx(_law(capped), rel=0.02)
    assert choose(model, PRIOR, mixtures, candidates=5000, seed=0, min_weight={}, max_weight={}) == (
        free, *choose(model, PRIOR, mixtures, candidates=5000, seed=0, min_weight={}, max_weight={})[1:])
    with pytest.raises(ValueError, match="no mixture satisfies"):
        choose(model, PRIOR, mixtures, candidates=100, seed=0, min_weight={"a": 0.7, "b": 0.7}, max_weight={})
