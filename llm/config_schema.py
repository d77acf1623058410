"""The keys a configuration may hold, read from the config files themselves (``conf/``).

Why: Hydra refuses a key the composed config lacks (``train.max_step=5``), but accepts one added with ``+``
(``+train.max_step=5``), which no module then reads: the run would train as if it had not been asked. The
``model``, ``rope`` and ``data`` groups check their keys in the module that builds them (a model setting, a RoPE
implementation's options, a data source's keys); the other groups and the top level are checked here against
what their config files define. A key is known as soon as a file in ``conf/`` defines it (an experiment's
included), so there is no second list to keep in step by hand.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from llm.checks import as_typed
from llm.config_keys import covered, flatten

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
#: Groups whose keys the module that builds them checks: GPTConfig's fields, rope.check_args, a data source's.
SELF_CHECKED = ("model", "rope", "data")
#: Self-checked groups whose every option is read by one reader (each model preset fills the same GPTConfig): a key
#: one option sets is read whichever is chosen, so it is added with ``+``, not refused as another option's.
SHARED_READER = ("model",)
#: Keys no command takes, with why: the line refusing them, whether typed with ``+`` or without.
REFUSED_KEYS = {"model.vocab_size": "model.vocab_size is not a model setting: the tokenizer's vocabulary sets it "
                                    "(model.vocab_multiple pads it)"}
#: The rotation settings a trained run keeps whatever kernel a RoPE override swaps in: they decide the function its
#: weights were trained with.
FUNCTION_KEYS = ("variant", "base", "layout", "rotary_dim", "scaling")
#: The commands that read a trained run: what each does with it, and the rotation settings it keeps (eval_lengths
#: takes rope.scaling.* as its own request).
RUN_READERS = {"generate": ("llm.generate decodes", FUNCTION_KEYS),
               "eval_lengths": ("llm.eval_lengths evaluates", tuple(k for k in FUNCTION_KEYS if k != "scaling"))}


#: Where a user asking a trained run for a longer context goes: generation keeps the run's, so the answer names the
#: commands that do take one (docs/usage.md, "Evaluate and fine-tune at other lengths").
LONGER_CONTEXT = ("to evaluate longer contexts with a scaling: python -m llm.eval_lengths; to generate at a longer "
                  "context, fine-tune the run at that length (python -m llm.train train.init_from=<run dir> "
                  "model.seq_len=<length>) and generate from the new run")


def rope_key_as_typed(key: str, value: object) -> str:
    """``rope.<key>`` at the composed ``value`` as a user types it: a scaling as its ``rope.scaling.*`` keys that are
    set (``rope.scaling=none`` for no scaling), anything else as :func:`~llm.checks.as_typed` writes it. Why: a
    refusal is copied back to a command line, where a Python dict or ``None`` does not parse."""
    if key == "scaling" and (value is None or isinstance(value, Mapping)):
        typed = [f"rope.scaling.{k}={v}" for k, v in (value or {}).items() if v is not None]
        return " ".join(typed) if typed not in ([], ["rope.scaling.type=none"]) else "rope.scaling=none"
    return f"rope.{key}={as_typed(value)}"


def context_kept(shown: str, positions: int | None = None, trained_max_seq_len: object = None) -> str:
    """The line refusing a context other than the run's in generation (``shown``: the key as typed): what it keeps,
    ``positions`` where the run is open (None: Hydra's refusal, before it is), and where to go instead."""
    if positions is None:
        kept = "(its rope.max_seq_len, by default its model.seq_len)"
    else:
        its = "model.seq_len" if trained_max_seq_len is None else "rope.max_seq_len"
        kept = f"of {positions} positions (its {its})"
    return f"{shown}: generation keeps the run's context {kept}; {LONGER_CONTEXT}"


def rope_key_without_kernel(key: str, value: object, config_name: str, *, composed: bool = False,
                            argv: Sequence[str] | None = None) -> str | None:
    """The line refusing ``rope.<key>=value`` with no ``rope=<name>`` in a command that reads a trained run (None
    for another command, or a key that command takes as its own). Why a line of its own: the config-key check
    would call it a key "not of the rope chosen", or say to choose a rope, while the key is the run's rotation,
    which no rope= changes.

    ``composed``: ``value`` is the composed config's (typed; a scaling as a mapping of its keys); else it is the
    command line's text (Hydra refused the key before composing), and a scaling's keys are read from ``argv``, the
    command's arguments (Hydra names only the first key it refused). In generation ``rope.max_seq_len`` is answered
    with the run's context (:func:`context_kept`)."""
    if config_name not in RUN_READERS:
        return None
    does, kept = RUN_READERS[config_name]
    if not composed and key == "scaling":
        shown = " ".join(a.lstrip("+") for a in argv or () if a.lstrip("+").startswith("rope.scaling.")) or \
            f"rope.scaling={value}"
    else:
        shown = rope_key_as_typed(key, value) if composed else f"rope.{key}={value}"
    if key in kept:
        pointer = f"; {LONGER_CONTEXT}" if key == "scaling" else ""
        return (f"{shown}: {does} with the run's rotation (its {', '.join(kept)} as trained); rope=<name> swaps only "
                f"the kernel{pointer}")
    if key == "scaling":
        return None
    if key == "max_seq_len" and config_name == "generate":
        return context_kept(shown)
    return (f"{shown} without rope=<name>: rope.* options belong to the kernel a rope=<name> override chooses (e.g. "
            "rope=torch rope.compute_dtype=bfloat16)")


def unknown_option_note(group: str, option: str) -> str:
    """What to add to the line refusing ``<group>=<option>`` that no config file defines: for ``rope`` an
    implementation registered under that name (a plugin's), that its config file is to be given with
    ``--config-dir``; else nothing.

    Why: a plugin's config file lives in a directory of its own, not in ``conf/``, so a command without
    ``--config-dir`` is told the name is no option while ``rope.available()`` lists it; the note says which half
    is missing."""
    if group != "rope":
        return ""
    import rope  # here, not at the top: only a refused rope= option needs the registry (and torch)

    if option not in rope.available():
        return ""
    return (f"; {option} is a registered RoPE implementation, whose config file DIR/rope/{option}.yaml "
            f"(# @package rope, name: {option}) must be given with --config-dir=DIR")


def left_out_note(name: str) -> str:
    """`` (the RoPE plugin 'x' ... failed to import: ...)`` where ``name`` is an installed plugin that
    ``import rope`` left out, for the line refusing it as unregistered: the warning that said why scrolled by long
    before; else nothing."""
    import rope  # here, not at the top: only a refused rope name needs the registry (and torch)

    reason = rope.plugin_failures().get(name) if isinstance(name, str) else None
    return f" ({reason})" if reason else ""


#: Groups of package ``_global_`` files whose keys count as known for the primary config (``+experiment=``).
GLOBAL_GROUPS = {"config": ("experiment", "recipe")}


def _global_includes(path: Path, groups: Iterable[str]) -> tuple[str, ...]:
    """The ``_global_`` files a ``_global_`` file includes from its defaults (``- /recipe/comparison``), as
    ``group/option``; group overrides (``- override /data: code_corpus``) are choices, not files."""
    out = []
    for entry in OmegaConf.to_container(OmegaConf.load(path)).get("defaults", []) or []:
        if isinstance(entry, str) and entry.strip("/").partition("/")[0] in groups:
            out.append(entry.strip("/"))
    return tuple(out)


def _load(path: Path) -> dict[str, Any]:
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=False) or {}
    data.pop("defaults", None)
    return data


