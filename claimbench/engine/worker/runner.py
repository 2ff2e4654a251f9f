"""The device side: KV cache, the jitted step, compiling every bucket ahead of serving.

One pure function, step(weights, kv_caches, inputs) -> (StepOutput, kv_caches), runs the
model over the flattened batch, samples one token per sequence slot (or, verifying draft
tokens, 1 + k candidates and how many of them are accepted: acceptance.py) and returns the
updated cache, which is donated so XLA updates it in place. It is jitted once at module
level with the model's graph as a static argument, so engines over models of the same
shape share executables. A variant that also returns prompt log-probs for every
position compiles the first time a request asks for them (or ahead, on request).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache, partial

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from claimbench.engine.config import EngineConfig
from claimbench.engine.kv.kv_cache import (
    allocate_kv_cache,
    kv_bytes_per_token,
    num_pages_for_pool,
    page_layout,
    pool_bytes,
    resolve_kv_dtype,
)
from claimbench.engine.worker.acceptance import ACCEPTANCE_RULES, accept
from claimbench.engine.worker.batch import StepInputs, empty_inputs
from claimbench.engine.worker.buckets import bucket_pairs
from claimbench.engine.worker.sampler import sample, sampler_path
from claimbench.engine.worker.sharding import (
    REPLICATED,
    ShardedAttention,
    TensorParallel,
    cache_spec,
    device_bytes,
    replicate_kv_heads,
    weight_specs,
)
from claimbench.kernels.backend import AttentionBackend, get_backend, resolve_backend_name
from claimbench.kernels.kv_quant import LayerKV
from claimbench.models.early_exit import early_exit_forward
from claimbench.models.llama import LlamaForCausalLM, Rope, rope_table
from claimbench.models.moe import with_router_stats
from claimbench.models.packed import dense_path, pack_model


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class StepOutput:
    tokens: jax.Array  # i32[N, 1 + k] tokens per sequence slot; the first num_accepted + 1 count
    logprobs: jax.Array  # f32[N, 1 + k] the model's log-prob of each token
    prompt_logprobs: jax.Array | None  # f32[T] log p(target_ids[t] | tokens <= t), or None
    prompt_top1: jax.Array | None  # i32[T] the most likely next token at each position, or None
    num_accepted: jax.Array  # i32[N] draft tokens accepted (always 0 without speculation)
    # i32[num_layers] distinct experts each MoE layer's real tokens were routed to (from the
    # router, on device); empty for a dense model.
    experts_touched: jax.Array
    # i32[T] layers each token ran with early exit (0 for padding); empty without it.
    exit_layers: jax.Array


class StaticModel:
    """The step's static half (model graph, weight tree structure, attention backend).

    jit hashes its static arguments on every call, and hashing an NNX graph walks it; the
    hash is computed once here (measured: dispatch of a shipped-model step went from 0.95 to
    0.40 ms).
    Equal models still share executables across engines.
    """

    def __init__(
        self,
        graphdef: nnx.GraphDef,
        treedef,
        attention: AttentionBackend,
        exit_threshold: float | None = None,
        acceptance: str = "exact",
        sampler: str = "xla",
    ) -> None:
        self.graphdef, self.treedef, self.attention = graphdef, treedef, attention
        self.exit_threshold = exit_threshold  # early exit (models/early_exit.py); None = off
        self.acceptance = acceptance  # verify steps' rule (acceptance.ACCEPTANCE_RULES)
        self.sampler = sampler  # the greedy reductions: "native" or "xla" (sampler_path)
        self._hash = hash((graphdef, treedef, attention, exit_threshold, acceptance, sampler))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, StaticModel) or self._hash != other._hash:
            return False
        return (
            self.graphdef,
            self.treedef,
            self.attention,
            self.exit_threshold,
            self.acceptance,
            self.sampler,
        ) == (
            other.graphdef,
            other.treedef,
            other.attention,
            other.exit_threshold,
            other.acceptance,
            other.sampler,
        )


def step_fn(
    static: StaticModel,
    with_prompt_logprobs: bool,
    weights: list[jax.Array],
    rope: Rope,
    kv_caches: list[LayerKV],
    inputs: StepInputs,
) -> tuple[StepOutput, list[LayerKV]]:
    graphdef, treedef, attention = static.graphdef, static.treedef, static.attention
    # Weights travel as a flat list: flattening a list per call is cheaper than nnx.State.
    model = nnx.merge(graphdef, jax.tree.unflatten(treedef, weights))
    # nnx.capture takes a bound method, or a function whose first argument is the model.
    forward, exit_args = model, ()
    if static.exit_threshold is not None:
        forward = early_exit_forward
        exit_args = (model, model.exit_heads, static.exit_threshold)
    result, router = with_router_stats(
        forward,
        *exit_args,
        inputs.token_ids,
        inputs.positions,
        kv_caches,
        inputs.md,
        attention=attention,
        rope=rope,
    )
    hidden, kv_caches = result[0], result[1]
    exit_layers = result[2] if len(result) == 3 else jnp.zeros((0,), jnp.int32)
    # Only the sampled positions (each sequence's last token, and its draft tokens when
    # verifying) need the vocabulary projection.
    if inputs.draft_tokens.shape[1] == 0:
        tokens, logprobs = sample(
            model.logits(hidden[inputs.logits_indices[:, 0]]),
            inputs.sampling,
            native=static.sampler == "native",
        )
        tokens, logprobs = tokens[:, None], logprobs[:, None]
        num_accepted = jnp.zeros(tokens.shape[0], jnp.int32)
    else:
        indices = inputs.logits_indices
        # N * (1 + k) slots, padding included, can outnumber the step's tokens (batch 1: 40
        # slots, 16 tokens): then projecting every token once and gathering is cheaper.
        if hidden.shape[0] < indices.size:
            logits = model.logits(hidden)[indices]
        else:
            logits = model.logits(hidden[indices])
        tokens, logprobs, num_accepted = accept(
            logits,
            inputs.draft_tokens,
            inputs.num_draft,
            inputs.sampling,
            static.acceptance,
        )
    prompt_logprobs = prompt_top1 = None
    if with_prompt_logprobs:
        all_logprobs = jax.nn.log_softmax(model.logits(hidden), axis=-1)
        prompt_logprobs = jnp.take_along_axis(all_logprobs, inputs.target_ids[:, None], -1)[:, 0]
        prompt_top1 = jnp.argmax(all_logprobs, axis=-1).astype(jnp.int32)
    output = StepOutput(
        tokens,
        logprobs,
        prompt_logprobs,
        prompt_top1,
        num_accepted,
        router.experts_touched,
        exit_layers,
    )
    return output, kv_caches


# Unsharded: arrays stay where they were placed (the default device).
_step = jax.jit(step_fn, static_argnums=(0, 1), donate_argnums=(4,))


@cache
def _sharded_step(
    weights: tuple[NamedSharding, ...], caches: tuple[LayerKV, ...], replicated: NamedSharding
):
    """``step_fn`` jitted with explicit shardings (sharding.py's table for the weights, KV
    heads for the cache, the rest replicated), the cache still donated. Cached per layout,
    so engines of one shape and mesh share executables."""
    return jax.jit(
        step_fn,
        static_argnums=(0, 1),
        donate_argnums=(4,),
        in_shardings=(list(weights), replicated, list(caches), replicated),
        out_shardings=(replicated, list(caches)),
    )


class ModelRunner:
    """Owns the model weights and the KV cache; runs steps at compiled bucket shapes.

    The weights and the cache are placed once, here, over a mesh of ``cfg.tp`` devices
    (sharding.py); tp=1 takes the same path over one device. ``unsharded`` keeps today's
    single-device placement with no mesh at all (the baseline benchmarks compare against).
    """

    def __init__(
        self,
        cfg: EngineConfig,
        model: LlamaForCausalLM,
        fp8_kv_scales: tuple[float, float] = (1.0, 1.0),
        *,
        unsharded: bool = False,
    ) -> None:
        """Places ``model`` and allocates the pool; process-wide JAX settings are left alone
        (the persistent compilation cache is switched on by ``build.use_compilation_cache``)."""
        self.cfg = cfg
        self.tp = None if unsharded else TensorParallel.build(cfg.parallel.tp, model.cfg)
        if self.tp is not None:
            model = replicate_kv_heads(model, self.tp.kv_replicas)
        # What the weights really occupy: quantized values and their scales included.
        self.weight_bytes = sum(int(w.nbytes) for w in jax.tree.leaves(nnx.state(model)))
        backend = resolve_backend_name(cfg.model.attention_backend)
        # The "cpu" backend's matmuls: the native kernel on weights packed once, here, or
        # XLA's dot (models/packed.py). One device only: packed weights are not split.
        self.dense = "xla"
        if backend == "cpu" and (self.tp is None or self.tp.tp == 1):
            self.dense = dense_path(model, batch_invariant=cfg.model.batch_invariant)
        elif cfg.model.batch_invariant:  # XLA's and Pallas's tiling follow the step's shapes
            raise ValueError(f"batch_invariant needs the 'cpu' attention backend, got {backend!r}")
        if self.dense == "native":
            model = pack_model(model)
        graphdef, state = nnx.split(model)
        self.weights, treedef = jax.tree.flatten(state)
        self.kv_dtype = resolve_kv_dtype(cfg.cache.kv_dtype, model.dtype)
        # The pages' layout (head_dim lane-padded for the Pallas kernel) sizes the pool.
        kv_cfg = page_layout(model.cfg, backend)
        # One pool, sized per device: kv_pool_bytes is what each device gives its KV heads.
        local_cfg = kv_cfg if self.tp is None else self.tp.local_layout(kv_cfg)
        self.num_pages = num_pages_for_pool(
            local_cfg, self.kv_dtype, cfg.cache.page_size, cfg.cache.kv_pool_bytes
        )
        allocate = partial(
            allocate_kv_cache,
            num_pages=self.num_pages,
            page_size=cfg.cache.page_size,
            storage_dtype=self.kv_dtype,
            fp8_scales=fp8_kv_scales,
            # Pages in the dtype this backend reads and writes them in (XLA writes in
            # place only into integer containers; Mosaic takes no f16): kv_container_dtype.
            attention_backend=backend,
        )
        if self.tp is None:
            self.kv_caches = allocate(kv_cfg)
        else:
            # Each device allocates a whole cache of its own KV heads, in place: the kernels
            # under shard_map see exactly the layout an unsharded cache of those heads has
            # (int8 scale rows included), and the whole pool never sits on one device.
            local = partial(allocate, local_cfg)
            specs = [cache_spec(c) for c in jax.eval_shape(local)]
            self.kv_caches = jax.jit(
                jax.shard_map(local, mesh=self.tp.mesh, in_specs=(), out_specs=specs)
            )()
            cache_shardings = [jax.tree.map(self.tp.named, s, is_leaf=_is_spec) for s in specs]
            weight_shardings = [self.tp.named(s) for s in weight_specs(state, self.tp.tp)]
            self.weights = [
                jax.device_put(w, s) for w, s in zip(self.weights, weight_shardings, strict=True)
            ]
        # Over all devices: each holds a whole pool of its own heads (int8 scale rows padded
        # per device), so the total is tp local pools, not one pool of every head.
        num_devices = 1 if self.tp is None else self.tp.tp
        local_bytes = pool_bytes(local_cfg, self.kv_dtype, cfg.cache.page_size, self.num_pages)
        self.kv_cache_bytes = num_devices * local_bytes
        self.kv_bytes_per_token = num_devices * kv_bytes_per_token(local_cfg, self.kv_dtype)
        # Verifying, the "xla" backend attends every short chunk of a step at once.
        verify_width = 1 + cfg.spec_tokens if cfg.spec_tokens else None
        attention = get_backend(cfg.model.attention_backend, verify_width=verify_width)
        if self.tp is None:
            self.rope = jax.device_put(rope_table(model.cfg, cfg.scheduler.max_model_len))
            self._step = _step
        else:
            replicated = self.tp.named(REPLICATED)
            self.rope = jax.device_put(
                rope_table(model.cfg, cfg.scheduler.max_model_len), replicated
            )
            attention = ShardedAttention(attention, self.tp.mesh)
            self._step = _sharded_step(tuple(weight_shardings), tuple(cache_shardings), replicated)
        # The sampler's greedy reductions: native beside native f32 matmuls (sampler_path).
        self.sampler = sampler_path(self.dense, model.dtype)
        self._static = StaticModel(
            graphdef, treedef, attention, cfg.model.early_exit_threshold, sampler=self.sampler
        )
        self._warm: set[tuple[int, int, bool]] = set()
        self.num_compilations = 0  # bucket variants first run by this runner
        self.compile_time_s = 0.0

    def set_acceptance(self, rule: str) -> None:
        """Verify steps decide by ``rule`` (acceptance.ACCEPTANCE_RULES) from now on. "all"
        and "none" switch verification off, for the experiments' controls only; the steps
        compile again under the new rule (the bucket variants run so far are forgotten)."""
        if rule not in ACCEPTANCE_RULES:
            raise ValueError(f"acceptance rule must be one of {ACCEPTANCE_RULES}, got {rule!r}")
        if not self.cfg.spec_tokens:
            raise ValueError(f"acceptance rule {rule!r} needs speculation; this engine has none")
        static = self._static
        self._static = StaticModel(
            static.graphdef,
            static.treedef,
            static.attention,
            static.exit_threshold,
            rule,
            static.sampler,
        )
        self._warm = set()

    def precompile(self, prompt_logprobs: bool = False) -> tuple[int, float]:
        """Run an all-padding step at every bucket pair (padding only touches the null page),
        so serving never compiles. Returns (bucket variants compiled now, seconds)."""
        before_n, before_s = self.num_compilations, self.compile_time_s
        for num_tokens, num_seqs in bucket_pairs(self.cfg):
            for flag in (False, True) if prompt_logprobs else (False,):
                if (num_tokens, num_seqs, flag, False) not in self._warm:
                    inputs = empty_inputs(self.cfg, num_tokens, num_seqs)
                    jax.block_until_ready(self.execute(inputs, flag))
        return self.num_compilations - before_n, self.compile_time_s - before_s

    def execute(self, inputs: StepInputs, prompt_logprobs: bool) -> StepOutput:
        """Dispatch one step (asynchronously); the cache is replaced by the step's output."""
        # Token ids merged on the device (async scheduling) are a committed jax.Array, a
        # different jit signature from the host's numpy ids: compiled and counted apart.
        on_device = isinstance(inputs.token_ids, jax.Array)
        key = (len(inputs.token_ids), len(inputs.logits_indices), prompt_logprobs, on_device)
        first = key not in self._warm
        start = time.perf_counter()
        out, self.kv_caches = self._step(
            self._static, prompt_logprobs, self.weights, self.rope, self.kv_caches, inputs
        )
        if first:
            jax.block_until_ready(out)
            self.compile_time_s += time.perf_counter() - start
            self.num_compilations += 1
            self._warm.add(key)
        return out

    def describe(self) -> dict[str, object]:
        """The placement: tp, devices, the KV-head split and the bytes one device holds."""
        device = jax.tree.leaves(self.weights)[0].sharding.device_set
        first = min(device, key=lambda d: d.id)
        info: dict[str, object] = {"tp": 1, "devices": [str(first)], "kv_replicas": 1}
        if self.tp is not None:
            info = self.tp.describe()
        return info | {
            "num_pages": self.num_pages,
            "weight_bytes_per_device": device_bytes(self.weights, first),
            "kv_cache_bytes_per_device": device_bytes(self.kv_caches, first),
            "kv_cache_bytes": self.kv_cache_bytes,  # all devices together
            "dense": self.dense,  # the matmuls: "native" (packed weights) or "xla"
            "sampler": self.sampler,  # the greedy reductions: "native" or "xla"
        }


def _is_spec(x: object) -> bool:
    return isinstance(x, PartitionSpec)
