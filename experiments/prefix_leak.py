"""prefix-leak: a tenant learns other tenants' prompts from its own time to first token.

``num_tenants`` victim tenants and one attacker use one application: every prompt starts with
the same ``system_prompt_len``-token system prompt, then a document (``prefix_len`` tokens),
then the request's own question (``suffix_len`` tokens); both lengths are drawn per prompt from
length distributions. Per trial the same traffic is served twice, on one engine reset between
modes (which mode goes first alternates across trials): with the prefix cache shared across
tenants, and salted per tenant (engine mode "per-tenant": the tenant id salts each chain's first
block). Shared, a tenant's first request already hits the system prompt other tenants cached;
salted, each tenant computes it once itself, then hits its own blocks as before. The traffic:

1. The victims send ``victim_rounds_before`` rounds; each round has one request per secret
   (``num_secrets`` random documents, dealt round-robin to the victim tenants, each secret
   always sent by its owner), the round's requests served together.
2. The attacker calibrates with its own requests only: it primes half of ``num_calibration``
   fresh documents (one request each), then probes all of them. Its threshold is the TTFT that
   best separates primed (hit) from unprimed (miss) probes: of the cuts halfway (in log time)
   between neighbouring sorted TTFTs, the one with the highest calibration accuracy (the
   lowest such cut on ties). Nothing about the threshold is set by hand.
3. The attacker probes ``num_probes`` candidate documents, half of them secrets the victims
   sent and half never sent, in random order, each with a fresh suffix, and classifies a
   probe as "sent" when its TTFT is below the threshold. Every candidate is probed once, so
   its own probe never primes it. Calibration and probes run one at a time on an otherwise
   idle engine: the attacker's best case.
4. The victims send ``victim_rounds_after`` more rounds.

Metrics, every one per trial: attack accuracy over the probed candidates (% classified
correctly; 50% is guessing) per mode, and the victims' own prefix-hit rate (cached prompt
tokens / prompt tokens over all their requests, pooled) salted as a percentage of shared.
Token ids are drawn uniformly from the vocabulary (ids below 3 excluded: special tokens); the
cache and the timing depend only on lengths and equality.

Counterfactuals (``counterfactual``, lab/engines/counterfactuals.py), each one mechanism switched:
``no-salt`` (the salted mode's cache is shared across tenants), ``shared-cache-off`` (the
shared mode caches nothing) and ``salted-cache-off`` (the salted mode caches nothing).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from claimbench.engine.sampling_params import SamplingParams
from claimbench.harness import evidence_rules
from claimbench.lab.engines import counterfactuals
from claimbench.workload.lengths import length_dist_from_dict

if TYPE_CHECKING:
    from claimbench.engine.engine import LLMEngine
    from claimbench.harness.context import RunContext

DEFAULT_PARAMS: dict[str, Any] = {
    "system_prompt_len": 128,
    # Documents and questions of varied length, as a tenant's traffic has: a short document
    # is a small timing signal, a long question a large noise.
    "prefix_len": {"kind": "lognormal", "mean": 256, "sigma": 0.5, "lo": 32, "hi": 512},
    "suffix_len": {"kind": "lognormal", "mean": 16, "sigma": 0.5, "lo": 1, "hi": 64},
    "num_tenants": 4,
    "num_secrets": 8,
    "victim_rounds_before": 2,
    "victim_rounds_after": 1,
    "num_calibration": 8,
    "num_probes": 16,
    "engine": {},
    "counterfactual": counterfactuals.NONE,
}
ENGINE_MODES = {"shared": "shared", "salted": "per-tenant"}  # claim's name -> engine mode
# Each counterfactual's mode -> the engine mode it is served with instead of its own.
COUNTERFACTUALS = {
    "no-salt": {"salted": "shared"},
    "shared-cache-off": {"shared": "off"},
    "salted-cache-off": {"salted": "off"},
}
FIRST_TOKEN = SamplingParams(max_tokens=1, ignore_eos=True)  # TTFT is all the attacker reads
ATTACKER = "attacker"
MIN_TOKEN_ID = 3
Prompt = tuple[str, list[int]]  # (tenant, prompt token ids)


def victim(index: int) -> str:
    """The tenant id of victim ``index``."""
    return f"victim{index}"


@dataclass(frozen=True)
class Plan:
    """One trial's prompts, identical in both modes."""

    victim_rounds: list[list[Prompt]]  # [round][request]
    num_rounds_before: int
    primes: list[list[int]]  # attacker's priming requests
    calibration: list[list[int]]  # attacker's calibration probes
    calibration_primed: list[bool]  # per calibration probe
    probes: list[list[int]]  # attacker's candidate probes
    probe_sent: list[bool]  # per probe: did a victim send that document


