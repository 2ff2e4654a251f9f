"""`claimbench audit`: show the MCP audit log, verify it with its key, record a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from claimbench.cli.common import console, fail, global_options
from claimbench.ops.audit import DEFAULT_LOG, decode_record, read_lines
from claimbench.ops.audit_key import KEY_FILE_ENV_VAR, check_outside, default_key_file, load_key
from claimbench.platform.printable import printable

CHECKPOINT_ENV_VAR = "CLAIMBENCH_AUDIT_CHECKPOINT"


def _show(lines: list[bytes], tail: int) -> None:
    for line in lines[len(lines) - tail :] if tail else []:
        try:
            entry = decode_record(line)
            arguments = json.dumps(entry.get("arguments"), separators=(",", ":"))
            fields = [
                entry.get("time"),
                entry.get("agent") or "-",
                f"{entry.get('tool')}{arguments}",
                entry.get("outcome"),
            ]
            if entry.get("job_id"):
                fields.append(f"job {entry['job_id']}")
            text = "  ".join(printable(str(f)) for f in fields)
        except (ValueError, RecursionError):
            text = f"(unreadable line) {line[:120]!r}"
        console.print(text, highlight=False, markup=False, soft_wrap=True)


def audit(
    ctx: typer.Context,
    log: Annotated[
        Path | None, typer.Option(help=f"The audit log (default: <root>/{DEFAULT_LOG}).")
    ] = None,
    tail: Annotated[int, typer.Option(help="Show the last N calls (0: none).", min=0)] = 20,
    check: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Verify every line's MAC and link, the head and (given) the checkpoint: "
            "exit 1 with one line naming what is wrong.",
        ),
    ] = False,
    key_file: Annotated[
        Path | None,
        typer.Option(
            "--audit-key-file",
            help=f"The audit key (default: ${KEY_FILE_ENV_VAR}, else "
            "$XDG_CONFIG_HOME/claimbench/audit.key).",
        ),
    ] = None,
    checkpoint_file: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-file",
            envvar=CHECKPOINT_ENV_VAR,
            help="A checkpoint outside the log's directory: the log must extend it.",
        ),
    ] = None,
    checkpoint: Annotated[
        bool,
        typer.Option(
            "--checkpoint",
            help="After verifying, record the log's head in --checkpoint-file (created if "
            "missing).",
        ),
    ] = False,
) -> None:
    """Show the last calls agents made through `claimbench mcp`, allowed or refused."""
    from claimbench.ops.audit_verify import record_checkpoint, verify

    path = log if log is not None else global_options(ctx).root / DEFAULT_LOG
    if checkpoint and checkpoint_file is None:
        fail(f"--checkpoint needs --checkpoint-file (or ${CHECKPOINT_ENV_VAR})")
    if path.exists() or path.is_symlink():
        try:
            _show(read_lines(path), tail)
        except OSError as e:
            fail(f"cannot read audit log {path}: {e.strerror}", code=1)
        except ValueError as e:
            fail(f"cannot read audit log: {e}", code=1)
    elif not (check or checkpoint):
        fail(f"no audit log at {path}")
    if not (check or checkpoint):
        return
    key_path = key_file if key_file is not None else default_key_file()
    try:
        check_outside(key_path, path)
        if checkpoint_file is not None:
            check_outside(checkpoint_file, path, "the checkpoint")
        key = load_key(key_path)
        if checkpoint:
            verdict = record_checkpoint(path, key, checkpoint_file)
        else:
            verdict = verify(path, key, checkpoint_file)
    except ValueError as e:
        fail(str(e), code=1)
    except OSError as e:
        fail(f"cannot read audit log {path}: {e.strerror}", code=1)
    if not verdict.ok:
        fail(f"{path}: {verdict.problem}", code=1)
    against = f", extends checkpoint {checkpoint_file}" if checkpoint_file is not None else ""
    recorded = "; checkpoint recorded" if checkpoint else ""
    console.print(
        f"{path}: intact over {verdict.num_lines} line(s){against}{recorded}", highlight=False
    )
