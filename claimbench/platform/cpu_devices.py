"""Virtual CPU devices for tensor parallelism on a host without accelerators.

XLA's CPU backend shows one device unless told otherwise before JAX starts, so the CLI reads
its own command line first: ``--tp N`` (generate, bench) asks for N devices, and ``run`` for
``RUN_DEVICES``, whichever claims it runs: tp-refutation serves at up to that many, and every
other claim then runs on a process of the same device count alone as in ``run --all`` (the
count is the process's, not the claim's, so a claim's measurements must not depend on which
claims shared its command line).
The flag is added to XLA_FLAGS only when the CPU is the platform and the user has not set a
device count.
Virtual devices share the host's cores and memory: a tp run on them checks the sharded code
path, not the speed of separate chips.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated

import typer

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
RUN_DEVICES = 4  # the largest tp the tp-refutation experiment serves at

TPOption = Annotated[
    int,
    typer.Option(
        help="Tensor-parallel devices: weights and KV heads split over them (on a CPU host, "
        "virtual devices sharing its cores)."
    ),
]


def requested_devices(argv: Sequence[str]) -> int | None:
    """The CPU devices a command line needs: --tp N, RUN_DEVICES for ``run``, else None. A
    malformed --tp is left for the command to reject."""
    for i, arg in enumerate(argv):
        value = None
        if arg == "--tp" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--tp="):
            value = arg.removeprefix("--tp=")
        if value is not None:
            return int(value) if value.isdigit() and int(value) > 1 else None
    if "run" in argv:
        return RUN_DEVICES
    return None


def set_cpu_device_count(argv: Sequence[str]) -> None:
    """Give XLA:CPU the devices ``argv`` asks for (before JAX starts), on a CPU-only platform
    and unless XLA_FLAGS already names a device count."""
    count = requested_devices(argv)
    flags = os.environ.get("XLA_FLAGS", "")
    if count is None or os.environ.get("JAX_PLATFORMS") != "cpu" or DEVICE_COUNT_FLAG in flags:
        return
    os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT_FLAG}={count}".strip()
