"""The mixed-run check: a comparison only means something when rope and seed are all that differ.

Any other config difference (model, data, tokenizer, ``train.*``, ``optim.*``) raises
:class:`MixedRunsError` listing the differing keys, unless the caller allows mixed runs
(CLI: ``--allow-mixed``). Keys allowed to differ are in :data:`IGNORED_KEYS`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llm.config_keys import covered, flatten
from llm.report.errors import MixedRunsError
from llm.report.runs import Run

#: Config keys (dotted; a key also covers everything below it) that may differ between runs.
IGNORED_KEYS = ("rope", "seed", "logger", "out_dir", "hydra", "train.resume", "sweep", "device")

MISSING = "<missing>"


def _ignored(key: str) -> bool:
    return covered(key, IGNORED_KEYS)


def fmt_value(v: Any) -> str:
    """A config value as the report shows it: strings bare, everything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def config_differences(runs: Sequence[Run]) -> dict[str, dict[str, list[str]]]:
    """Config keys (outside :data:`IGNORED_KEYS`) whose values differ: key -> {value: [run names]}."""
    flat = [flatten(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f if not _ignored(k)})
    diffs: dict[str, dict[str, list[str]]] = {}
    for k in keys:
        values: dict[str, list[str]] = {}
        for r, f in zip(runs, flat, strict=True):
            values.setdefault(fmt_value(f[k]) if k in f else MISSING, []).append(r.name)
        if len(values) > 1:
            diffs[k] = values
    return diffs


def describe_differences(diffs: dict[str, dict[str, list[str]]], max_names: int = 4) -> list[str]:
    """One indented line per differing key: each value with (up to ``max_names``) runs that have it."""
    lines = []
    for k, values in diffs.items():
        parts = []
        for v, names in values.items():
            more = f", +{len(names) - max_names} more" if len(names) > max_names else ""
            parts.append(f"{v} ({', '.join(names[:max_names])}{more})")
        lines.append(f"  {k}: " + "; ".join(parts))
    return lines


def check_not_mixed(runs: Sequence[Run]) -> None:
    """Raise :class:`MixedRunsError` if the runs differ in anything but rope and seed (see IGNORED_KEYS)."""
    diffs = config_differences(runs)
    if not diffs:
        return
    msg = "\n".join(
        [
            f"refusing to compare runs that differ in more than rope and seed "
            f"({len(diffs)} differing config key(s): {', '.join(diffs)}):",
            *describe_differences(diffs),
            "Pass --allow-mixed (compare_runs(..., allow_mixed=True)) to compare them anyway.",
        ]
    )
    raise MixedRunsError(msg, diffs)
