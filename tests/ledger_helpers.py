"""Ledger rows and a project with budget settings (shared by ledger, budget and ops tests)."""

from __future__ import annotations

from pathlib import Path

from claimbench.ledger.prices import TPU_PRICING_URL


def row(run_id: str, claim_id: str = "kv-int8", **fields) -> dict:
    """A ledger row with neutral defaults: one v6e, 100 s, 3 trials."""
    base = {
        "run_id": run_id,
        "claim_id": claim_id,
        "profile": "full",
        "trials": 3,
        "start": "2026-11-30T01:00:00+00:00",
        "hardware_class": "tpu",
        "chip": "v6e",
        "num_chips": 1,
        "device_s": 100.0,
        "usd_per_chip_hour": 2.70,
        "price_source": TPU_PRICING_URL,
        "price_as_of": "2026-11-29",
        "usd": 0.075,
        "prompt_tokens": 0,
        "output_tokens": 0,
        "source": "run",
        "recorded_at": "2026-11-30T01:05:00+00:00",
    }
    return base | fields


V6E = {
    "platform": "tpu",
    "device_kind": "TPU v6 lite",
    "device_count": 1,
    "chip": "v6e",
    "num_chips": 1,
    "price_per_hour": 2.70,
}
# fake-pass's full profile runs 4 trials; 7200 declared seconds -> 2 h of a v6e = $5.40.
SETTINGS = "budget:\n  usd: 100\n  estimate_device_s: {full: {default: 7200}}\nclaims:\n"


def with_settings(project: Path) -> Path:
    path = project / "claims.yaml"
    path.write_text(SETTINGS + path.read_text())
    return project
