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

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

import rope
from llm.config_keys import BOOKKEEPING_KEYS, covered, flatten
from llm.report.errors import DataMismatchError, MixedRunsError
from llm.report.runs import Run

#: Config keys (dotted; a key also covers everything below it) that may differ between runs. Of ``rope``, the three
#: that tell implementations apart (Run.key) and the packing: any other rope setting (base, layout, rotary_dim,
#: scaling) that differs would pool two models into one implementation's seeds.
#: ``train.init_from`` too: each seed of a fine-tuning sweep starts from its own run (conf/experiment/length_finetune).
IGNORED_KEYS = ("rope.name", "rope.variant", "rope.compute_dtype", "seed", "logger", "out_dir", "hydra",
                "train.resume", "train.init_from", "sweep", "device", "data.packing", *BOOKKEEPING_KEYS)
#: The rope settings every implementation has: one a run's config leaves out compares as the value it trained with
#: (:func:`_rope_defaults`). Any other ``rope.*`` key is an implementation's own option (``rope.compute_dtype`` is
#: the reference's alone): a run may lack it where others have it.
SHARED_ROPE_KEYS = ("rope.base", "rope.layout", "rope.rotary_dim", "rope.scaling", "rope.max_seq_len")

MISSING = "<missing>"
#: A key a run lacks and has no default for (an object of its own: a config's string "<missing>" is a value).
_ABSENT = object()
#: How a config spells "no scaling" (``conf/rope/*.yaml``); a constructor's ``scaling=None`` means the same.
NO_SCALING = {"type": "none"}


def _ignored(key: str) -> bool:
    return covered(key, IGNORED_KEYS)


def fmt_value(v: Any) -> str:
    """A config value as the report shows it: strings bare, everything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def _rope_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """The shared rope settings (flat keys) a run whose config leaves them out trained with.

    Why derived, not listed: an absent key is not a setting of its own but the default of the call that built the
    run's rope, which ``llm.model`` makes as ``rope.build(name, ..., **rope_cfg)``: ``base`` then takes
    ``rope.build``'s default, the other keys the constructor's (:meth:`RotaryEmbedding.option_defaults`, read from
    its signature). A plugin's config written as the docs say (name, variant, base) thus compares equal to
    ``rope=torch``'s full one. An implementation not registered in this process (a plugin installed elsewhere) is
    read with the defaults it inherits from :class:`rope.RotaryEmbedding`. ``scaling=None`` is no scaling, as
    ``scaling.type: none`` is; ``rope.max_seq_len`` absent is null, which ``llm.model.rope_cache_len`` reads as
    ``model.seq_len``.
    """
    r = config.get("rope")
    name = r.get("name") if isinstance(r, Mapping) else None
    cls = rope.get(name) if isinstance(name, str) and name in rope.available() else rope.RotaryEmbedding
    options = {**rope.RotaryEmbedding.option_defaults(), **cls.option_defaults()}
    shared = {"base": inspect.signature(rope.build).parameters["base"].default, "max_seq_len": None,
              "layout": options["layout"], "rotary_dim": options["rotary_dim"],
              "scaling": _scaling(options["scaling"])}
    return flatten({"rope": shared})


def _scaling(value: Any) -> Any:
    """A scaling as compared: None and ``{}`` are no scaling (``rope.scaling`` reads them so), spelled as configs do."""
    return NO_SCALING if value is None or (isinstance(value, Mapping) and not value) else value


def _compared_value(key: str, flat: Mapping[str, Any], defaults: Mapping[str, Any]) -> Any:
    """The value ``key`` compares as for one run: its own, else (a shared rope key it lacks) the one it trained with,
    else :data:`_ABSENT`.

    A scaling parameter a run leaves out compares as null, since both mean its type's default, whether the scaling
    is the run's own or the constructor's: ``rope.scaling.factor: null`` of a ``type: none`` equals no scaling."""
    if key in flat:
        return flat[key]
    if not covered(key, SHARED_ROPE_KEYS):
        return _ABSENT
    if covered(key, ("rope.scaling",)):
        return None if any(covered(k, ("rope.scaling",)) for k in flat) else defaults.get(key)
    return defaults.get(key, _ABSENT)


def _flat_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's config as flat keys, its ``rope.scaling`` of null or ``{}`` spelled as no scaling."""
    r = config.get("rope")
    if isinstance(r, Mapping) and "scaling" in r:
        config = {**config, "rope": {**r, "scaling": _scaling(r["scaling"])}}
    return flatten(config)


def config_differences(runs: Sequence[Run]) -> dict[str, dict[str, list[str]]]:
    """Config keys (outside :data:`IGNORED_KEYS`) whose values differ: key -> {value: [run names]}.

    A shared rope key a run lacks compares as the value it trained with (:func:`_rope_defaults`), shown as
    ``<missing, default VALUE>``; an implementation's own option a run lacks differs from no value."""
    flat = [_flat_config(r.config) for r in runs]
    defaults = [_rope_defaults(r.config) for r in runs]
    keys = sorted({k for f in flat for k in f if not _ignored(k)})
    diffs: dict[str, dict[str, list[str]]] = {}
    for k in keys:
        own_option = covered(k, ("rope",)) and not covered(k, SHARED_ROPE_KEYS)
        values: dict[str, list[str]] = {}
        compared: set[object] = set()
        for r, f, d in zip(runs, flat, defaults, strict=True):
            value = _compared_value(k, f, d)
            shown = MISSING if value is _ABSENT else fmt_value(value)
            if value is not _ABSENT or not own_option:
                compared.add(_ABSENT if value is _ABSENT else shown)
            label = shown if k in f or value is _ABSENT else f"<missing, default {shown}>"
            values.setdefault(label, []).append(r.name)
        if len(compared) > 1:
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
    # one line, as every refusal: the keys apart by " | ", each key's values by "; "
    msg = (f"refusing to compare runs that differ in more than rope and seed ({len(diffs)} differing config "
           f"key(s)): {' | '.join(line.strip() for line in describe_differences(diffs))}; pass --allow-mixed to "
           "compare them anyway")
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
        sets = " | ".join(f"{describe_data(rs[0].data_fingerprint or {})}: {_names([r.name for r in rs])}"
                          for rs in groups.values())
        head = f"the runs trained on {len(groups)} different data sets (their data fingerprints differ)"
        if not allow_mixed:
            raise DataMismatchError(f"refusing to compare: {head}, so their seeds cannot be paired: {sets}; pass "
                                    "--allow-mixed to compare them anyway",
                                    {k: [r.name for r in rs] for k, rs in groups.items()})
        notes.append(f"**Different data (`--allow-mixed`)**: {head}; their seeds are paired all the same, so each Δ "
                     f"holds the data's difference too: {sets}")
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
