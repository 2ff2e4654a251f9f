"""The engine options `serve` and `bench` share, made from EngineConfig's sections.

Each option is named as its EngineConfig option (KNOBS) and defaults to that option's
default in its section (ENGINE_DEFAULTS), so a default lives in one place
(engine/config.py); the choices of the enum-valued options are the config's own tuples.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from claimbench.engine.config import KV_DTYPES, SCHEDULING_POLICIES, WEIGHT_FORMATS, EngineConfig

# Every EngineConfig option's default by its flat name (KNOBS order), read from the sections.
ENGINE_DEFAULTS: dict[str, Any] = EngineConfig().flat()

# KV cache storage (engine.config.KV_DTYPES); auto = the model dtype.
KVDtype = StrEnum("KVDtype", [(value, value) for value in KV_DTYPES])
# Weight-only quantization (engine.config.WEIGHT_FORMATS); bf16 = none.
WeightFormat = StrEnum("WeightFormat", [(value, value) for value in WEIGHT_FORMATS])

KV_POOL_MB = ENGINE_DEFAULTS["kv_pool_bytes"] / 2**20  # --kv-pool-mb's default
DEFAULT_KV_DTYPE = KVDtype(ENGINE_DEFAULTS["kv_dtype"])
DEFAULT_WEIGHTS = WeightFormat(ENGINE_DEFAULTS["weights"])
DEFAULT_KV_SCALE = str(ENGINE_DEFAULTS["kv_scale"])  # a number or "calibrate", as typed
MaxModelLenOption = Annotated[int, typer.Option(help="Prompt + output tokens at most.")]
MaxNumSeqsOption = Annotated[int, typer.Option(help="Sequences in flight at most.")]
MaxNumBatchedTokensOption = Annotated[int, typer.Option(help="Token budget per step.")]
KVPoolMBOption = Annotated[float, typer.Option(help="KV cache pool in MiB.")]
BatchInvariantOption = Annotated[
    bool,
    typer.Option(help="Batch-invariant kernels: a request's bits ignore its batch (CPU)."),
]
SchedulingPolicyOption = Annotated[str, typer.Option(help=" | ".join(SCHEDULING_POLICIES) + ".")]
