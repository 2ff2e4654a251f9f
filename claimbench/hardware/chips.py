"""The running platform, and the accelerator spec table the roofline model reads.

Every run records ``detect()`` so a measurement carries the hardware it came from, and the
results store prices a run with ``price_per_hour`` (the visible devices' on-demand $/hour).

Spec units are plain SI: bytes, bytes/s, FLOP/s (dense, no structured sparsity), USD/hour.
ICI bandwidth is per chip, BIDIRECTIONAL, summed over all of the chip's links: the form
Google's TPU system-architecture pages give it in, and the form NVIDIA gives NVLink in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

COMPUTE_DTYPES = ("bf16", "int8", "fp8")
PRICE_ENV_VAR = "CLAIMBENCH_PRICE_PER_HOUR"

_GB = 1e9
_GIB = 2**30
_TB = 1e12


@dataclass(frozen=True)
class ChipSpec:
    """One accelerator chip's published numbers (None where the vendor publishes none)."""

    name: str  # the table key: "v5e"
    label: str  # the vendor's name: "TPU v5e"
    hbm_bytes: float
    hbm_bytes_per_s: float
    bf16_flops_per_s: float
    int8_ops_per_s: float | None
    fp8_flops_per_s: float | None
    ici_bytes_per_s: float  # per chip, bidirectional, all links together
    price_per_chip_hour: float | None  # USD, on-demand
    devices_per_chip: int = 1  # JAX devices one chip shows up as

    def __post_init__(self) -> None:
        for field in ("hbm_bytes", "hbm_bytes_per_s", "bf16_flops_per_s", "ici_bytes_per_s"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{self.name}: {field} must be > 0, got {getattr(self, field)}")
        for field in ("int8_ops_per_s", "fp8_flops_per_s", "price_per_chip_hour"):
            value = getattr(self, field)
            if value is not None and value <= 0:
                raise ValueError(f"{self.name}: {field} must be > 0 or None, got {value}")
        if self.devices_per_chip < 1:
            raise ValueError(
                f"{self.name}: devices_per_chip must be >= 1, got {self.devices_per_chip}"
            )

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense matmul peak for operands of ``dtype`` ("bf16" | "int8" | "fp8")."""
        peaks = {
            "bf16": self.bf16_flops_per_s,
            "int8": self.int8_ops_per_s,
            "fp8": self.fp8_flops_per_s,
        }
        if dtype not in peaks:
            raise ValueError(f"compute dtype {dtype!r} is not one of {', '.join(COMPUTE_DTYPES)}")
        peak = peaks[dtype]
        if peak is None:
            raise ValueError(f"{self.label} has no published {dtype} peak; compute in bf16")
        return peak


CHIPS: dict[str, ChipSpec] = {
    # Google Cloud TPU docs, "TPU v5e" system architecture (docs.cloud.google.com/tpu/docs/v5e):
    # 197 TFLOP/s bf16, 393 TOP/s int8, 16 GB HBM2 at 819 GB/s, 400 GB/s bidirectional ICI per
    # chip (4 ports, 2D torus). No fp8 unit. The Scaling Book (ch. 2) uses the same 16 GB and
    # 8.1e11-8.2e11 B/s. Price: Cloud TPU pricing page, on-demand $1.20 per chip-hour.
    "v5e": ChipSpec(
        name="v5e",
        label="TPU v5e",
        hbm_bytes=16 * _GB,
        hbm_bytes_per_s=819 * _GB,
        bf16_flops_per_s=197e12,
        int8_ops_per_s=393e12,
        fp8_flops_per_s=None,
        ici_bytes_per_s=400 * _GB,
        price_per_chip_hour=1.20,
    ),
    # Google Cloud TPU docs, "TPU v6e" (Trillium) system architecture: 918 TFLOP/s bf16,
    # 1836 TOP/s int8, 32 GB HBM at 1638 GB/s, 800 GB/s bidirectional ICI per chip (4 ports).
    # The TPU7x page lists v6e fp8 at 918 TFLOP/s: fp8 runs at the bf16 rate.
    # Price: Cloud TPU pricing page, on-demand $2.70 per chip-hour.
    "v6e": ChipSpec(
        name="v6e",
        label="TPU v6e (Trillium)",
        hbm_bytes=32 * _GB,
        hbm_bytes_per_s=1638 * _GB,
        bf16_flops_per_s=918e12,
        int8_ops_per_s=1836e12,
        fp8_flops_per_s=918e12,
        ici_bytes_per_s=800 * _GB,
        price_per_chip_hour=2.70,
    ),
    # Google Cloud TPU docs, "TPU v5p" system architecture: 459 TFLOP/s bf16 (fp8 also 459:
    # the bf16 rate), 95 GiB HBM2e at 2765 GB/s, 1200 GB/s bidirectional ICI per chip (3D
    # torus). int8 918 TOP/s from the Scaling Book's chip table (ch. 2). Two TensorCores
    # presented as one JAX device (megacore). Price: Cloud TPU pricing, $4.20 per chip-hour.
    "v5p": ChipSpec(
        name="v5p",
        label="TPU v5p",
        hbm_bytes=95 * _GIB,
        hbm_bytes_per_s=2765 * _GB,
        bf16_flops_per_s=459e12,
        int8_ops_per_s=918e12,
        fp8_flops_per_s=459e12,
        ici_bytes_per_s=1200 * _GB,
        price_per_chip_hour=4.20,
    ),
    # Google Cloud TPU docs, "TPU7x (Ironwood)" system architecture: 2307 TFLOP/s bf16,
    # 4614 TFLOP/s fp8, 192 GiB HBM at 7380 GB/s, 1200 GB/s bidirectional ICI per chip.
    # No int8 peak published. Two chiplets per chip, each its own JAX device ("TPU7x").
    # No on-demand price published (access through a Google Cloud account team).
    "v7": ChipSpec(
        name="v7",
        label="TPU7x (Ironwood)",
        hbm_bytes=192 * _GIB,
        hbm_bytes_per_s=7380 * _GB,
        bf16_flops_per_s=2307e12,
        int8_ops_per_s=None,
        fp8_flops_per_s=4614e12,
        ici_bytes_per_s=1200 * _GB,
        price_per_chip_hour=None,
        devices_per_chip=2,
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: 80 GB HBM3 at 3.35 TB/s; bf16 1979, fp8 and
    # int8 3958 TFLOP/s "with sparsity", so half that dense; NVLink 900 GB/s (bidirectional).
    # Clouds price H100s per 8-GPU machine type with host CPU, memory and disk bundled, so no
    # per-GPU price is entered; set CLAIMBENCH_PRICE_PER_HOUR for such a machine.
    "h100": ChipSpec(
        name="h100",
        label="NVIDIA H100 SXM",
        hbm_bytes=80 * _GB,
        hbm_bytes_per_s=3.35 * _TB,
        bf16_flops_per_s=989.5e12,
        int8_ops_per_s=1979e12,
        fp8_flops_per_s=1979e12,
        ici_bytes_per_s=900 * _GB,
        price_per_chip_hour=None,
    ),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: 141 GB HBM3e at 4.8 TB/s; the same Hopper
    # compute as H100 SXM (dense = half the "with sparsity" figures); NVLink 900 GB/s.
    # No per-GPU price, as for h100.
    "h200": ChipSpec(
        name="h200",
        label="NVIDIA H200 SXM",
        hbm_bytes=141 * _GB,
        hbm_bytes_per_s=4.8 * _TB,
        bf16_flops_per_s=989.5e12,
        int8_ops_per_s=1979e12,
        fp8_flops_per_s=1979e12,
        ici_bytes_per_s=900 * _GB,
        price_per_chip_hour=None,
    ),
}

# jax Device.device_kind strings, as jax's own TPU tables spell them
# (jax/_src/pallas/mosaic/tpu_info.py: chip_version_from_device_kind).
_TPU_KINDS = {
    "TPU v5 lite": "v5e",
    "TPU v5e": "v5e",
    "TPU v6 lite": "v6e",
    "TPU v6e": "v6e",
    "TPU v5": "v5p",
    "TPU v5p": "v5p",
    "TPU7x": "v7",
}


def get_chip(name: str) -> ChipSpec:
    """The spec for table key ``name``; ValueError naming the known keys otherwise."""
    if name not in CHIPS:
        raise ValueError(f"unknown chip {name!r}; expected one of {', '.join(CHIPS)}")
    return CHIPS[name]


def chip_for_device(platform: str, device_kind: str) -> str | None:
    """The spec-table key for a JAX device, or None when the table has no such chip.

    GPUs match only the SXM parts the table describes: PCIe and NVL boards have other
    clocks and memory, so they map to None rather than to wrong numbers.
    """
    if platform == "tpu":
        return _TPU_KINDS.get(device_kind)
    if platform in ("gpu", "cuda"):  # some JAX versions name NVIDIA devices by runtime
        kind = device_kind.upper()
        if "PCIE" in kind or "NVL" in kind:
            return None
        for name in ("h200", "h100"):
            if name.upper() in kind:
                return name
    return None


def price_per_hour(chip: str | None, num_chips: int) -> float | None:
    """On-demand USD/hour for ``num_chips`` chips, or None when unpriced (CPU, unknown chip).

    The environment variable CLAIMBENCH_PRICE_PER_HOUR, when set, is the whole machine's
    price and overrides the table (for machines billed per machine type, not per chip).
    """
    override = os.environ.get(PRICE_ENV_VAR)
    if override:
        try:
            price = float(override)
        except ValueError:
            raise ValueError(f"{PRICE_ENV_VAR}={override!r} is not a number") from None
        if price < 0:
            raise ValueError(f"{PRICE_ENV_VAR}={override!r} must be >= 0")
        return price
    if chip is None:
        return None
    per_chip = get_chip(chip).price_per_chip_hour
    return None if per_chip is None else per_chip * num_chips


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def detect(devices: Sequence[Any] | None = None) -> dict[str, Any]:
    """Describe the platform JAX runs on: a flat dict of plain values, JSON- and Parquet-ready.

    ``devices`` defaults to ``jax.devices()``; each needs ``platform`` and ``device_kind``.
    Keys: platform ("cpu" | "tpu" | "gpu"), device_kind, device_count, chip (spec key or None),
    num_chips, price_per_hour (USD for all visible chips, None when unpriced), host_cpu_count,
    jax_version, jaxlib_version, flax_version.
    """
    if devices is None:
        import jax  # imported here: the spec table and roofline need no JAX backend

        devices = jax.devices()
    if not devices:
        raise ValueError("no JAX devices visible")
    first = devices[0]
    chip = chip_for_device(first.platform, first.device_kind)
    per_chip = get_chip(chip).devices_per_chip if chip else 1
    num_chips = max(1, len(devices) // per_chip)
    return {
        "platform": first.platform,
        "device_kind": first.device_kind,
        "device_count": len(devices),
        "chip": chip,
        "num_chips": num_chips,
        "price_per_hour": price_per_hour(chip, num_chips) if first.platform != "cpu" else None,
        "host_cpu_count": os.cpu_count(),
        "jax_version": _version("jax"),
        "jaxlib_version": _version("jaxlib"),
        "flax_version": _version("flax"),
    }