@dataclass(frozen=True)
class ModeResult:
    attack_acc_pct: float
    calibration_acc_pct: float  # the threshold's accuracy on the attacker's own labelled set
    victim_hit_rate_pct: float
    threshold_s: float
    requests: pd.DataFrame  # the engine's requests frame plus role and truth columns


def draw_plan(params: dict[str, Any], rng: np.random.Generator, vocab_size: int) -> Plan:
    """Secrets, candidates and every request's prompt for one trial."""

    def tokens(n: int) -> list[int]:
        return rng.integers(MIN_TOKEN_ID, vocab_size, size=n).tolist()

    prefix_len = length_dist_from_dict(params["prefix_len"])
    suffix_len = length_dist_from_dict(params["suffix_len"])

    def document() -> list[int]:
        return tokens(int(prefix_len.sample(rng, 1)[0]))

    system = tokens(params["system_prompt_len"])

    def prompt(document: list[int]) -> list[int]:
        return system + document + tokens(int(suffix_len.sample(rng, 1)[0]))

    secrets = [document() for _ in range(params["num_secrets"])]
    owners = [victim(i % params["num_tenants"]) for i in range(len(secrets))]
    rounds = params["victim_rounds_before"] + params["victim_rounds_after"]
    victim_rounds = [
        [(owner, prompt(s)) for owner, s in zip(owners, secrets, strict=True)]
        for _ in range(rounds)
    ]

    own = [document() for _ in range(params["num_calibration"])]
    primed = rng.permutation(len(own)) < len(own) // 2
    primes = [prompt(p) for p, is_primed in zip(own, primed, strict=True) if is_primed]
    calibration = [prompt(p) for p in own]

    num_sent = params["num_probes"] // 2
    sent = [secrets[i] for i in rng.choice(len(secrets), size=num_sent, replace=False)]
    unsent = [document() for _ in range(params["num_probes"] - num_sent)]
    order = rng.permutation(params["num_probes"])
    candidates = sent + unsent
    return Plan(
        victim_rounds=victim_rounds,
        num_rounds_before=params["victim_rounds_before"],
        primes=primes,
        calibration=calibration,
        calibration_primed=[bool(x) for x in primed],
        probes=[prompt(candidates[i]) for i in order],
        probe_sent=[bool(i < num_sent) for i in order],
    )


def best_threshold(ttft_s: np.ndarray, is_hit: np.ndarray) -> float:
    """The TTFT cut (predict hit below it) with the best accuracy on a labelled set:
    f[n] seconds, b[n] labels -> seconds.

    Cuts lie halfway between neighbouring TTFTs in log time (timing noise is multiplicative:
    a busy machine stretches every step alike); ties go to the lowest cut.
    """
    if len(ttft_s) == 0 or is_hit.all() or not is_hit.any():
        raise ValueError(f"calibration needs hits and misses, got labels {is_hit.tolist()}")
    values = np.unique(ttft_s)
    cuts = np.concatenate([[values[0] / 2], np.sqrt(values[:-1] * values[1:]), [values[-1] * 2]])
    accuracy = [np.mean((ttft_s < cut) == is_hit) for cut in cuts]
    return float(cuts[int(np.argmax(accuracy))])


def serve(engine: LLMEngine, prompts: list[Prompt]) -> list[str]:
    """Submit the prompts together and step until the engine is idle; their request ids."""
    ids = [engine.add_request(p, FIRST_TOKEN, tenant=tenant) for tenant, p in prompts]
    while engine.has_unfinished:
        engine.step()
    return ids


