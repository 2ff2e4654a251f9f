"""The machine a run is on, as meta.json records it: the platform's evidence class, its price
and the attention backend an engine gets by default here."""

from __future__ import annotations

from typing import Any

from claimbench.hardware.host import cpu_model

# JAX names GPUs by their runtime on some versions; all of them are evidence class "gpu".
_PLATFORM_CLASS = {"cpu": "cpu", "tpu": "tpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}


def evidence_class(platform_name: str) -> str:
    """The hardware class (cpu | gpu | tpu) of a JAX platform name; ValueError if unknown."""
    try:
        return _PLATFORM_CLASS[platform_name.lower()]
    except KeyError:
        raise ValueError(f"unknown platform {platform_name!r}") from None


def detect_hardware() -> dict[str, Any]:
    """chips.detect() with platform as an evidence class and price_per_hour a number,
    plus the attention backend an engine gets by default here.

    price_per_hour is USD per hour for the whole visible machine; 0 where unpriced (a CPU).
    """
    from claimbench.hardware.chips import detect  # imports JAX: only when a run starts
    from claimbench.kernels.backend import resolve_backend_name

    info = dict(detect())
    info["platform"] = evidence_class(str(info["platform"]))
    info["price_per_hour"] = float(info.get("price_per_hour") or 0.0)
    # What "auto" attends with here (pallas, cpu = native kernels, or xla).
    info["attention_backend"] = resolve_backend_name("auto")
    info["cpu_model"] = cpu_model()
    return info
