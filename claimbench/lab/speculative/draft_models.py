"""The draft model a speculative claim names (its ``draft_model`` param): the directory a run
loads, the shapes tpu-check compiles, and the pin `claimbench model fetch` downloads.

    draft_model: null            the shipped claimbench-tiny-draft (the quick profile's)
    draft_model: {repo: Qwen/Qwen2.5-0.5B-Instruct, revision: <40-hex commit>,
                  preset: qwen2.5-0.5b-instruct}

A pinned draft is fetched like the full profile's model (`claimbench model fetch REPO`, the
revision read from claims.yaml) into fetch.default_dir, where a run loads it; tpu-check
compiles its preset (hardware/model_presets.py) without the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from claimbench.harness.claims import PROFILES, Claim
from claimbench.harness.project_config import PinnedModel

DRAFT_PARAM = "draft_model"


def pinned_draft(value: Any) -> PinnedModel | None:
    """The param's pinned checkpoint (None: the shipped tiny draft); ValueError, one line."""
    if value is None:
        return None
    try:
        return PinnedModel.model_validate(value)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "value"
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"param {DRAFT_PARAM} {where}: {message}") from None


def draft_path(value: Any) -> Path | None:
    """The directory a run loads the draft from (None: the shipped one); ValueError naming
    the fetch command when the pinned checkpoint is not fetched there."""
    from claimbench.models.fetch import FETCH_FILE, default_dir, read_record

    pin = pinned_draft(value)
    if pin is None:
        return None
    path = default_dir(pin.repo, pin.revision)
    if not (path / FETCH_FILE).is_file():
        raise ValueError(
            f"draft model {pin.repo}@{pin.revision[:12]} is not fetched to {path}: "
            f"run `claimbench model fetch {pin.repo}`"
        )
    record = read_record(path)
    if (record.get("repo"), record.get("revision")) != (pin.repo, pin.revision):
        raise ValueError(f"{path} does not hold {pin.repo}@{pin.revision}")
    return path


def draft_model_name(value: Any) -> str | None:
    """What tpu-check compiles for the draft (tpu_check.resolve_model): its preset, else its
    fetched directory; None: the shipped tiny draft."""
    pin = pinned_draft(value)
    if pin is None:
        return None
    return pin.preset if pin.preset is not None else str(draft_path(value))


def claim_draft_pins(claims: list[Claim]) -> list[PinnedModel]:
    """Every pinned draft the claims name, at any profile, once each."""
    pins: list[PinnedModel] = []
    for claim in claims:
        for profile in PROFILES:
            value = claim.profile_params(profile).get(DRAFT_PARAM)
            if value is None:
                continue
            try:
                pin = pinned_draft(value)
            except ValueError:
                continue  # the claim's own run reports it
            if pin not in pins:
                pins.append(pin)
    return pins