def accuracy_pct(ttft_s: np.ndarray, threshold_s: float, is_hit: list[bool]) -> float:
    """% of requests the threshold classifies right (below it: a hit)."""
    return 100.0 * float(np.mean((ttft_s < threshold_s) == np.asarray(is_hit)))


def play(engine: LLMEngine, plan: Plan) -> ModeResult:
    """Serve one trial's traffic on a freshly reset engine; score the attack."""
    roles: dict[str, tuple[str, bool | None]] = {}  # id -> (role, truth)

    def victim_rounds(rounds: list[list[Prompt]]) -> None:
        for prompts in rounds:
            roles.update(dict.fromkeys(serve(engine, prompts), ("victim", None)))

    def one_by_one(prompts: list[list[int]], role: str, truths: list[bool]) -> list[str]:
        ids = [serve(engine, [(ATTACKER, p)])[0] for p in prompts]
        roles.update({i: (role, t) for i, t in zip(ids, truths, strict=True)})
        return ids

    victim_rounds(plan.victim_rounds[: plan.num_rounds_before])
    one_by_one(plan.primes, "prime", [True] * len(plan.primes))
    calibration_ids = one_by_one(plan.calibration, "calibration", plan.calibration_primed)
    probe_ids = one_by_one(plan.probes, "probe", plan.probe_sent)
    victim_rounds(plan.victim_rounds[plan.num_rounds_before :])

    frame = engine.requests_frame().set_index("request_id", drop=False)
    if frame["completed"].sum() != len(frame):
        raise RuntimeError(f"{len(frame) - frame['completed'].sum()} requests did not complete")
    ttft = frame["ttft_s"]
    calibration_ttft = ttft[calibration_ids].to_numpy()
    threshold = best_threshold(calibration_ttft, np.asarray(plan.calibration_primed))
    victims = frame[frame["tenant"] != ATTACKER]
    hit_rate = 100.0 * victims["prefix_hit_tokens"].sum() / victims["prompt_tokens"].sum()
    frame = frame.reset_index(drop=True).assign(
        role=[roles[i][0] for i in frame["request_id"]],
        truth=[roles[i][1] for i in frame["request_id"]],
    )
    return ModeResult(
        attack_acc_pct=accuracy_pct(ttft[probe_ids].to_numpy(), threshold, plan.probe_sent),
        calibration_acc_pct=accuracy_pct(calibration_ttft, threshold, plan.calibration_primed),
        victim_hit_rate_pct=float(hit_rate),
        threshold_s=threshold,
        requests=frame,
    )


def _check(params: dict[str, Any]) -> None:
    for name in ("prefix_len", "suffix_len"):
        length_dist_from_dict(params[name])  # a bad distribution fails before any serving
    for key, value in params.items():
        if key in ("engine", "prefix_len", "suffix_len", "counterfactual"):
            continue
        minimum = 0 if key == "victim_rounds_after" else 1
        if not isinstance(value, int) or value < minimum:
            raise ValueError(f"param {key} must be an integer >= {minimum}, got {value!r}")
    if params["num_calibration"] < 2 or params["num_probes"] < 2:
        raise ValueError(
            f"num_calibration and num_probes must be >= 2, got {params['num_calibration']} "
            f"and {params['num_probes']}"
        )
    if params["num_probes"] // 2 > params["num_secrets"]:
        raise ValueError(
            f"num_probes={params['num_probes']} needs {params['num_probes'] // 2} secrets, "
            f"num_secrets={params['num_secrets']}"
        )
    if params["num_tenants"] > params["num_secrets"]:
        raise ValueError(
            f"num_tenants={params['num_tenants']} victims need at least as many secrets, "
            f"num_secrets={params['num_secrets']}"
        )


def _check_fits(plan: Plan, max_model_len: int) -> None:
    prompts = [p for r in plan.victim_rounds for _, p in r] + plan.calibration + plan.probes
    longest = max(len(p) for p in prompts)
    if longest >= max_model_len:
        raise ValueError(f"a prompt of {longest} tokens leaves no room in {max_model_len=}")


