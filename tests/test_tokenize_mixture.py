"""Block-deterministic mixture: exact counts per block, stable per-block order, proportions."""

import numpy as np
import pytest

from datakit.tokenize.mixture import BlockMixture, largest_remainder_counts


def test_largest_remainder_counts_sum_and_rounding():
    assert largest_remainder_counts({"a": 0.7, "b": 0.2, "c": 0.1}, 10) == {"a": 7, "b": 2, "c": 1}
    # quotas 5.6, 1.6, 0.8 -> floors 5, 1, 0; leftover 2 to the largest remainders: c (.8), then a/b tie -> a
    assert largest_remainder_counts({"a": 0.7, "b": 0.2, "c": 0.1}, 8) == {"a": 6, "b": 1, "c": 1}
    c = largest_remainder_counts({"x": 1, "y": 1, "z": 1}, 100)
    assert sum(c.values()) == 100 and sorted(c.values()) == [33, 33, 34]
    # weights are normalised; dict order does not matter
    swapped = largest_remainder_counts({"b": 2, "a": 6}, 4)
    assert swapped == largest_remainder_counts({"a": 6, "b": 2}, 4) == {"a": 3, "b": 1}
    assert largest_remainder_counts({"a": 1.0, "b": 0.0}, 16) == {"a": 16, "b": 0}


@pytest.mark.parametrize("weights", [{}, {"a": 0.0}, {"a": -1.0, "b": 2.0}, {"a": float("nan")}])
def test_bad_weights_raise(weights):
    with pytest.raises(ValueError):
        largest_remainder_counts(weights, 10)


def test_block_too_small_for_a_weight_raises():
    with pytest.raises(ValueError, match="block_size 8 is too small"):
        BlockMixture.from_weights({"a": 0.99, "b": 0.01}, 8, seed=0)


def test_every_block_holds_exact_counts():
    mix = BlockMixture.from_weights({"web": 0.5, "code": 0.3, "books": 0.2}, 100, seed=1)
    src, draw = mix.assign(np.arange(100 * 7))
    for b in range(7):
        blk = src[b * 100 : (b + 1) * 100]
        assert np.bincount(blk, minlength=3).tolist() == [mix.counts[n] for n in mix.names]
    # draw numbers of each source are exactly 0..(blocks*count - 1), each once: no repeats, no gaps
    for s, name in enumerate(mix.names):
        assert np.array_equal(np.sort(draw[src == s]), np.arange(7 * mix.counts[name]))


def test_proportions_over_1000_draws_within_005():
    weights = {"a": 0.55, "b": 0.3, "c": 0.15}
    mix = BlockMixture.from_weights(weights, 128, seed=3)
    src, _ = mix.assign(np.arange(1000))
    for s, name in enumerate(mix.names):
        assert abs((src == s).mean() - weights[name]) < 0.05
    # also for an arbitrary window of 1000 draws, not just from 0
    src, _ = mix.assign(np.arange(123_456, 124_456))
    for s, name in enumerate(mix.names):
        assert abs((src == s).mean() - weights[name]) < 0.05


def test_block_order_stable_per_block_and_different_across_blocks():
    mix = BlockMixture.from_weights({"a": 0.5, "b": 0.25, "c": 0.25}, 64, seed=9)
    src, _ = mix.assign(np.arange(64 * 20))
    blocks = src.reshape(20, 64)
    # same block computed alone, out of order, or with a fresh object: identical
    again = BlockMixture.from_weights({"c": 0.25, "b": 0.25, "a": 0.5}, 64, seed=9)
    src5, _ = again.assign(np.arange(5 * 64, 6 * 64))
    assert np.array_equal(src5, blocks[5])
    part, _ = mix.assign(np.array([6 * 64 + 3, 2 * 64 + 7]))
    assert part.tolist() == [blocks[6, 3], blocks[2, 7]]
    # orders differ between blocks
    assert len({tuple(b) for b in blocks}) == 20
    # and with the seed
    other, _ = BlockMixture.from_weights({"a": 0.5, "b": 0.25, "c": 0.25}, 64, seed=10).assign(np.arange(64))
    assert not np.array_equal(other, blocks[0])


def test_negative_sequence_index_raises():
    mix = BlockMixture.from_weights({"a": 1.0}, 4, seed=0)
    with pytest.raises(IndexError):
        mix.assign(np.array([-1]))
