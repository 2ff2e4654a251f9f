"""`claimbench engine knobs` and the one table of runtime vs new-engine options it prints."""

import dataclasses
import json

import pytest
from engine_helpers import shared_tiny_engine
from typer.testing import CliRunner

from claimbench.cli.main import app
from claimbench.engine.config import HOST_FIELDS, KNOBS, SECTION_OF, EngineConfig, knob_rows


def test_every_engine_option_is_in_the_table():
    assert set(KNOBS) == set(SECTION_OF)
    assert list(EngineConfig().flat()) == list(KNOBS)
    assert all(knob.description for knob in KNOBS.values())


def test_host_fields_are_the_tables_runtime_rows():
    assert set(HOST_FIELDS) == {name for name, knob in KNOBS.items() if knob.runtime}
    # Policies, tenants (quotas, admission limits) change at runtime; what compiles does not.
    assert {"scheduling_policy", "victim_policy", "tenants", "prefix_caching"} <= set(HOST_FIELDS)
    assert not {"model_path", "dtype", "max_num_seqs", "page_size", "kv_pool_bytes"} & set(
        HOST_FIELDS
    )


def test_reset_switches_runtime_options_and_refuses_new_engine_ones():
    engine = shared_tiny_engine()
    engine.reset(dataclasses.replace(engine.config, scheduling_policy="vtc", prefix_caching="off"))
    assert engine.config.scheduler.scheduling_policy == "vtc"
    with pytest.raises(ValueError, match="max_num_seqs"):
        engine.reset(
            dataclasses.replace(
                engine.config, max_num_seqs=engine.config.scheduler.max_num_seqs * 2
            )
        )


def test_knobs_json_lists_every_option_with_its_default():
    result = CliRunner().invoke(app, ["engine", "knobs", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows == knob_rows()
    by_name = {row["name"]: row for row in rows}
    assert by_name["max_num_batched_tokens"] == {
        "name": "max_num_batched_tokens",
        "default": EngineConfig().scheduler.max_num_batched_tokens,
        "changes": "new engine",
        "description": KNOBS["max_num_batched_tokens"].description,
    }
    assert {r["name"] for r in rows if r["changes"] == "runtime"} == set(HOST_FIELDS)


def test_knobs_table_names_every_option():
    result = CliRunner().invoke(app, ["engine", "knobs"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in SECTION_OF:
        assert name in result.output
    assert "runtime" in result.output and "new engine" in result.output
