import numpy as np
import pytest

from claimbench.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LognormalLength,
    UniformLength,
    length_dist_from_dict,
)

BOUNDED = [
    (FixedLength(7), 7, 7),
    (UniformLength(3, 9), 3, 9),
    (LognormalLength(median=100, sigma=1.0, lo=20, hi=400), 20, 400),
    (LognormalLength(mean=50, sigma=0.8, lo=1, hi=10_000), 1, 10_000),
    (EmpiricalLength((5, 9, 9, 300, 41), lo=8, hi=200), 8, 200),
    (EmpiricalLength((5, 9, 300)), 5, 300),
]
DISTS = [dist for dist, _, _ in BOUNDED]


@pytest.mark.parametrize(("dist", "lo", "hi"), BOUNDED, ids=lambda d: getattr(d, "kind", ""))
def test_samples_respect_bounds_and_expected_len(dist, lo, hi):
    lengths = dist.sample(np.random.default_rng(0), 20_000)
    assert lengths.dtype == np.int64 and lengths.shape == (20_000,)
    assert lengths.min() >= lo and lengths.max() <= hi
    # expected_len is analytic for the lognormal (clipping included), so this checks it too.
    assert abs(lengths.mean() - dist.expected_len()) / dist.expected_len() < 0.03


def test_uniform_hits_both_ends():
    lengths = UniformLength(3, 5).sample(np.random.default_rng(0), 1000)
    assert set(lengths.tolist()) == {3, 4, 5}


def test_lognormal_median_and_mean_parameterisations():
    rng = np.random.default_rng(1)
    by_median = LognormalLength(median=200, sigma=0.5, lo=1, hi=100_000).sample(rng, 20_000)
    assert abs(np.median(by_median) - 200) < 6
    # Same distribution through its mean: median * exp(sigma^2 / 2).
    same = LognormalLength(mean=200 * np.exp(0.125), sigma=0.5, lo=1, hi=100_000)
    assert same.log_median == pytest.approx(np.log(200))


def test_lognormal_clipping_piles_mass_on_the_bounds():
    lengths = LognormalLength(median=100, sigma=2.0, lo=50, hi=150).sample(
        np.random.default_rng(2), 5000
    )
    assert (lengths == 50).mean() > 0.3 and (lengths == 150).mean() > 0.3


def test_empirical_draws_only_given_values():
    dist = EmpiricalLength([4, 16, 16, 64])
    lengths = dist.sample(np.random.default_rng(3), 2000)
    assert set(lengths.tolist()) == {4, 16, 64}
    assert (lengths == 16).mean() == pytest.approx(0.5, abs=0.05)
    assert dist.values == (4, 16, 16, 64)
    assert EmpiricalLength(np.array([3, 5])).values == (3, 5)


def test_same_generator_state_same_lengths():
    dist = DISTS[2]
    a = dist.sample(np.random.default_rng(11), 50)
    b = dist.sample(np.random.default_rng(11), 50)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.kind)
def test_dict_round_trip(dist):
    assert length_dist_from_dict(dist.to_dict()) == dist


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: FixedLength(0), r"FixedLength.value must be >= 1, got 0"),
        (lambda: FixedLength(2.5), r"FixedLength.value must be an integer, got 2.5"),
        (lambda: UniformLength(9, 3), r"UniformLength.hi must be >= 9, got 3"),
        (lambda: LognormalLength(sigma=1.0, lo=1, hi=9), "exactly one of median and mean"),
        (
            lambda: LognormalLength(median=5, mean=5, sigma=1.0, lo=1, hi=9),
            "exactly one of median and mean",
        ),
        (lambda: LognormalLength(median=5, sigma=0.0, lo=1, hi=9), r"sigma must be finite and > 0"),
        (lambda: EmpiricalLength(()), "must not be empty"),
        (lambda: EmpiricalLength((3, -1)), r"values\[1\] must be >= 1, got -1"),
        (lambda: EmpiricalLength((3,), lo=10, hi=5), r"hi must be >= 10, got 5"),
        (lambda: length_dist_from_dict({"kind": "zipf"}), "kind must be one of"),
        (lambda: length_dist_from_dict({"kind": "fixed", "value": 3, "x": 1}), "unknown key"),
        (lambda: length_dist_from_dict({"kind": "uniform", "lo": 3}), "missing key"),
    ],
)
def test_validation_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()
