"""benchmarks/cpu_profile.py: perf's report read back and grouped by what ran, bad options
refused in one line, and a sampled round of our engine at a tiny size."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import cpu_profile as cp  # noqa: E402

SCRIPT = Path(cp.__file__)
NATIVE = "libclaimbench_native.so"
PAGE = "claimbench::PageState"
REPORT = f"""# Samples: 16K of event 'cpu-clock:pppH'
#
# Overhead|Shared Object      |Symbol
 30.00% |{NATIVE}  |[.] claimbench::(anonymous namespace)::AttendSequencePage<64, 2, 2, {PAGE}>
 20.00% |{NATIVE}  |[.] claimbench::(anonymous namespace)::Tile<12, false>
 10.00% |{NATIVE}  |[.] claimbench::(anonymous namespace)::Tile<11, true>
 8.00%  |{NATIVE}  |[.] claimbench::(anonymous namespace)::AttendTileLanes<64l>
 6.00%  |{NATIVE}  |[.] claimbench::KernelThreads::Loop
 1.00%  |{NATIVE}  |[.] claimbench::(anonymous namespace)::Row
 5.00%  |[JIT] tid 21137   |[.] 0x00007fe97885d0c9
 4.00%  |libjax_common.so  |[.] xla::cpu::ThunkExecutor::Execute
 7.00%  |libpython3.11.so.1.0 |[.] _PyEval_EvalFrameDefault
 3.00%  |libc.so.6         |[.] _int_malloc
 2.00%  |[kernel.kallsyms] |[k] finish_task_switch.isra.0
 2.00%  |libarrow.so.2000  |[.] arrow::default_cpu_memory_manager
 2.00%  |{NATIVE}  |[.] claimbench::(anonymous namespace)::Something::New
"""


def test_the_report_is_read_line_by_line_headers_skipped():
    rows = cp.parse_report(REPORT)
    assert len(rows) == 13
    assert rows[0] == (30.0, NATIVE, rows[0][2]) and rows[0][2].endswith("PageState>")
    assert rows[6] == (5.0, "[JIT] tid 21137", "0x00007fe97885d0c9")  # a name with spaces
    assert rows[10] == (2.0, "[kernel.kallsyms]", "finish_task_switch.isra.0")


def test_samples_are_grouped_by_what_ran():
    groups = {g["group"]: g for g in cp.grouped(cp.parse_report(REPORT))}
    share = {name: round(g["share"], 6) for name, g in groups.items()}
    assert share == {
        "decode attention": 0.30,
        "dense": 0.30,
        "prefill attention": 0.08,
        "kernel threads (spin, hand-off)": 0.06,
        "greedy": 0.01,
        "other native": 0.02,
        "XLA compiled ops": 0.05,
        "jax and XLA runtime": 0.04,
        "Python": 0.07,
        "C runtime (malloc, libm, libstdc++)": 0.03,
        "OS kernel": 0.02,
        "other": 0.02,
    }
    assert [s for s, _ in groups["dense"]["symbols"]] == [
        "claimbench::(anonymous namespace)::Tile<12, false>",
        "claimbench::(anonymous namespace)::Tile<11, true>",
    ]
    # Largest first, and shares of the rows' total (perf's rounded percentages need not add
    # to exactly 100).
    ordered = cp.grouped(cp.parse_report(REPORT))
    assert [g["share"] for g in ordered] == sorted((g["share"] for g in ordered), reverse=True)
    doubled = cp.grouped([(2 * p, d, s) for p, d, s in cp.parse_report(REPORT)])
    assert {g["group"]: round(g["share"], 6) for g in doubled} == share


# Each kernel's sources: every struct and function they define is that kernel's.
KERNEL_SOURCES = {
    "decode attention": ("decode_tiles.h", "decode_page_regs.h", "paged_decode.cc"),
    "prefill attention": ("paged_prefill.cc",),
    "dense": ("dense.cc",),
    "greedy": ("greedy.cc",),
    "kernel threads (spin, hand-off)": ("parallel.h",),
}
NATIVE_DIR = Path(cp.__file__).resolve().parents[1] / "claimbench" / "kernels" / "native"
FUNCTION = re.compile(r"^(?:[\w:<>,]+[\s*&]+)+(\w+)\(", re.M)
STRUCT = re.compile(r"^(?:struct|class)\s+(\w+)", re.M)


def defined_names(name: str) -> set[str]:
    text = (NATIVE_DIR / name).read_text()
    found = set(FUNCTION.findall(text)) | set(STRUCT.findall(text))
    return {n for n in found if not n.startswith("__")}


def test_every_kernel_name_in_the_sources_lands_in_its_kernels_group():
    """As perf names them: a .cc file's definitions sit in an anonymous namespace, a header's
    in claimbench (a struct's samples under its methods). Names that two kernels define alike
    (dense.cc's and decode_tiles.h's Load) are the one thing left to "other native"."""
    names = {
        group: {(f, n) for f in files for n in defined_names(f)}
        for group, files in KERNEL_SOURCES.items()
    }
    count: dict[str, int] = {}
    for pairs in names.values():
        for _, n in pairs:
            count[n] = count.get(n, 0) + 1
    checked = 0
    for group, pairs in names.items():
        for source, n in sorted(pairs):
            if count[n] > 1:
                continue
            if source.endswith(".cc"):
                symbol = f"claimbench::(anonymous namespace)::{n}<64, 2, 2>"
            else:
                symbol = f"claimbench::{n}<64, 2, 2>::Attend"
            assert cp.group_of(NATIVE, symbol) == group, (source, symbol)
            checked += 1
    # The sources were read: the kernels AVX2 and AVX-512 builds run are among the names.
    decode = {n for _, n in names["decode attention"]}
    assert {"PageRegState", "PageState", "PageRowState", "PageSoftmaxRegs"} <= decode
    assert checked > 30


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seconds", "0"], "--seconds must be > 0"),
        (["--seconds", "nan"], "--seconds must be > 0"),
        (["--seconds", "inf"], "--seconds must be > 0"),
        (["--scheduling", "sometimes"], "invalid"),
    ],
)
def test_bad_options_are_refused_in_one_line(argv, message):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_without_perf_it_says_so_and_exits_2(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no perf on this PATH
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "perf is not installed here (Debian: linux-perf): nothing to sample with"
    )


@pytest.mark.slow
def test_a_tiny_sampled_round_attributes_the_native_kernels():
    perf = cp.perf_path()
    if perf is None or cp.sampling_refused(perf) is not None:
        pytest.skip("perf cannot sample here")
    tiny = ["--requests", "8", "--min-input", "64", "--max-input", "128", "--output-len", "8"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--seconds", "2", "--json", *tiny],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rounds_s"] and len(result["rounds_s"]) == len(result["idle_core_frac"])
    shares = {g["group"]: g["share"] for g in result["groups"]}
    assert sum(shares.values()) == pytest.approx(1.0)
    # The engine's native kernels ran and were named: their samples are not lost in "other".
    assert shares.get("dense", 0) > 0 and shares.get("decode attention", 0) > 0
    assert shares.get("other native", 0) < shares["dense"]
