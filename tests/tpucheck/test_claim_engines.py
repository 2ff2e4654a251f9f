"""claim_engines: the engines tpu-check --claims compiles for a claim are the ones its
experiment's own ``engines`` function gives, and the ones its ``run`` really builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest

from claimbench.engine.config import DEFAULT_PAGE_SIZE, ModelOptions
from claimbench.engine.kv.kv_cache import num_pages_for_pool, pool_bytes, resolve_kv_dtype
from claimbench.harness.claims import Claim, find_claim, load_claims
from claimbench.harness.context import merge_params
from claimbench.harness.registry import load_experiment
from claimbench.lab.engines.engine_settings import ENGINES_FUNCTION
from claimbench.models.checkpoint import default_model_path, read_config
from claimbench.tpucheck.claim_engines import claim_engines, claim_params
from claimbench.tpucompile import check as tpu_check

ROOT = Path(__file__).resolve().parents[2]
WITH_ENGINES = {
    "kv_int8",
    "kv_fp8",
    "fp8_weights",
    "levers_multiply",
    "bf16_not_fp16",
    "tp_refutation",
    "continuous_batching",
    "spec_decode_gain",
    "spec_vs_batching",
    "moe_disqualified",
    "paged_waste",
    "kv_dominates",
    "decode_bandwidth_bound",
}


def test_each_claims_engines_are_its_experiments_own() -> None:
    _, qwen = tpu_check.resolve_model("qwen2.5-7b-instruct")
    seen = set()
    for claim in load_claims(ROOT):
        engines = getattr(load_experiment(ROOT, claim), ENGINES_FUNCTION, None)
        if engines is None:
            continue
        seen.add(claim.module_name)
        for profile in ("quick", "full"):
            params = claim_params(ROOT, claim, profile)
            base = params["engine"]
            for model in (None, qwen):
                own = engines(params, model, base.get("dtype", ModelOptions.dtype))
                checked = claim_engines(ROOT, claim, profile, model)
                assert [e.setting for e in checked] == list(own.settings), claim.id
                assert [e.options for e in checked] == [base | o for o in own.settings.values()]
                assert {e.model for e in checked} <= {own.own_model}
                groups = [e.group for e in checked]
                expected = list(range(len(groups))) if own.one_at_a_time else [0] * len(groups)
                assert groups == expected, claim.id
    assert seen == WITH_ENGINES


class _Built(Exception):
    """Raised by BuildOnlyContext.engine: the experiment got as far as building an engine."""


class BuildOnlyContext:
    """A RunContext stand-in for the experiments that size a pool: it records the options of
    the first engine a ``run`` builds (as RunContext.engine merges them) and stops the run."""

    def __init__(self, claim: Claim, params: dict[str, Any]) -> None:
        self.claim_id = claim.id
        self.params = params
        self.model_path = default_model_path()
        self.dtype = ModelOptions.dtype
        self.built: dict[str, Any] = {}

    def merged(self, defaults: dict[str, Any]) -> dict[str, Any]:
        return merge_params(defaults, self.params, f"claim {self.claim_id!r}")

    def record_analytic(self, *args: Any, **kwargs: Any) -> None:
        """The analytic side is not what this context checks."""

    def engine(self, *, precompile: bool = False, compile_cache: bool = False, **overrides: Any):
        self.built = {"dtype": self.dtype} | self.params.get("engine", {}) | overrides
        raise _Built


def built_and_checked(claim_id: str, engine: dict[str, Any]) -> tuple[dict, dict]:
    """(the options the experiment's run builds its engine with, the ones tpu-check compiles)
    for the claim's quick profile with ``engine`` over its engine params, on the shipped model."""
    claim = find_claim(load_claims(ROOT), claim_id)
    params = claim.profile_params("quick")
    params = params | {"engine": params.get("engine", {}) | engine}
    claim = claim.model_copy(update={"params": {"quick": params}})
    ctx = BuildOnlyContext(claim, params)
    with pytest.raises(_Built):
        load_experiment(ROOT, claim).run(ctx)
    (checked,) = claim_engines(ROOT, claim, "quick", read_config(ctx.model_path))
    return ctx.built, checked.options


@pytest.mark.parametrize("kv_dtype", ["bf16", "int8", "fp8"])
def test_paged_waste_pool_is_the_one_tpu_check_compiles_in_every_kv_format(kv_dtype: str) -> None:
    built, checked = built_and_checked("paged-waste", {"kv_dtype": kv_dtype})
    assert built["kv_pool_bytes"] == checked["kv_pool_bytes"]
    assert {k: built[k] for k in checked} == checked
    # The pool holds exactly pool_tokens slots and the null page: int8's padded scale rows and
    # fp8's per-layer scales are paid on top (a pool of pages * page bytes held fewer).
    params = find_claim(load_claims(ROOT), "paged-waste").profile_params("quick")
    cfg = read_config(default_model_path())
    storage = resolve_kv_dtype(kv_dtype, ModelOptions.dtype)
    pages = num_pages_for_pool(cfg, storage, params["page_size"], built["kv_pool_bytes"])
    assert pages == params["pool_tokens"] // params["page_size"] + 1


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_decode_bandwidth_bound_pool_is_the_one_tpu_check_compiles(kv_dtype: str) -> None:
    built, checked = built_and_checked("decode-bandwidth-bound", {"kv_dtype": kv_dtype})
    assert {k: built[k] for k in checked} == checked
    params = find_claim(load_claims(ROOT), "decode-bandwidth-bound").profile_params("quick")
    per_seq = -(-(params["prompt_len"] + params["output_len"]) // DEFAULT_PAGE_SIZE)
    storage = resolve_kv_dtype(kv_dtype, params["engine"]["dtype"])
    cfg = read_config(default_model_path())
    expected = pool_bytes(cfg, storage, DEFAULT_PAGE_SIZE, 1 + max(params["batches"]) * per_seq)
    assert built["kv_pool_bytes"] == expected


def test_kv_dominates_pool_is_the_one_tpu_check_compiles() -> None:
    built, checked = built_and_checked("kv-dominates", {"page_size": 8})
    assert {k: built[k] for k in checked} == checked
    cfg = read_config(default_model_path())
    per_seq = -(-4096 // 8)  # the default context in 8-token pages
    assert built["kv_pool_bytes"] == pool_bytes(cfg, jnp.bfloat16, 8, 1 + 32 * per_seq)
