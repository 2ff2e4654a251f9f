"""build_engine: everything an LLMEngine needs made before it can serve.

Loading the checkpoint and tokenizer, quantizing the weights to ``config.weights``,
calibrating the fp8 KV scales on held-out text, attaching early exit's heads and loading a
draft model are one-off preparation, not serving; they live here so ``LLMEngine`` is handed
ready parts and only serves them. So does switching on the persistent compilation cache: a
process-wide JAX setting, made once where the engine is built rather than inside any of its
parts.
"""

from __future__ import annotations

from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

from claimbench.engine.config import EngineConfig
from claimbench.engine.engine import LLMEngine
from claimbench.engine.kv.calibration import resolve_fp8_kv_scales
from claimbench.engine.kv.kv_cache import resolve_kv_dtype
from claimbench.engine.spec.draft_model import load_draft_model
from claimbench.kernels.kv_quant import FP8_DTYPE
from claimbench.models.checkpoint import default_model_path, load_model
from claimbench.models.early_exit import with_exit_heads
from claimbench.models.llama import LlamaForCausalLM
from claimbench.models.quantize import with_weight_format
from claimbench.models.tokenizer import Tokenizer


def use_compilation_cache(cache_dir: Path | str) -> None:
    """Switch this process's persistent JAX compilation cache on, in ``cache_dir``: every
    step compiled from now on is written there (whatever its compile time), and a later
    process with the same directory loads it instead of compiling. Process-wide and lasting:
    it is JAX's global config, which is why only ``build_engine`` calls it."""
    compilation_cache.set_cache_dir(str(cache_dir))
    # Cache every executable: the shipped model's steps compile in well under JAX's default
    # one-second threshold, and a cold start pays for all of them.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # The cache object is made once per process on first use; a new directory needs a new one.
    compilation_cache.reset_cache()


def build_engine(
    config: EngineConfig | None = None,
    *,
    model: LlamaForCausalLM | None = None,
    tokenizer: Tokenizer | None = None,
    draft_model: LlamaForCausalLM | None = None,
    unsharded: bool = False,
) -> LLMEngine:
    """An engine for ``config`` (default EngineConfig()).

    ``model`` (and ``tokenizer``) may be given already built; otherwise both are loaded from
    ``config.model_path`` (default: the shipped claimbench-tiny). The model is quantized to
    ``config.weights`` if it is not already; an fp8 cache gets its (k, v) scales, calibrated
    when ``config.kv_scale == "calibrate"``; an ``early_exit_threshold`` attaches the exit
    heads saved beside the model; ``config.speculative == "draft"`` loads the draft
    from ``config.draft_model_path`` unless ``draft_model`` is given. A
    ``config.compilation_cache_dir`` switches the persistent compilation cache on
    (``use_compilation_cache``). ``unsharded``: the runner places the model on one device
    with no mesh at all (the baseline benchmarks/tensor_parallel.py compares against; needs
    ``config.tp == 1``). ValueError for a model or draft that cannot serve ``config``.
    """
    config = config or EngineConfig()
    if config.compilation.compilation_cache_dir is not None:
        use_compilation_cache(config.compilation.compilation_cache_dir)
    if model is None:
        path = config.model.model_path or default_model_path()
        # Split over tp devices, the weights go from host memory to their shards.
        model, _ = load_model(path, config.model.dtype, host=config.parallel.tp > 1)
        tokenizer = tokenizer or Tokenizer.from_dir(path)
    model = with_weight_format(model, config.model.weights)
    if config.model.early_exit_threshold is not None:
        # The heads ride in the model's weight tree, saved beside the checkpoint.
        model = with_exit_heads(model, config.model.model_path or default_model_path())
    if config.scheduler.max_model_len > model.cfg.max_position_embeddings:
        raise ValueError(
            f"max_model_len={config.scheduler.max_model_len} exceeds the model's "
            f"max_position_embeddings={model.cfg.max_position_embeddings}"
        )
    fp8_kv_scales = None  # the engine reads a number from config.cache.kv_scale itself
    if (
        config.cache.kv_scale == "calibrate"
        and resolve_kv_dtype(config.cache.kv_dtype, model.dtype) == FP8_DTYPE
    ):
        fp8_kv_scales = resolve_fp8_kv_scales(
            config.cache.kv_scale, model, tokenizer, config.scheduler.max_model_len
        )
    if config.spec.speculative == "draft" and draft_model is None:
        draft_model = load_draft_model(
            config.spec.draft_model_path, config.model.dtype, model.cfg, tokenizer
        )
    return LLMEngine(
        config,
        model,
        tokenizer,
        draft_model=draft_model,
        fp8_kv_scales=fp8_kv_scales,
        unsharded=unsharded,
    )
