"""Token-length distributions for prompts and outputs.

Four small frozen dataclasses joined in the ``LengthDist`` union, each with
``sample(rng, n) -> i64[n]``, ``expected_len()`` and ``to_dict()``;
``length_dist_from_dict`` reads any of them back. Every sampled length is a
whole number of tokens >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, MISSING, dataclass, fields
from typing import ClassVar

import numpy as np

from claimbench.workload.validation import check_int, check_keys, check_positive


@dataclass(frozen=True)
class FixedLength:
    """Every request gets ``value`` tokens."""

    kind: ClassVar[str] = "fixed"
    value: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_int("FixedLength", "value", self.value, minimum=1))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """i64[n] lengths; consumes nothing from ``rng``."""
        return np.full(n, self.value, dtype=np.int64)

    def expected_len(self) -> float:
        return float(self.value)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class UniformLength:
    """Lengths drawn uniformly from the integers ``lo..hi`` (both inclusive)."""

    kind: ClassVar[str] = "uniform"
    lo: int
    hi: int

    def __post_init__(self) -> None:
        lo = check_int("UniformLength", "lo", self.lo, minimum=1)
        hi = check_int("UniformLength", "hi", self.hi, minimum=lo)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """i64[n] lengths in [lo, hi]."""
        return rng.integers(self.lo, self.hi + 1, size=n, dtype=np.int64)

    def expected_len(self) -> float:
        return (self.lo + self.hi) / 2

    def to_dict(self) -> dict:
        return {"kind": self.kind, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True, kw_only=True)
class LognormalLength:
    """exp(Normal(log median, sigma)) rounded to whole tokens and clipped to [lo, hi].

    Give exactly one of ``median`` and ``mean``; both describe the lognormal before
    clipping (mean = median * exp(sigma^2 / 2)). Request-length distributions of chat
    traffic are roughly lognormal: most requests short, a long tail of long ones.
    """

    kind: ClassVar[str] = "lognormal"
    sigma: float
    lo: int
    hi: int
    median: float | None = None
    mean: float | None = None

    def __post_init__(self) -> None:
        owner = "LognormalLength"
        object.__setattr__(self, "sigma", check_positive(owner, "sigma", self.sigma))
        lo = check_int(owner, "lo", self.lo, minimum=1)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", check_int(owner, "hi", self.hi, minimum=lo))
        if (self.median is None) == (self.mean is None):
            raise ValueError(
                f"{owner} needs exactly one of median and mean, got median={self.median!r}, "
                f"mean={self.mean!r}"
            )
        for name in ("median", "mean"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_positive(owner, name, value))

    @property
    def log_median(self) -> float:
        """mu of the underlying normal."""
        if self.median is not None:
            return math.log(self.median)
        return math.log(self.mean) - self.sigma**2 / 2

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """i64[n] lengths in [lo, hi]."""
        raw = rng.lognormal(self.log_median, self.sigma, size=n)
        return np.clip(np.rint(raw), self.lo, self.hi).astype(np.int64)

    def expected_len(self) -> float:
        """Mean of the clipped lognormal; ignores rounding, which moves it well under a token."""
        mu, sigma = self.log_median, self.sigma
        a, b = (math.log(self.lo) - mu) / sigma, (math.log(self.hi) - mu) / sigma
        # Lognormal: E[X; lo < X < hi] = exp(mu + sigma^2/2) (Phi(b - sigma) - Phi(a - sigma)).
        inside = math.exp(mu + sigma**2 / 2) * (_normal_cdf(b - sigma) - _normal_cdf(a - sigma))
        return self.lo * _normal_cdf(a) + inside + self.hi * (1 - _normal_cdf(b))

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "sigma": self.sigma, "lo": self.lo, "hi": self.hi}
        if self.median is not None:
            out["median"] = self.median
        else:
            out["mean"] = self.mean
        return out


@dataclass(frozen=True)
class EmpiricalLength:
    """Lengths resampled (with replacement) from observed ``values``, e.g. corpus document
    lengths, optionally clipped to [lo, hi]."""

    kind: ClassVar[str] = "empirical"
    values: tuple[int, ...]
    _: KW_ONLY
    lo: int | None = None
    hi: int | None = None

    def __post_init__(self) -> None:
        owner = "EmpiricalLength"
        if isinstance(self.values, str | bytes) or not isinstance(
            self.values, Sequence | np.ndarray
        ):
            raise ValueError(f"{owner}.values must be a sequence of lengths, got {self.values!r}")
        if len(self.values) == 0:
            raise ValueError(f"{owner}.values must not be empty")
        values = tuple(
            check_int(owner, f"values[{i}]", v, minimum=1) for i, v in enumerate(self.values)
        )
        object.__setattr__(self, "values", values)
        if self.lo is not None:
            object.__setattr__(self, "lo", check_int(owner, "lo", self.lo, minimum=1))
        if self.hi is not None:
            object.__setattr__(self, "hi", check_int(owner, "hi", self.hi, minimum=self.lo or 1))

    def _clipped(self) -> np.ndarray:
        return np.clip(np.asarray(self.values, dtype=np.int64), self.lo, self.hi)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """i64[n] lengths, each one of ``values`` clipped to [lo, hi]."""
        return rng.choice(self._clipped(), size=n)

    def expected_len(self) -> float:
        return float(self._clipped().mean())

    def to_dict(self) -> dict:
        return {"kind": self.kind, "values": list(self.values), "lo": self.lo, "hi": self.hi}


LengthDist = FixedLength | UniformLength | LognormalLength | EmpiricalLength

_BY_KIND: dict[str, type] = {
    cls.kind: cls for cls in (FixedLength, UniformLength, LognormalLength, EmpiricalLength)
}


def length_dist_from_dict(data: dict) -> LengthDist:
    """Inverse of ``to_dict`` for any ``LengthDist``; ValueError on an unknown kind or key."""
    if not isinstance(data, dict) or data.get("kind") not in _BY_KIND:
        kind = data.get("kind") if isinstance(data, dict) else data
        raise ValueError(
            f"length distribution kind must be one of {sorted(_BY_KIND)}, got {kind!r}"
        )
    cls = _BY_KIND[data["kind"]]
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING}
    check_keys(cls.__name__, data, names | {"kind"}, required)
    return cls(**{k: v for k, v in data.items() if k != "kind"})


def _normal_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))
