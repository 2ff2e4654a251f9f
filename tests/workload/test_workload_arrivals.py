import numpy as np
import pytest

from claimbench.workload.arrivals import arrival_times


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    ("kind", "burstiness", "tolerance"),
    # Std of the mean gap over n gaps is CV / sqrt(n): 1/sqrt(20000) = 0.7% for poisson,
    # 2/sqrt(20000) = 1.4% for burstiness 0.25, so these are >= 3.5 sigma.
    [("poisson", 1.0, 0.03), ("gamma", 0.25, 0.05), ("gamma", 4.0, 0.02), ("constant", 1.0, 1e-9)],
)
def test_mean_rate_over_many_arrivals(kind, burstiness, tolerance):
    rate = 50.0
    times = arrival_times(kind, rate, _rng(), burstiness=burstiness, num_requests=20_000)
    mean_gap = np.diff(times).mean()
    assert abs(1 / mean_gap - rate) / rate < tolerance
    assert np.all(np.diff(times) >= 0)


@pytest.mark.parametrize(
    ("kind", "burstiness"), [("poisson", 1.0), ("gamma", 0.5), ("constant", 1.0)]
)
def test_duration_bound_gives_rate_times_duration(kind, burstiness):
    rate, duration_s = 100.0, 200.0
    times = arrival_times(kind, rate, _rng(1), burstiness=burstiness, duration_s=duration_s)
    assert times.max() < duration_s
    # Expected 20,000 arrivals; sd sqrt(20000 * CV^2) <= 200 for CV <= sqrt(2).
    assert abs(len(times) - rate * duration_s) < 800


def test_constant_arrivals_are_evenly_spaced_from_zero():
    times = arrival_times("constant", 4.0, _rng(), duration_s=1.0)
    # k / 4 for k = 0..3: 1.0 itself is outside [0, 1).
    np.testing.assert_allclose(times, [0.0, 0.25, 0.5, 0.75])


def test_burstiness_sets_coefficient_of_variation():
    def cv(burstiness: float) -> float:
        gaps = np.diff(
            arrival_times("gamma", 10.0, _rng(2), burstiness=burstiness, num_requests=20_000)
        )
        return gaps.std() / gaps.mean()

    # Gamma(k, .) has CV 1 / sqrt(k): 2.0, 1.0, 0.5.
    cvs = [cv(0.25), cv(1.0), cv(4.0)]
    assert cvs[0] > cvs[1] > cvs[2]
    np.testing.assert_allclose(cvs, [2.0, 1.0, 0.5], rtol=0.1)
    constant = np.diff(arrival_times("constant", 10.0, _rng(), num_requests=100))
    assert constant.std() < 1e-12


def test_poisson_is_gamma_with_burstiness_one():
    poisson = arrival_times("poisson", 3.0, _rng(5), num_requests=500)
    gamma = arrival_times("gamma", 3.0, _rng(5), burstiness=1.0, num_requests=500)
    np.testing.assert_array_equal(poisson, gamma)


def test_same_seed_same_arrivals_and_bounds_only_truncate():
    a = arrival_times("gamma", 7.0, _rng(9), burstiness=0.3, num_requests=300)
    b = arrival_times("gamma", 7.0, _rng(9), burstiness=0.3, num_requests=300)
    np.testing.assert_array_equal(a, b)
    by_duration = arrival_times("gamma", 7.0, _rng(9), burstiness=0.3, duration_s=20.0)
    n = min(len(a), len(by_duration))
    assert n > 100
    np.testing.assert_array_equal(a[:n], by_duration[:n])
    both = arrival_times("gamma", 7.0, _rng(9), burstiness=0.3, num_requests=50, duration_s=20.0)
    np.testing.assert_array_equal(both, a[:50])


def test_arrivals_scale_inversely_with_rate():
    slow = arrival_times("poisson", 2.0, _rng(4), num_requests=100)
    fast = arrival_times("poisson", 4.0, _rng(4), num_requests=100)
    np.testing.assert_allclose(fast, slow / 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "uniform"}, "arrival kind"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("inf")}, "rate"),
        ({"burstiness": -1.0, "kind": "gamma"}, "burstiness"),
        ({"burstiness": 0.5, "kind": "poisson"}, "only to gamma"),
        ({"num_requests": None}, "num_requests or duration_s"),
        ({"num_requests": None, "duration_s": 1e9}, "more than"),
    ],
)
def test_invalid_arguments(kwargs, match):
    args = {"kind": "poisson", "rate": 1.0, "burstiness": 1.0, "num_requests": 10} | kwargs
    kind, rate = args.pop("kind"), args.pop("rate")
    with pytest.raises(ValueError, match=match):
        arrival_times(kind, rate, _rng(), **args)
