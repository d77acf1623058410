"""The mixed-run check: a comparison only means something when the implementation and seed are all that differ.

Any other config difference (model, data, tokenizer, ``train.*``, ``optim.*``) raises
:class:`MixedRunsError` listing the differing keys, unless the caller allows mixed runs
(CLI: ``--allow-mixed``). Keys allowed to differ are in :data:`IGNORED_KEYS`.

The same config can still name different data: ``data=code_corpus`` reads whatever packages a machine
has, a hub dataset without a pinned revision moves. So each run records a fingerprint of the tokens it
trained and was evaluated on (``summary["data_fingerprint"]``), and :func:`check_same_data` refuses to pair
runs whose fingerprints differ (:class:`DataMismatchError`, naming the runs); runs recorded before the
fingerprint existed pair with a note that their data cannot be checked.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llm.config_keys import BOOKKEEPING_KEYS, covered, flatten
from llm.report.errors import DataMismatchError, MixedRunsError
from llm.report.runs import Run

#: Config keys (dotted; a key also covers everything below it) that may differ between runs. Of ``rope``, the three
#: that tell implementations apart (Run.key) and the packing: any other rope setting (base, layout, rotary_dim,
#: scaling) that differs would pool two models into one implementation's seeds.
#: ``train.init_from`` too: each seed of a fine-tuning sweep starts from its own run (conf/experiment/length_finetune).
IGNORED_KEYS = ("rope.name", "rope.variant", "rope.compute_dtype", "seed", "logger", "out_dir", "hydra",
                "train.resume", "train.init_from", "sweep", "device", "data.packing", *BOOKKEEPING_KEYS)
#: The rope settings every implementation has. Any other ``rope.*`` key is an implementation's own option
#: (``rope.compute_dtype`` is the reference's alone): a run may lack it where others have it.
SHARED_ROPE_KEYS = ("rope.base", "rope.layout", "rope.rotary_dim", "rope.scaling", "rope.max_seq_len")

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
        own_option = covered(k, ("rope",)) and not covered(k, SHARED_ROPE_KEYS)
        present = {v: names for v, names in values.items() if v != MISSING} if own_option else values
        if len(present) > 1:
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
    """Raise :class:`MixedRunsError` if the runs differ in anything but the implementation and seed (see
    IGNORED_KEYS)."""
    diffs = config_differences(runs)
    if not diffs:
        return
    msg = "\n".join(
        [
            f"refusing to compare runs that differ in more than rope and seed "
            f"({len(diffs)} differing config key(s): {', '.join(diffs)}):",
            *describe_differences(diffs),
            "Pass --allow-mixed to compare them anyway.",
        ]
    )
    raise MixedRunsError(msg, diffs)


def describe_data(fp: dict[str, Any]) -> str:
    """One fingerprint as a reader can tell it apart: source, corpus, tokenizer, split and token hash."""
    parts = [str(fp.get("source", "?"))]
    if fp.get("corpus"):
        parts.append(f"corpus {str(fp['corpus'])[:12]}")
    parts.append(f"tokenizer {fp.get('tokenizer', '?')}")
    split = fp.get("split")
    if isinstance(split, dict) and split.get("val_fraction") is not None:
        parts.append(f"val_fraction {split['val_fraction']}")
    parts.append(f"tokens {str(fp.get('id'))[:12]}")
    return ", ".join(parts)


def _names(names: list[str], max_names: int = 4) -> str:
    more = f", +{len(names) - max_names} more" if len(names) > max_names else ""
    return ", ".join(names[:max_names]) + more


def check_same_data(runs: Sequence[Run], allow_mixed: bool = False) -> list[str]:
    """Refuse (:class:`DataMismatchError`) runs whose data fingerprints differ, unless ``allow_mixed``;
    returns the notes the report prints (a mismatch allowed, runs that recorded no fingerprint)."""
    groups: dict[str, list[Run]] = {}
    unknown = []
    for r in runs:
        fp = r.data_fingerprint
        if fp is None:
            unknown.append(r.name)
        else:
            groups.setdefault(str(fp["id"]), []).append(r)
    notes = []
    if len(groups) > 1:
        lines = [f"  {describe_data(rs[0].data_fingerprint or {})}: {_names([r.name for r in rs])}"
                 for rs in groups.values()]
        head = (f"the runs trained on {len(groups)} different data sets (their data fingerprints differ), so "
                "their seeds cannot be paired:")
        if not allow_mixed:
            raise DataMismatchError("\n".join([f"refusing to compare: {head}", *lines,
                                               "Pass --allow-mixed to compare them anyway."]),
                                    {k: [r.name for r in rs] for k, rs in groups.items()})
        notes.append(f"**Different data (`--allow-mixed`)**: {head} " + "; ".join(line.strip() for line in lines))
    if unknown:
        notes.append(f"{len(unknown)} run(s) recorded no data fingerprint (they predate it), so whether they "
                     f"trained on the same data cannot be checked: {_names(unknown)}.")
    return notes


def code_note(runs: Sequence[Run], reference: Sequence[Run]) -> str | None:
    """A warning where the runs were trained by different code (their ``code_fingerprint`` differ), naming how many
    versions and the runs whose code is not the reference's; None where one code (or none recorded) trained them.

    Why a warning, not a refusal: a change to the code may change no number (a report, a comment), but where it
    touched a kernel or the training, a difference between implementations may be the code's, and the reader of
    "Common config" must not take several fingerprints there for one."""
    by_code: dict[str, list[str]] = {}
    for r in runs:
        if fp := r.summary.get("code_fingerprint"):
            by_code.setdefault(str(fp), []).append(r.name)
    if len(by_code) < 2:
        return None
    # the reference's code is its runs' most common fingerprint, so that the runs named are the ones to look at
    # (the first run's where the reference recorded none)
    ref_codes = [str(fp) for r in reference if (fp := r.summary.get("code_fingerprint"))]
    ref_code = max(ref_codes, key=ref_codes.count) if ref_codes else next(iter(by_code))
    others = [name for fp, names in by_code.items() if fp != ref_code for name in names]
    verb = "differs" if len(others) == 1 else "differ"
    return (f"**Different code**: the runs were trained by {len(by_code)} versions of the code ({len(by_code)} code "
            f"fingerprints): {_names(others)} {verb} from the reference's ({ref_code}), so a difference may be the "
            "code's rather than the implementation's.")
