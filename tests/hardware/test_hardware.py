"""Spec table, device-kind mapping, pricing and platform detection."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from claimbench.hardware.chips import (
    CHIPS,
    PRICE_ENV_VAR,
    chip_for_device,
    detect,
    get_chip,
    price_per_hour,
)


def _devices(platform: str, kind: str, n: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(platform=platform, device_kind=kind) for _ in range(n)]


@pytest.fixture(autouse=True)
def _no_price_override(monkeypatch):
    monkeypatch.delenv(PRICE_ENV_VAR, raising=False)


def test_table_has_every_required_chip():
    assert set(CHIPS) == {"v5e", "v6e", "v5p", "v7", "h100", "h200"}
    for name, spec in CHIPS.items():
        assert spec.name == name
        # Decode roofline sanity: FLOPs per byte of HBM between 100 and 700 for all of these.
        assert 100 < spec.bf16_flops_per_s / spec.hbm_bytes_per_s < 700, name


def test_published_values():
    v5e = CHIPS["v5e"]
    assert (v5e.bf16_flops_per_s, v5e.hbm_bytes_per_s, v5e.hbm_bytes) == (197e12, 819e9, 16e9)
    assert v5e.price_per_chip_hour == 1.20
    assert CHIPS["v7"].fp8_flops_per_s == 2 * CHIPS["v7"].bf16_flops_per_s
    assert CHIPS["v7"].devices_per_chip == 2
    # H100 and H200 share the Hopper compute; H200 has more, faster memory.
    assert CHIPS["h100"].bf16_flops_per_s == CHIPS["h200"].bf16_flops_per_s
    assert CHIPS["h200"].hbm_bytes_per_s > CHIPS["h100"].hbm_bytes_per_s


def test_peak_for_missing_dtype_raises():
    assert CHIPS["v5e"].peak_flops_per_s("int8") == 393e12
    with pytest.raises(ValueError, match="no published fp8 peak"):
        CHIPS["v5e"].peak_flops_per_s("fp8")
    with pytest.raises(ValueError, match="'fp4' is not one of"):
        CHIPS["v5e"].peak_flops_per_s("fp4")


def test_get_chip_unknown():
    with pytest.raises(ValueError, match="unknown chip 'v4'"):
        get_chip("v4")


@pytest.mark.parametrize(
    ("platform", "kind", "chip"),
    [
        ("tpu", "TPU v5 lite", "v5e"),
        ("tpu", "TPU v6 lite", "v6e"),
        ("tpu", "TPU v5", "v5p"),
        ("tpu", "TPU v5p", "v5p"),
        ("tpu", "TPU7x", "v7"),
        ("tpu", "TPU v4", None),
        ("gpu", "NVIDIA H100 80GB HBM3", "h100"),
        ("gpu", "NVIDIA H200", "h200"),
        ("cuda", "NVIDIA H200", "h200"),
        ("gpu", "NVIDIA H100 PCIe", None),
        ("gpu", "NVIDIA H200 NVL", None),
        ("gpu", "NVIDIA A100-SXM4-80GB", None),
        ("cpu", "cpu", None),
    ],
)
def test_chip_for_device(platform, kind, chip):
    assert chip_for_device(platform, kind) == chip


def test_detect_tpu_slice_prices_all_chips():
    info = detect(_devices("tpu", "TPU v5 lite", 8))
    assert info["chip"] == "v5e"
    assert info["device_count"] == info["num_chips"] == 8
    assert info["price_per_hour"] == pytest.approx(8 * 1.20)


def test_detect_ironwood_counts_two_devices_per_chip():
    info = detect(_devices("tpu", "TPU7x", 8))
    assert (info["device_count"], info["num_chips"], info["price_per_hour"]) == (8, 4, None)


def test_detect_running_platform():
    info = detect()
    assert info["platform"] == "cpu"
    assert info["chip"] is None
    assert info["price_per_hour"] is None
    assert info["device_count"] >= 1
    assert info["host_cpu_count"] >= 1
    for key in ("jax_version", "jaxlib_version", "flax_version"):
        assert isinstance(info[key], str) and info[key][0].isdigit(), key


def test_price_override(monkeypatch):
    monkeypatch.setenv(PRICE_ENV_VAR, "84.5")
    assert price_per_hour("h200", 8) == 84.5
    assert detect(_devices("gpu", "NVIDIA H200", 8))["price_per_hour"] == 84.5
    # CPU runs cost nothing against the accelerator budget, override or not.
    assert detect(_devices("cpu", "cpu", 1))["price_per_hour"] is None
    monkeypatch.setenv(PRICE_ENV_VAR, "cheap")
    with pytest.raises(ValueError, match="not a number"):
        price_per_hour("h200", 8)


def test_price_unpriced_chips():
    assert price_per_hour(None, 1) is None
    assert price_per_hour("h100", 8) is None
    assert price_per_hour("v6e", 4) == pytest.approx(4 * 2.70)