def run(ctx: RunContext) -> None:
    """Record shared_attack_acc_pct, salted_attack_acc_pct and salted_own_hit_retention_pct
    per trial, with each mode's threshold, calibration accuracy and victim hit rate beside."""
    params = ctx.merged(DEFAULT_PARAMS)
    _check(params)
    modes = ENGINE_MODES | COUNTERFACTUALS.get(
        counterfactuals.chosen(params, tuple(COUNTERFACTUALS)), {}
    )
    engine = ctx.engine(precompile=True)
    for trial in range(ctx.trials):
        plan = draw_plan(
            params, np.random.default_rng([ctx.seed, trial]), engine.model_cfg.vocab_size
        )
        _check_fits(plan, engine.config.scheduler.max_model_len)
        results: dict[str, ModeResult] = {}
        # Alternate which mode goes first, so slow drift on the machine favours neither.
        for name in list(ENGINE_MODES)[:: 1 if trial % 2 == 0 else -1]:
            engine.reset(dataclasses.replace(engine.config, prefix_caching=modes[name]))
            results[name] = play(engine, plan)
            ctx.save_frames(requests=results[name].requests, mode=name, trial=trial)
        for name, result in results.items():
            ctx.record(f"{name}_attack_acc_pct", result.attack_acc_pct, trial=trial, unit="%")
            # The counts behind the share, so scoring pools them over trials.
            num_probes = len(plan.probes)
            num_right = round(result.attack_acc_pct * num_probes / 100.0)
            for metric, count in zip(
                evidence_rules.count_metrics(f"{name}_attack_acc_pct"),
                (num_right, num_probes),
                strict=True,
            ):
                ctx.record(metric, count, trial=trial, unit="count")
            labels = {"trial": trial, "mode": name}
            ctx.record("calibration_acc_pct", result.calibration_acc_pct, unit="%", **labels)
            ctx.record("victim_hit_rate_pct", result.victim_hit_rate_pct, unit="%", **labels)
            ctx.record("ttft_threshold_s", result.threshold_s, unit="s", **labels)
        shared_rate = results["shared"].victim_hit_rate_pct
        if shared_rate == 0:
            if modes["shared"] == "off":  # shared-cache-off: no hit to retain a share of
                continue
            raise RuntimeError("the victims never hit the shared cache: the KV pool is too small")
        retention = 100.0 * results["salted"].victim_hit_rate_pct / shared_rate
        ctx.record("salted_own_hit_retention_pct", retention, trial=trial, unit="%")


def figures(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """The attacker's TTFTs, cache hits against misses, in each mode (every run pooled)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    from claimbench.lab.figures.svg import figure_to_svg

    frames = [
        pd.read_parquet(d / "requests.parquet")
        for d in run_dirs
        if (d / "requests.parquet").is_file()
    ]
    frames = [f for f in frames if {"role", "mode", "prefix_hit_tokens"} <= set(f.columns)]
    if not frames:
        return []
    attacker = pd.concat(frames, ignore_index=True)
    attacker = attacker[attacker["role"].isin(["calibration", "probe"])]
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(7.0, 2.8))
        axes = fig.subplots(1, 2, sharey=True)
        # Log-spaced bins: hits and misses differ by a factor, and one stalled request must
        # not squash the rest into a single bin.
        ttft_ms = attacker["ttft_s"] * 1e3
        bins = np.geomspace(ttft_ms.min(), ttft_ms.max(), 31)
        for ax, mode in zip(axes, ENGINE_MODES, strict=True):
            rows = attacker[attacker["mode"] == mode]
            hit = rows["prefix_hit_tokens"] > 0
            ax.hist(
                rows.loc[hit, "ttft_s"] * 1e3, bins=bins, alpha=0.7, label="hit", color="#1b7837"
            )
            ax.hist(
                rows.loc[~hit, "ttft_s"] * 1e3, bins=bins, alpha=0.7, label="miss", color="#b35806"
            )
            ax.set_xscale("log")
            ax.set_title(f"cache {mode}")
            ax.set_xlabel("attacker TTFT (ms)")
        axes[0].set_ylabel("requests")
        axes[0].legend(frameon=False)
        svg = figure_to_svg(fig)
    return [("Attacker time to first token: prefix-cache hits vs misses", svg)]
