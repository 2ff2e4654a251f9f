"""A device of known physics: every step takes its roofline time on a stated bandwidth and peak.

An experiment whose condition is about a chip's physics (decode bound by memory bandwidth,
say) can only come out on the side the host's physics puts it: a CPU at tiny size is neither
an HBM chip nor a roofline. To show its instrument reads either side, the experiment runs its
engine on this device (slow_device.py with a step-time law): each step is ready no sooner than
max(bytes / ``bytes_per_s``, FLOPs / ``flops_per_s``) after it could start, where bytes and
FLOPs are those of the work the step is actually given: every weight once, every sequence's
cached K/V read and its new K/V written, and the matmuls over the step's padded token bucket
(hardware/decode_roofline.py's accounting, per step). With the law well above the host's own
work per step, a memory-bound workload reads its byte roofline and a step padded past the
ridge point reads its compute roofline, whatever host it runs on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from claimbench.engine.worker.batch import StepInputs
    from claimbench.hardware.model_presets import ModelShape


@dataclass(frozen=True)
class RooflineDevice:
    """A device's memory bandwidth and peak compute."""

    bytes_per_s: float
    flops_per_s: float

    @classmethod
    def from_param(cls, value: Any) -> RooflineDevice | None:
        """The device a ``device`` param names ({} or None: the real device, None); a
        ValueError naming the problem otherwise."""
        if value is None or value == {}:
            return None
        if not isinstance(value, dict) or set(value) != {"bytes_per_s", "flops_per_s"}:
            raise ValueError(
                "param device must be {} (the real device) or {bytes_per_s: ..., "
                f"flops_per_s: ...}}, got {value!r}"
            )
        for key, number in value.items():
            if isinstance(number, bool) or not isinstance(number, int | float):
                raise ValueError(f"param device.{key} must be a number, got {number!r}")
            if not (math.isfinite(number) and number > 0):
                raise ValueError(f"param device.{key} must be finite and > 0, got {number!r}")
        return cls(float(value["bytes_per_s"]), float(value["flops_per_s"]))


def step_law(
    device: RooflineDevice,
    model: ModelShape,
    weight_bytes_per_param: int,
    kv_bytes: int,
    *,
    shards: int = 1,
) -> Callable[[StepInputs], float]:
    """The seconds each step takes on ``device`` serving ``model`` (weights and K/V stored
    in the given bytes per parameter and per element). ``shards``: the step split evenly over
    that many such devices joined by an ideal interconnect (tensor parallelism with no
    all-reduce cost), so each moves and computes its share."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    weights = float(model.num_params * weight_bytes_per_param)
    kv_token = float(model.kv_elements_per_token * kv_bytes)
    q_dims = model.num_heads * model.head_dim * model.num_layers

    def seconds(inputs: StepInputs) -> float:
        md = inputs.md
        kv_lens = np.asarray(md.kv_lens, dtype=np.float64)
        q_lens = np.diff(np.asarray(md.cu_q_lens, dtype=np.float64))
        new_tokens = float(q_lens.sum())
        moved = weights + float(kv_lens.sum()) * kv_token + new_tokens * kv_token
        # The matmuls run over the padded bucket; attention over each query's cached keys.
        flops = len(inputs.token_ids) * 2.0 * model.num_active_params
        flops += 4.0 * q_dims * float((q_lens * kv_lens).sum())
        return max(moved / device.bytes_per_s, flops / device.flops_per_s) / shards

    return seconds