def _option_keys(group_dir: Path, option: str, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The flattened keys option ``option`` of a group holds once composed: those of the options of its own group it
    includes from its defaults (``train/seed004.yaml``'s ``- default``), then its file's own.

    Why: an option that builds on another sets only what it changes, so its file alone lacks the included keys;
    the group's keys every option defines (a run reads them) would then be its keys alone, and ``~train.compile``
    would pass the check, build the data and fail at the trainer with a traceback."""
    path = group_dir / f"{option}.yaml"
    keys: dict[str, Any] = {}
    for entry in OmegaConf.to_container(OmegaConf.load(path)).get("defaults", []) or []:
        name = entry if isinstance(entry, str) else None
        if name is None or name == "_self_":
            continue  # a group choice (override /x: y) or the file's own place: not another option of this group
        name = name.removeprefix(f"/{group_dir.name}/")
        if "/" not in name and name not in seen and (group_dir / f"{name}.yaml").is_file():
            keys.update(_option_keys(group_dir, name, seen | {option}))
    return {**keys, **flatten(_load(path))}


def _defaults_groups(primary: Path) -> dict[str, Any]:
    """The config groups a primary config's defaults list chooses from (``- model: tiny``) and their default
    option (None: the group is chosen only when asked for, as ``rope`` in generate.yaml); Hydra's own excluded."""
    groups = {}
    for entry in OmegaConf.to_container(OmegaConf.load(primary)).get("defaults", []):
        if isinstance(entry, dict):
            for key, option in entry.items():
                name = str(key).removeprefix("optional ").strip()
                if not name.startswith(("override ", "hydra/")):
                    groups[name] = option
    return groups


@dataclass(frozen=True)
class Schema:
    """What the config files of one primary config define: its own keys, each group's options, global keys."""

    own: dict[str, Any]  # the primary config's keys (without defaults and hydra), nested
    groups: dict[str, dict[str, dict[str, Any]]]  # group -> option -> its flattened keys (key -> value)
    required_groups: frozenset[str]  # the groups chosen by default (a composed config always holds them)
    global_keys: frozenset[str]  # flattened keys the _global_ files set (experiments, recipes), hydra's excluded
    command: str  # how the user runs it, for the hint
    global_files: dict[str, frozenset[str]] = field(default_factory=dict)  # "recipe/seed004" -> the keys it sets
    global_includes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "experiment/x" -> files it includes
    default_options: dict[str, str] = field(default_factory=dict)  # group -> the option the defaults list chooses
    config_name: str = "config"  # the primary config: conf/<config_name>.yaml

    @property
    def reader(self) -> str:
        """Who reads this config's keys, for the line naming a missing one: a run (llm.train's config), else the
        command (``llm.generate``), which makes no run."""
        return "a run" if self.config_name == "config" else self.command.removeprefix("python -m ")

    def chosen_global_keys(self, choices: Mapping | None) -> dict[str, list[str]]:
        """Each key the ``_global_`` files of ``choices`` (Hydra's ``runtime.choices``: ``experiment: fidelity``)
        set, and the choices that set it (``+experiment=fidelity``); ``choices`` None: every file's, as a command
        whose choices are unknown may have chosen any."""
        groups = {f.partition("/")[0] for f in self.global_files}
        if choices is None:
            roots = list(self.global_files)
        else:
            roots = [f"{g}/{choices[g]}" for g in sorted(groups) if choices.get(g)]
        out: dict[str, list[str]] = {}
        for root in roots:
            seen, todo = set(), [root]
            while todo:
                f = todo.pop()
                if f in seen or f not in self.global_files:
                    continue
                seen.add(f)
                todo += self.global_includes.get(f, ())
                for k in self.global_files[f]:
                    out.setdefault(k, []).append("+" + root.replace("/", "=", 1))
        return {k: sorted(set(v)) for k, v in out.items()}

    def known_keys(self) -> set[str]:
        """Every dotted key some config file defines (for "did you mean")."""
        keys = set(flatten(self.own)) | set(self.global_keys)
        for group, options in self.groups.items():
            keys |= {f"{group}.{k}" for option in options.values() for k in option}
        return keys

    def options_with(self, key: str) -> list[str]:
        """The ``group=option`` choices whose file defines ``key`` (``rope.compute_dtype``: rope=torch, ...); for a key
        of no group nor of the primary config, the ``_global_`` files that set it (``finetune.source``:
        +experiment=length_finetune)."""
        group, _, rest = key.partition(".")
        if group in self.groups:
            return [f"{group}={name}" for name, keys in self.groups[group].items() if rest in keys]
        if key in flatten(self.own):
            return []
        return [f"+{f.replace('/', '=', 1)}" for f, keys in sorted(self.global_files.items()) if key in keys]

    def _options(self, group: str, cfg_group: Any) -> list[dict[str, Any]]:
        """The options of ``group`` the composed node can stand for: those of its ``name``, else all."""
        options = list(self.groups.get(group, {}).values())
        name = cfg_group.get("name") if isinstance(cfg_group, Mapping) else None
        named = [o for o in options if name is not None and o.get("name") == name]
        return named or options

    def problems(self, cfg: Mapping, choices: Mapping | None = None) -> list[str]:
        """One line per key of ``cfg`` no config file defines (nothing would read it) and per key that every option
        of its group defines but ``cfg`` lacks (removed with ``~``). ``model``, ``rope`` and ``data`` (their keys
        checked by the modules that build them) are checked for removed keys only, and ``hydra`` not at all.
        ``choices``: the groups the command chose (Hydra's ``runtime.choices``), so that only the experiment and
        recipe chosen count as setting their keys; None counts every one's."""
        tree = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
        tree.pop("hydra", None)
        own = flatten(self.own)
        chosen = self.chosen_global_keys(choices)
        top = set(self.own) | set(self.groups) | {k.split(".")[0] for k in chosen}
        out = [self.unknown_key(_first_key(key, tree[key]), top) for key in tree if key not in top]
        # a top-level section removed whole (~sweep) is named itself, not by its first key
        required = {k.split(".")[0] for k in own if k.split(".")[0] not in tree} | {
            g for g in self.required_groups if g not in tree}
        for key, value in tree.items():
            if key not in top or not isinstance(value, Mapping):
                continue
            options = self._options(key, value)
            present = {f"{key}.{k}" for k in flatten(value)}
            if key not in SELF_CHECKED:
                allowed = {f"{key}.{k}" for o in options for k in o}
                # a recipe's key under a group (optim.muon_lr) is read only where the chosen option defines it
                allowed |= {k for k in (*own, *(() if key in self.groups else chosen)) if k.startswith(key + ".")}
                label = f"{key}={value['name']}" if key in self.groups and "name" in value else None
                out += [self.unknown_key(k, allowed, label) + (_set_by(k, chosen) if choices is not None else "")
                        for k in sorted(present) if not covered(k, allowed)]
            elif key not in self.required_groups and "name" not in value:
                continue  # a group this command leaves unchosen (generate.yaml's rope): the run's keys apply
            elif "name" in value and not any(o.get("name") == value["name"] for o in options):
                continue  # an option from another config dir (a plugin's rope): what it leaves out is its default
            # a key every option of the group defines is read: without it the reader's own default would apply
            needed = set.intersection(*({f"{key}.{k}" for k in o} for o in options)) if options else set()
            needed |= {k for k in own if k.startswith(key + ".")}
            required |= {k for k in needed if not covered(k, present) and not any(covered(p, [k]) for p in present)}
        return out + [self._missing(k, tree, choices) for k in sorted(required)]

    def _missing(self, key: str, tree: Mapping, choices: Mapping | None = None) -> str:
        """The line for a key a run reads that the config lacks: removed with ``~``, or, under a group whose
        ``name`` was set by itself (``logger.name=wandb`` with ``logger=none``), another option's key, or left out
        by an option of the user's own (a file in ``--config-dir``, which conf/ does not hold)."""
        group = key.split(".")[0]
        name = (tree.get(group) or {}).get("name") if isinstance(tree.get(group), Mapping) else None
        option = (choices or {}).get(group)
        if group in self.groups and isinstance(option, str) and option not in self.groups[group]:
            return (f"{key} is missing: {self.reader} reads it, and {group}={option} (a config file of yours, not in "
                    f"conf/) does not set it: set it there, or build the file on a preset of the project's by starting "
                    f"it with `defaults: [{self._base_option(group, name)}]`")
        if group in self.groups and name is not None and key != f"{group}.name":
            return (f"{key} is missing: {self.reader} reads it (was it removed with ~{key}, or {group}.name={name} set "
                    f"by itself? choose the option whole with {group}={name})")
        return f"{key} is missing: {self.reader} reads it (was it removed with ~{key}?)"

    def _base_option(self, group: str, name: object) -> str:
        """The project's option of ``group`` that a preset of the user's naming ``name`` builds on: the option of
        that name, else one whose file names it (``rope.name: torch``), else the group's default."""
        options = self.groups.get(group, {})
        if name in options:
            return str(name)
        named = [option for option, keys in options.items() if name is not None and keys.get("name") == name]
        return named[0] if named else str(self.default_options.get(group) or sorted(options)[0])

    def unknown_key(self, key: str, allowed: Iterable[str] | None = None, label: str | None = None) -> str:
        """The line refusing ``key``: the closest of ``allowed`` (default: every known key), or the options that
        define it when it belongs to another option of its group (``rope.compute_dtype`` with rope=triton_v4)."""
        allowed = self.known_keys() if allowed is None else set(allowed)
        lists = f"({self.command} --cfg job lists the keys)"
        elsewhere = [o for o in self.options_with(key) if o != label]
        if elsewhere:
            group = key.partition(".")[0]
            chosen = label or (f"the {group} chosen" if group in self.groups else "this command")
            # the chosen option's own key of that kind (optim.lr with optim=muon: optim.muon_lr)
            own = {f"{group}.{k}" for k in self.groups.get(group, {}).get(label.partition("=")[2], {})} if label else ()
            close = closest(key, own) if own else None
            guess = f"; did you mean {close}?" if close else ""
            return (f"{key} is a key of {', '.join(elsewhere)} only, not of {chosen}, so nothing would read it{guess} "
                    f"{lists}")
        # a top-level name is also checked against the groups (``modle=tiny`` means the group ``model``)
        close = closest(key, (allowed | (set(self.groups) if "." not in key else set())) - {key})
        guess = f"; did you mean {close}?" if close else ""
        where = f"a key of {label}" if label else "a known key"
        return f"{key} is not {where}, so nothing would read it{guess} {lists}"

    def absent_key(self, key: str, chosen: Collection[str] = (), option: str | None = None,
                   typed: str | None = None) -> str:
        """The line for a key Hydra found absent from the composed config (``train.max_step=5``, no ``+``): a
        typo (the closest known key), a key of another option of its group, a key a config file sets elsewhere
        (an experiment's: add it with ``+``), or a setting a self-checking group reads beyond its file
        (``rope.max_seq_len``, or ``model.d_ff`` that only model=seed004 sets, as GPTConfig reads every preset's
        keys: add it with ``+``; the group refuses one it does not read). ``chosen``: the groups the command
        line chose (``rope=torch``), whose keys are then no group's left unchosen; ``option``: the option the command
        line chose for the key's group (``optim=muon``), named in the line; ``typed``: the argument as typed
        (``rope.max_seq_len=4096``), where a line names its value."""
        if key in REFUSED_KEYS:
            return REFUSED_KEYS[key]
        if key == "rope.max_seq_len" and self.config_name == "generate":  # rope=torch rope.max_seq_len=N: the run's
            return context_kept(typed or key)
        group = key.partition(".")[0]
        unchosen = group in self.groups and group not in self.required_groups and group not in self.own
        if unchosen and group not in chosen:  # a group left unchosen, whose keys the command's file sets neither
            return (f"{key}: {self.command} chooses no {group} by default, and this command chose none "
                    f"({group}=<name> chooses one: {', '.join(sorted(self.groups[group]))})")
        # another option's key is read by nothing unless every option has the same reader (any model preset's key)
        elsewhere = bool(self.options_with(key)) and group not in SHARED_READER
        if elsewhere or (key not in self.known_keys() and group not in SELF_CHECKED):
            known = option is not None and option in self.groups.get(group, {})
            return self.unknown_key(key, label=f"{group}={option}" if known else None)
        close = closest(key, self.known_keys() - {key})
        if key in self.known_keys() or not close:
            return f"{key} is not in this config: add it with +{key}=... ({self.command} --cfg job lists the keys)"
        return (f"{key} is not in this config; did you mean {close}? (a setting {group} reads but its config "
                f"leaves out is added with +{key}=...; {self.command} --cfg job lists the keys)")


def _set_by(key: str, chosen: Mapping[str, list[str]]) -> str:
    """Where a refused key came from when the command did not type it: the experiment or recipe that sets it."""
    if key not in chosen:
        return ""
    return f"; {', '.join(chosen[key])} sets it: remove it with ~{key}, or choose the option that reads it"


def _first_key(key: str, value: Any) -> str:
    """The dotted key as the user wrote it: ``foo.bar`` for ``+foo.bar=1`` (whose top-level ``foo`` is unknown)."""
    leaves = list(flatten(value)) if isinstance(value, Mapping) and value else []
    return f"{key}.{leaves[0]}" if leaves else key


def closest(key: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``key`` (a typo's intended key), or None when none is close."""
    candidates = sorted(set(candidates))
    depth = key.count(".")
    for pool in ([c for c in candidates if c.count(".") == depth], candidates):  # a typo keeps the key's depth
        found = difflib.get_close_matches(key, pool, n=1, cutoff=0.75)
        if found:
            return found[0]
    leaf = key.rsplit(".", 1)[-1]  # a known key under another parent: train.seed for the top-level seed
    elsewhere = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    return elsewhere[0] if len(elsewhere) == 1 else None


@cache
def schema(config_name: str = "config", command: str = "python -m llm.train", conf_dir: Path = CONF_DIR) -> Schema:
    """The :class:`Schema` of ``conf/<config_name>.yaml`` (read once per process)."""
    primary = conf_dir / f"{config_name}.yaml"
    own = _load(primary)
    own.pop("hydra", None)
    chosen = _defaults_groups(primary)
    groups = {g: {p.stem: _option_keys(conf_dir / g, p.stem) for p in sorted((conf_dir / g).glob("*.yaml"))}
              for g in chosen}
    global_groups = GLOBAL_GROUPS.get(config_name, ())
    files = {f"{g}/{p.stem}": p for g in global_groups for p in sorted((conf_dir / g).glob("*.yaml"))}
    global_files = {name: frozenset(k for k in flatten(_load(p)) if not k.startswith("hydra.") and k != "hydra")
                    for name, p in files.items()}
    return Schema(own=own, groups=groups, required_groups=frozenset(g for g, o in chosen.items() if o is not None),
                  global_keys=frozenset().union(*global_files.values()), command=command, global_files=global_files,
                  global_includes={name: _global_includes(p, global_groups) for name, p in files.items()},
                  default_options={g: str(o) for g, o in chosen.items() if o is not None},
                  config_name=config_name)
