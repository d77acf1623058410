"""A trained run, opened for generation: its config, its newest checkpoint, and its model.

The run dir is the training's (``config.yaml``: the resolved config; ``checkpoints/``: ``last.pt``
and ``step_*.pt``). Opening it checks what can be checked without loading weights, so a wrong path or
a run that never saved a checkpoint fails at once with one line. The model is rebuilt from the run's
own ``model``, ``rope`` and ``tokenizer`` groups; only the RoPE *kernel* may be swapped
(``rope=triton_v4``): the rotation it computes (variant, base) must be the run's, or the weights
would meet positions they were never trained on. For the same reason a ``checkpoint=`` whose own stored
config describes another model than the run's (another shape, tokenizer or rotation: another run's
weights) is refused, naming the keys (:func:`check_checkpoint_model`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import tiktoken
import torch
from omegaconf import DictConfig, OmegaConf

import rope
from llm.config_check import rope_as_typed
from llm.config_schema import (
    FUNCTION_KEYS,
    LONGER_CONTEXT,
    context_kept,
    left_out_note,
    rope_key_as_typed,
    rope_key_without_kernel,
)
from llm.data.tokenizer import get_tokenizer
from llm.errors import ConfigError, one_line
from llm.model import GPT, GPTConfig, build_model, rope_cache_len
from llm.run_files import CHECKPOINT_DIR, CONFIG_FILE
from llm.training.checkpoint import checkpoint_files, dangling_last, load_checkpoint, load_newest_checkpoint
from llm.training.outputs import holds_a_run
from llm.training.resume import another_run_s_keys
from llm.training.run_dir import lock_holder, unfinished_run

log = logging.getLogger(__name__)


def _plain(group: Mapping | None) -> dict:
    """A config group as plain dicts and lists (OmegaConf nodes compare and merge like the rest)."""
    if group is None:
        return {}
    return OmegaConf.to_container(group, resolve=True) if isinstance(group, DictConfig) else dict(group)


def _function_value(key: str, value: object) -> object:
    """``value`` of a FUNCTION_KEYS entry with the spellings of "no scaling" made one (None)."""
    if key == "scaling" and (value is None or (isinstance(value, Mapping) and value.get("type") in (None, "none"))):
        return None
    if key == "scaling" and isinstance(value, Mapping):  # unset parameters spelled out or left out: the same scaling
        return {k: v for k, v in value.items() if v is not None}
    return value


#: ``model.*`` keys that leave what the weights compute unchanged: a preset's name, and dropout (off when decoding).
MODEL_KEYS_WITHOUT_FUNCTION = ("name", "dropout", "vocab_size")


def model_function(config: Mapping) -> dict[str, object]:
    """What a config says the weights compute, as dotted keys: the model's shape (``model.*`` but
    :data:`MODEL_KEYS_WITHOUT_FUNCTION`, a key left out as :class:`GPTConfig`'s default), the tokenizer, whether
    positions are rotated (``rope=none`` or not: the kernel is free) and the rotation (:data:`FUNCTION_KEYS`,
    a key left out as the kernel's default)."""
    model, rope_group = _plain(config.get("model")), _plain(config.get("rope"))
    out: dict[str, object] = {}
    for f in fields(GPTConfig):
        if f.name not in MODEL_KEYS_WITHOUT_FUNCTION:
            out[f"model.{f.name}"] = model.get(f.name, None if f.default is MISSING else f.default)
    out["tokenizer.name"] = _plain(config.get("tokenizer")).get("name")
    name = rope_group.get("name")
    out["rope (rotates)"] = name != "none"
    if name != "none":
        try:
            defaults = {"base": 10000.0, **rope.get(name).option_defaults()}
        except Exception:  # a kernel this install lacks: its keys as written
            defaults = {"base": 10000.0}
        for key in FUNCTION_KEYS:
            out[f"rope.{key}"] = _function_value(key, rope_group.get(key, defaults.get(key)))
    return out


def check_checkpoint_model(opened: OpenedRun, checkpoint: str, named: bool = True) -> None:
    """Refuse (:class:`ConfigError`, one line naming the keys) a ``checkpoint=`` whose stored config describes
    another model than the run's (:func:`model_function`).

    Why refuse rather than take the checkpoint's config: the command builds the run's model and writes under the
    run's name (``eval_lengths/<label>.json`` in the run dir, its rotation in the label), so another run's weights
    would decode with the wrong rotation, or be recorded as this run's; a user who meant that run passes its dir as
    ``run=``. A checkpoint that differs only in the kernel, the seed or the training keys loads: the same function.
    A checkpoint that stores no config cannot be checked (loading it still checks the weights' shapes). ``named``:
    the command line named it (``checkpoint=``), else it is the newest in the run's own ``checkpoints/``.
    """
    stored = (opened.state or {}).get("config")
    if not isinstance(stored, Mapping):
        return
    mine, theirs = model_function(opened.config), model_function(stored)
    differ = [k for k in mine if mine[k] != theirs.get(k)]
    if not differ:
        return
    shown = ", ".join(f"{k}={theirs.get(k)!r} (the run: {mine[k]!r})" for k in differ)
    source = Path(checkpoint).parent.parent
    hint = f"run={source}" if (source / CONFIG_FILE).is_file() else "run=<the checkpoint's run dir>"
    if not named:  # no checkpoint= was typed: the message names the file, found in the run's checkpoints/
        raise ConfigError(f"run={opened.run_dir}: its newest checkpoint {checkpoint} holds another model than its "
                          f"{CONFIG_FILE}: {shown}; move that file out of the run's checkpoints/, or give checkpoint=")
    raise ConfigError(f"checkpoint={checkpoint} holds another model than run={opened.run_dir}: {shown}; its "
                      f"weights would run as the run's model: give {hint}, or a checkpoint of this run")


@dataclass
class OpenedRun:
    """A run dir whose config is read and whose checkpoint exists (weights not loaded yet)."""

    run_dir: Path
    config: DictConfig
    checkpoint: Path | None  # None: the newest of checkpoints/ that loads
    state: dict | None = None  # the loaded checkpoint: the config came from it, or checkpoint= named it

    @property
    def context_len(self) -> int:
        """Positions the model can attend over: its RoPE cache (``rope.max_seq_len``, default ``model.seq_len``)."""
        return rope_cache_len(self.config.model, self.config.rope)


@dataclass
class RunModel:
    model: GPT
    tokenizer: tiktoken.Encoding
    checkpoint: Path
    step: int
    rope: dict  # the rope group the model was built with


def open_run(run: str | None, checkpoint: str | None = None, purpose: str = "generate from") -> OpenedRun:
    """Check ``run=`` (and ``checkpoint=``) and read the run's config; raises :class:`ConfigError`. ``purpose``
    completes "the run dir to ..." in the line that asks for a missing ``run=`` (each command its own verb)."""
    if run in (None, ""):
        raise ConfigError(f"run= is required: the run dir to {purpose} "
                          f"({run_hint(checkpoint) or 'e.g. run=outputs/runs/<date>/<time>_torch_s0'})")
    run_dir = Path(str(run))
    if run_dir.is_file():  # a checkpoint given as run=: say how to give it, with the run dir it came from
        holder = checkpoint_run_dir(run)
        how = (f"give run={holder} checkpoint={run}" if holder is not None else
               "a checkpoint file is given as checkpoint=<file>, beside run=<its run dir>")
        raise ConfigError(f"run={run} is a file, not a run dir (a run dir holds {CONFIG_FILE} and checkpoints/); "
                          f"{how}")
    if not run_dir.is_dir():
        raise ConfigError(f"run={run} is not a directory (a run dir holds config.yaml and checkpoints/)")
    if checkpoint not in (None, ""):
        path = Path(str(checkpoint))
        if not path.is_file():
            raise ConfigError(f"checkpoint={checkpoint} is not a file (null: the newest checkpoint of the run)")
    else:
        path = None
        if not holds_a_run(run_dir):
            raise ConfigError(f"run={run} is not a run dir: it holds neither {CONFIG_FILE} nor checkpoints/ "
                              "(e.g. run=outputs/runs/<date>/<time>_torch_s0)")
        if not checkpoint_files(run_dir / "checkpoints") and (gone := dangling_last(run_dir / "checkpoints")):
            raise ConfigError(f"run={run} has no checkpoint: {run_dir / 'checkpoints' / 'last.pt'} points to {gone}, "
                              "which is missing, and no other is there; put the file back")
        if not checkpoint_files(run_dir / "checkpoints"):
            # a live process holding the dir is a run still training, not one that stopped: say to wait for it
            pid = lock_holder(run_dir)
            why = ("the run stopped before its first one" if pid is None else
                   f"the run is still training (pid {pid}) and has not saved its first one yet: wait for it")
            raise ConfigError(f"run={run} has no checkpoint: {run_dir / 'checkpoints'} holds no last.pt or step_*.pt "
                              f"({why}; train.ckpt_every=N saves one every N steps)")
    if (run_dir / CONFIG_FILE).is_file():
        config = run_config(run, run_dir / CONFIG_FILE)
        if path is None:
            return OpenedRun(run_dir, config, path)
        # a checkpoint named by hand may be another run's: read now (kept for the load) to compare its config
        opened = OpenedRun(run_dir, config, path, load_checkpoint(path, needs=("model",)))
        check_checkpoint_model(opened, str(checkpoint))
        return opened
    found_path, state = _load_state(run_dir, path)  # no config.yaml: the checkpoint carries the config too
    if "config" not in state:
        raise ConfigError(f"run={run} has no {CONFIG_FILE} and its checkpoint {found_path} holds no config")
    return OpenedRun(run_dir, run_config(run, f"its checkpoint {found_path}'s config", state["config"]), found_path,
                     state)


def run_progress(opened: OpenedRun, checkpoint: Path) -> str:
    """What to add after ``step N`` of ``checkpoint`` where the run has not completed: `` of 300, still training (pid
    123)`` (a live process holds the run dir) or `` of 3000, interrupted`` (the status its ``summary.json``
    records); empty for a completed run, a run with no summary (a checkpoint-only dir) or a checkpoint from outside
    the run's ``checkpoints/``. Why: text from a run half trained reads as the trained model's unless the command
    says whose it is."""
    if checkpoint.parent.resolve() != (opened.run_dir / CHECKPOINT_DIR).resolve():
        return ""
    if (why := unfinished_run(opened.run_dir)) is None:
        return ""
    pid, summary = why
    state = f"still training (pid {pid})" if pid is not None else str(summary["status"])
    max_steps = summary.get("max_steps")
    max_steps = max_steps if max_steps is not None else OmegaConf.select(opened.config, "train.max_steps")
    return ("" if max_steps is None else f" of {max_steps}") + f", {state}"


def checkpoint_run_dir(checkpoint: str | None) -> Path | None:
    """The run dir a checkpoint file lies in (``<dir>/checkpoints/<file>`` beside ``<dir>/config.yaml``), else None.
    Why: a user holding a checkpoint path gives it as ``run=``, or as ``checkpoint=`` alone; the model, tokenizer
    and data are the run dir's, so the refusal names the ``run=`` to give."""
    if checkpoint in (None, ""):
        return None
    path = Path(str(checkpoint))
    holder = path.parent.parent
    return holder if path.parent.name == "checkpoints" and (holder / CONFIG_FILE).is_file() else None


def run_hint(checkpoint: str | None) -> str | None:
    """What to give for a ``checkpoint=`` given without ``run=``: ``run=`` its run dir (:func:`checkpoint_run_dir`);
    None where it lies in none."""
    holder = checkpoint_run_dir(checkpoint)
    return None if holder is None else f"checkpoint={checkpoint} is in the run dir {holder}: give run={holder}"


#: The groups of a run's config that generation and evaluation read.
RUN_CONFIG_GROUPS = ("model", "rope", "data", "tokenizer", "train")


def run_config(run: str, where: Path | str, raw: object = None) -> DictConfig:
    """The run's config, read from ``where`` (a config.yaml; else ``raw``, a checkpoint's), refused in one line
    naming ``run=`` where it does not read as a run's config: it is the user's file, and YAML's or OmegaConf's
    traceback (a damaged file, an interpolation that resolves to nothing, a group missing) says less."""
    try:
        config = OmegaConf.load(where) if raw is None else OmegaConf.create(raw)
        OmegaConf.to_container(config, resolve=True)
    except Exception as e:  # YAML's parser, OmegaConf's interpolation: any failure means unreadable
        raise ConfigError(f"run={run}: {where} is damaged or unreadable ({one_line(e)})") from None
    missing = [g for g in RUN_CONFIG_GROUPS if not OmegaConf.is_dict(config) or not OmegaConf.is_dict(config.get(g))]
    if missing or "seq_len" not in config.model:
        what = f"no {missing[0]} group" if missing else "no model.seq_len"
        raise ConfigError(f"run={run}: {where} holds {what} (a run's config has {', '.join(RUN_CONFIG_GROUPS)})")
    return config


def _load_state(run_dir: Path, path: Path | None) -> tuple[Path, dict]:
    if path is not None:
        return path, load_checkpoint(path, needs=("model",))
    found = load_newest_checkpoint(run_dir / "checkpoints", needs=("model",))
    if found is None:  # removed since open_run looked
        raise ConfigError(f"run={run_dir} has no checkpoint in {run_dir / 'checkpoints'}")
    return found


def refuse_rope_keys_without_a_kernel(override: Mapping | None, config_name: str = "generate") -> None:
    """``rope.<key>=...`` with no ``rope=<name>``: one line saying what ``rope`` does here
    (:func:`llm.config_schema.rope_key_without_kernel`); a command that reads only ``rope.name`` would ignore it.
    Generation's ``rope.max_seq_len`` is left to :func:`rope_for_generation`, whose line names the run's context."""
    if override and "name" not in override:
        for key, value in _plain(override).items():
            if config_name == "generate" and key == "max_seq_len":
                continue
            if (line := rope_key_without_kernel(key, value, config_name, composed=True)) is not None:
                raise ConfigError(line)


def _task_overrides(cfg: Mapping) -> list[str]:
    """Hydra's task overrides: those of the running command, else the ``hydra`` node a
    ``compose(..., return_hydra_config=True)`` holds; empty when neither is there."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    node = cfg.get("hydra")
    return [str(o) for o in OmegaConf.select(node, "overrides.task") or []] if isinstance(node, DictConfig) else []


def command_line_rope_preset(cfg: Mapping) -> str | None:
    """The ``rope=<preset>`` the command line chose (``triton_v4_full``), None if none. Why: a preset names a kernel
    and a rotation, and a message about the kernel must name what the user typed, not only the kernel's name."""
    for item in _task_overrides(cfg):
        key, _, value = item.partition("=")
        if key.lstrip("+") == "rope" and value:
            return value
    return None


def command_line_rope_keys(cfg: Mapping) -> frozenset[str]:
    """The ``rope`` keys the command line set itself (``rope.variant=partial`` -> ``variant``), from Hydra's task
    overrides (:func:`_task_overrides`).

    Why: a composed ``rope`` group cannot tell a value the preset brought (``rope=torch``'s ``variant: partial``,
    which defers to the run's rotation) from the same value typed on the command line, which asks for that rotation
    and must be refused when the run's is another (:func:`rope_for_generation`)."""
    keys = set()
    for item in _task_overrides(cfg):
        key = str(item).partition("=")[0]
        if key.startswith("~"):  # a deletion asks for nothing: the kernel's default, deferring to the run's
            continue
        key = key.lstrip("+")
        if key.startswith("rope."):
            keys.add(key.split(".")[1])
    return frozenset(keys)


def rope_for_generation(run_rope: Mapping, override: Mapping | None, device: torch.device,
                        context: int | None = None, explicit: Collection[str] = (), preset: str | None = None) -> dict:
    """The ``rope`` group to build: the run's, or ``override``'s implementation (and its own options,
    such as ``compute_dtype``) computing the run's rotation (variant, base, ...: always the run's).
    ``context``: the run's positions (its ``rope.max_seq_len`` or ``model.seq_len``), which an override may
    restate; ``explicit``: the rope keys the command line set itself (:func:`command_line_rope_keys`).

    Refuses, naming the key, an override that asks for another rotation than the run's: a preset's value other
    than the kernel's default (``rope=triton_v4_full`` on a partial run) or any value set explicitly
    (``rope=torch rope.variant=partial`` on a full run: the default, yet asked for); a switch to or from ``none``;
    and a kernel that cannot run on ``device``, named by ``preset``, the ``rope=`` the command line typed
    (:func:`command_line_rope_preset`), where that is not the kernel's own name."""
    run_rope, override = _plain(run_rope), _plain(override)
    refuse_rope_keys_without_a_kernel(override)
    asked_len = override.get("max_seq_len", run_rope.get("max_seq_len"))
    if asked_len not in (run_rope.get("max_seq_len"), context):  # it would be dropped: the context is the run's
        raise ConfigError(context_kept(rope_key_as_typed("max_seq_len", asked_len), context,
                                       run_rope.get("max_seq_len")))
    if "name" not in override:  # no kernel chosen (a rope.max_seq_len restating the run's context at most)
        chosen = run_rope
        if chosen["name"] not in rope.available():  # a plugin's kernel not installed here: another one computes it
            raise ConfigError(f"the run was trained with rope={chosen['name']}, which is not registered here"
                              f"{left_out_note(chosen['name'])}: give rope=<one that is> to compute its rotation "
                              f"with another kernel ({', '.join(n for n in rope.available() if n != 'none')})")
    else:
        name, run_name = override.get("name"), run_rope["name"]
        if name not in rope.available():
            raise ConfigError(f"rope={name} is not registered{left_out_note(name)}; allowed: "
                              f"{', '.join(rope.available())}")
        if "none" in (name, run_name) and name != run_name:
            raise ConfigError(f"rope={name}: the run was trained with rope={run_name}; a RoPE override swaps the "
                              "kernel, not the function (rope=none rotates nothing)")
        options = rope.get(name).option_defaults()
        for key in override:  # +rope.compute_dtpye=...: a key no kernel reads, refused as a training run refuses it
            if key not in options and key not in ("name", "base", "max_seq_len"):
                raise ConfigError(f"{rope_key_as_typed(key, override[key])}: {name} has no option {key!r} (its "
                                  f"options: {', '.join(options)})")
        defaults = {"base": 10000.0, **options}
        for key in FUNCTION_KEYS:  # a preset's default rotation defers to the run's; another one is refused
            asked, trained, default = (_function_value(key, d.get(key, defaults.get(key)))
                                       for d in (override, run_rope, defaults))
            # a key typed on the command line is asked for even at the default: never ignored silently
            if asked != trained and (key in explicit or asked != default):
                pointer = f"; {LONGER_CONTEXT}" if key == "scaling" else ""
                raise ConfigError(f"{rope_key_as_typed(key, asked)}: the run was trained with "
                                  f"{rope_key_as_typed(key, trained)}; a RoPE override may change the kernel, not the "
                                  f"rotation{pointer}")
        chosen = {"name": name, **{k: v for k, v in run_rope.items() if k in options or k in ("base", "max_seq_len")},
                  **{k: v for k, v in override.items() if k in options and k not in FUNCTION_KEYS}}
    reason = rope.get(chosen["name"]).unavailable_reason(device)
    if reason:
        raise ConfigError(f"{rope_as_typed(chosen['name'], preset)}: {reason}")
    return chosen


def run_tokenizer(opened: OpenedRun) -> tiktoken.Encoding:
    """The tokenizer the run was trained with (``cl100k_base`` works offline)."""
    return get_tokenizer(opened.config.tokenizer.name)


def with_checkpoint(opened: OpenedRun) -> OpenedRun:
    """``opened`` with its checkpoint read (the one named, else the run's newest that loads, checked to hold the
    run's model); as it is where it holds one already."""
    if opened.state is not None:
        return opened
    path, state = _load_state(opened.run_dir, opened.checkpoint)
    loaded = OpenedRun(opened.run_dir, opened.config, path, state)
    check_checkpoint_model(loaded, str(path), named=False)
    other = another_run_s_keys(path, state, opened.run_dir, CONFIG_FILE)
    if other:  # the same model of another run (seed, data, ...), put there by hand: recorded as this run's
        raise ConfigError(f"run={opened.run_dir}: its newest checkpoint {path} holds another run than its "
                          f"{CONFIG_FILE}: {other}; move that file out of the run's checkpoints/, or give "
                          "checkpoint=")
    return loaded


def load_run_model(opened: OpenedRun, rope_cfg: Mapping, device: torch.device,
                   enc: tiktoken.Encoding | None = None) -> RunModel:
    """Build the run's model with ``rope_cfg`` and load the checkpoint's weights onto ``device``."""
    cfg = opened.config
    enc = enc or run_tokenizer(opened)
    loaded = with_checkpoint(opened)
    path, state = loaded.checkpoint, loaded.state
    model = build_model(cfg.model, rope_cfg, enc.n_vocab)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as e:
        raise ConfigError(f"checkpoint {path} does not fit the run's model config ({one_line(e)})") from None
    model.to(device).eval()
    log.info(f"loaded {path} (step {state.get('step')})")
    return RunModel(model, enc, path, int(state.get("step", 0)), dict(rope_cfg))
