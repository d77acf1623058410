"""Refuse a bad configuration before any work, with one line naming the key and what is allowed.

This module only orchestrates: each config group is validated by the module that builds it
(``llm.model`` the model, ``rope`` the RoPE, ``llm.data`` data and tokenizer, ``llm.optim`` the
optimizers, the trainer its ``train`` group); here their errors become :class:`ConfigError`, and the
checks that need two groups at once (the RoPE cache against the sequence length, the memory a step
needs against the device, the RoPE implementation against the device) are made. :func:`check_config_keys`
refuses a key no module would read (``+train.max_step=5``), against the keys the config files define.
"""

from __future__ import annotations

import logging
import netrc
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

import rope
from llm.checks import positive_int
from llm.config_keys import as_written
from llm.config_schema import CONF_DIR, left_out_note, schema
from llm.data import check_data_config
from llm.errors import ConfigError, one_line
from llm.model import check_model_config, rope_cache_len
from llm.optim import check_optim_config
from llm.training.runtime import DEVICES_ALLOWED, check_peak_tflops, resolve_device
from llm.training.trainer import check_train_config

log = logging.getLogger(__name__)

__all__ = ["ConfigError", "check_config_keys", "inert_rope_note", "validate_config"]

#: rope.check_args's argument names, as the config keys a user sets.
_ROPE_KEYS = {"head_dim": "model.n_embd/model.n_head", "max_seq_len": "rope.max_seq_len"}


def _as_config_error(group_check, *args):
    """Run one group's own check; its ValueError/TypeError becomes a ConfigError (same one-line message)."""
    try:
        return group_check(*args)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from None


def _check_rope(cfg: DictConfig, head_dim: int, device: torch.device) -> None:
    r = cfg.rope
    if r.name not in rope.available():
        raise ConfigError(f"rope.name={r.name!r} is not registered{left_out_note(r.name)}; allowed: "
                          f"{', '.join(rope.available())}")
    _check_preset_names_its_option(r.name)
    # rope_cache_len reads a falsy value as "unset" (0 would silently become model.seq_len) and compares the rest
    # with model.seq_len (a string fails there with a traceback): so only null or a positive integer gets that far.
    positive_int(r.get("max_seq_len"), "rope.max_seq_len", allow_none=True,
                 must_be=f"a positive integer, at least model.seq_len={cfg.model.seq_len} (the RoPE cache's rows), "
                         "or null for model.seq_len")
    cache = rope_cache_len(cfg.model, r)
    if cache < cfg.model.seq_len:
        raise ConfigError(f"model.seq_len={cfg.model.seq_len} exceeds the RoPE cache rope.max_seq_len={cache}")
    options = {k: v for k, v in r.items() if k not in ("name", "base", "max_seq_len")}
    base = r.get("base", 10000.0)
    try:
        rope.check_args(r.name, head_dim, cache, base, **options)
    except (ValueError, TypeError) as e:  # a RopeArgumentError, or an implementation's own check_options' error
        raise ConfigError(_rope_error_line(r, e, head_dim, cache)) from None
    reason = rope.get(r.name).unavailable_reason(device)
    if reason:
        raise ConfigError(f"{rope_as_typed(r.name, _chosen_option('rope'))}: {reason}")
    # A constructor may check an option check_options does not (or there is none): a build, as the model's, raises
    # it here, before the run dir and the data, not after them; the tables it allocates are the size of the model's.
    try:
        with torch.device("cpu"):
            rope.build(r.name, head_dim, cache, base, **options)
    except (ValueError, TypeError) as e:
        raise ConfigError(_rope_error_line(r, e, head_dim, cache)) from None


def _rope_error_line(r: DictConfig, exc: Exception, head_dim: int, cache: int) -> str:
    """The one line refusing the rope settings ``exc`` (from rope.check_args or a build) is about.

    A :class:`rope.RopeArgumentError` names its argument, given as the config key a user sets; an option the
    implementation does not take (refused as a TypeError, for a key set that is none of its options) is said in
    this command's words, naming the preset typed (:func:`rope_as_typed`). Any other ValueError/TypeError (an
    implementation's own check, raised as Python's checks are) names ``rope.<key>=value`` where its message names
    the option (the earliest named: ``block_size must be ...``) or quotes an option's string value
    (``int('abc')``), else the rope choice typed (``rope=<preset>: ...``): the message is all there is to go by."""
    message = one_line(exc)
    given = {k: v for k, v in r.items() if k not in ("name", "base", "max_seq_len")}
    defaults = rope.get(r.name).option_defaults()
    if isinstance(exc, rope.RopeArgumentError):
        key = _ROPE_KEYS.get(exc.argument, f"rope.{exc.argument}")
        value = {"head_dim": head_dim, "max_seq_len": cache}.get(exc.argument, OmegaConf.select(r, exc.argument))
        if isinstance(exc, TypeError) and exc.argument in given and exc.argument not in defaults:  # unknown
            return (f"{key}={value}: {rope_as_typed(r.name, _chosen_option('rope'))} has no option "
                    f"{exc.argument!r} (its options: {', '.join(defaults) or 'none'})")
        return f"{key}={value}: {message}"
    options = {**defaults, **given}
    found = [(m.start(), -len(k), k) for k in options if (m := re.search(rf"\b{re.escape(k)}\b", message))]
    if not found:
        found = [(message.index(repr(v)), 0, k) for k, v in given.items()
                 if isinstance(v, str) and v and repr(v) in message]
    if not found:
        return f"{rope_as_typed(r.name, _chosen_option('rope'))}: {message}"
    key = min(found)[2]
    return f"rope.{key}={OmegaConf.select(r, key, default=options[key])}: {message}"


def _check_preset_names_its_option(name: str) -> None:
    """Refuse ``rope=<option>`` whose config file names another implementation while ``<option>`` is one itself.

    Why: a plugin registered under the name of a project's preset (``torch_full``, which trains ``rope=torch``)
    has its config file in ``--config-dir`` lose to that preset, so the command would train the preset's
    implementation, not the plugin, and say nothing. And ``rope.name=<impl>`` typed by itself keeps the chosen
    preset's other keys (``rope.compute_dtype`` of rope=torch), so it is refused naming ``rope=<impl>``, not taken
    for a plugin's config file."""
    option = _chosen_option("rope")
    if option is None or option == name:
        return
    preset = CONF_DIR / "rope" / f"{option}.yaml"
    trains = OmegaConf.load(preset).get("name") if preset.is_file() else None
    if _typed("rope.name") and trains not in (None, name):  # set by itself: the preset's other keys stay
        raise ConfigError(f"rope.name={name} set by itself keeps the other keys of rope={option} "
                          f"(conf/rope/{option}.yaml); choose the implementation whole with rope={name} (then "
                          "any rope.<key>= to change)")
    if option not in rope.available():
        return
    if (CONF_DIR / "rope" / f"{option}.yaml").is_file():
        raise ConfigError(f"rope={option} is the project's preset conf/rope/{option}.yaml, which trains "
                          f"rope.name={name}; the implementation registered as {option} is not used, as a config "
                          f"file of that name in --config-dir does not replace the preset: register it under "
                          f"another name")
    raise ConfigError(f"rope={option}: its config file rope/{option}.yaml trains rope.name={name}, while {option} is "
                      f"a registered implementation of its own: name the file after the implementation it trains")


def rope_as_typed(name: str, preset: str | None) -> str:
    """The RoPE choice as this command's user types it, to put before what ``rope`` says of implementation
    ``name``: ``rope=<preset>`` with the implementation where the preset is not named after it
    (``rope=triton_v4_full (implementation triton_v4)``), else ``rope=<name>``; ``preset``: the ``rope=`` the
    command line chose, None when it chose none.

    Why here: ``rope`` names an implementation by its registered name and knows nothing of this command line,
    so a refusal (``unavailable_reason``: ``triton_v4 runs on a CUDA GPU, ...; use the torch implementation``)
    reads ``rope=triton_v4_full (implementation triton_v4): triton_v4 runs on ...``: what the user typed, then
    rope's own words, never reworded (a change there cannot break this line)."""
    return f"rope={preset} (implementation {name})" if preset and preset != name else f"rope={name}"


def check_jobs_per_gpu(per_gpu: object) -> int:
    """``sweep.jobs_per_gpu`` checked (a positive integer), for the sweep's launcher and for every run alike."""
    return positive_int(per_gpu, "sweep.jobs_per_gpu")


def _typed(key: str) -> bool:
    """Whether the command line set ``key`` itself (``rope.name=x``, ``+rope.name=x``, ``++rope.name=x``); False
    outside a Hydra command."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return any(o.lstrip("+").partition("=")[0] == key for o in as_written(HydraConfig.get().overrides.task))


def _chosen_option(group: str) -> str | None:
    """The option Hydra composed for ``group`` (``rope=triton_v4_full``), None outside a Hydra command."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.choices.get(group) if HydraConfig.initialized() else None


def inert_rope_note(cfg: DictConfig) -> str | None:
    """A one-line note for a ``rope=none`` run given rotation settings (``rope.variant=full``): it rotates nothing,
    so they change nothing. A note, not a refusal: a sweep's settings apply to its ``rope=none`` control too
    (``+experiment=length_finetune`` fine-tunes every rope with YaRN)."""
    r = cfg.get("rope") or {}
    if r.get("name") != "none":
        return None
    defaults = {**rope.get("none").option_defaults(), "base": 10000.0}  # rope.build's own defaults
    inert = [f"rope.{k}={r[k]}" for k in ("variant", "base", "layout", "rotary_dim")
             if r.get(k, defaults[k]) != defaults[k]]
    scaling = (r.get("scaling") or {}).get("type")
    if scaling not in (None, "none"):
        inert.append(f"rope.scaling.type={scaling}")
    if not inert:
        return None
    return f"rope=none rotates nothing: {', '.join(inert)} change{'s' if len(inert) == 1 else ''} nothing in this run"


def _check_fused_loss(cfg: DictConfig, device: torch.device) -> None:
    """Liger's fused loss is Liger's Triton kernels: where ``rope=liger`` runs (CUDA, or the CPU's interpreter)."""
    if cfg.train.get("fused_linear_ce") and rope.get("liger").unavailable_reason(device) is not None:
        raise ConfigError(f"train.fused_linear_ce=true runs Liger-Kernel's Triton kernels: on a CUDA GPU, or on the "
                          f"CPU with TRITON_INTERPRET=1 set (slow); not on {device}")


def _check_stop_at_step(cfg: DictConfig) -> None:
    """``train.stop_at_step`` must come before ``train.max_steps``: a run ends at max_steps first, so the stop would
    never happen and the run would not end where the user asked."""
    stop, steps = cfg.train.get("stop_at_step"), cfg.train.max_steps
    if stop is not None and stop >= steps:
        raise ConfigError(f"train.stop_at_step={stop} must be below train.max_steps={steps}: it stops a run early "
                          "(with a checkpoint) so that it can be resumed to train.max_steps; leave it out to train "
                          f"all {steps} steps")


def _check_cache_dir(cfg: DictConfig) -> None:
    """The tokenized-data cache must be a directory this process can create. One it may not write (a shared,
    read-only cache) is a warning, not a refusal: a cache already built there is only read (without a lock), and
    one that must be built is refused by the build in one line naming the file."""
    value = cfg.get("cache_dir")
    # The data cache takes cache_dir as given (null would build into a folder named "None"), so only a path passes.
    if not isinstance(value, str) or not value.strip():
        # an empty $ROPELAB_CACHE reaches here as the default: name the variable, since the user typed no cache_dir
        if "ROPELAB_CACHE" in os.environ and value == os.environ["ROPELAB_CACHE"]:
            raise ConfigError(f"cache_dir={value!r} (from $ROPELAB_CACHE, its default) must be a directory path; set "
                              "ROPELAB_CACHE to a directory, or unset it for ~/.cache/ropelab")
        raise ConfigError(f"cache_dir={value!r} must be a directory path; leave cache_dir out for the default "
                          "($ROPELAB_CACHE, else ~/.cache/ropelab)")
    path = os.path.expanduser(value)
    try:
        os.makedirs(path, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as e:
        raise ConfigError(f"cache_dir={path}: cannot create it ({e.strerror}); set cache_dir= or $ROPELAB_CACHE to "
                          "a writable directory") from None
    if not writable:
        log.warning(f"cache_dir={path} is not writable: only data already tokenized there can be read (a build there "
                    "is refused); set cache_dir= or $ROPELAB_CACHE to a writable directory to build")


#: wandb's run modes a config may name (``logger.wandb.mode``; its default is ``$WANDB_MODE``, else offline).
WANDB_MODES = ("online", "offline", "disabled")
#: wandb's older name for offline, still a value of ``WANDB_MODE`` that wandb itself accepts.
WANDB_MODE_ALIASES = ("dryrun",)
WANDB_MISSING = "logger=wandb needs the wandb package, which cannot be imported"


def _optional_str(wcfg: Mapping, key: str, nonempty: bool = False) -> None:
    """``logger.wandb.<key>`` as wandb.init takes it: a string (or null unless ``nonempty``), never a list."""
    value = wcfg.get(key)
    if value is None and not nonempty:
        return
    if not isinstance(value, str) or not value.strip():
        allowed = "a non-empty string" if nonempty else "a non-empty string or null"
        raise ConfigError(f"logger.wandb.{key}={value!r} must be {allowed}")


def _check_wandb_fields(wcfg: Mapping) -> None:
    """wandb.init validates these only after the data and the model are built (a traceback), and takes a string as
    a list of one-letter tags: so their types are checked here."""
    _optional_str(wcfg, "project", nonempty=True)
    for key in ("entity", "group"):
        _optional_str(wcfg, key)
    tags = wcfg.get("tags")
    if isinstance(tags, str):  # a string is refused, not taken as one tag: what was meant cannot be known
        raise ConfigError(f"logger.wandb.tags={tags!r} must be a list of strings, e.g. logger.wandb.tags=[{tags}]")
    if tags is not None and (not isinstance(tags, Sequence) or not all(isinstance(t, str) and t for t in tags)):
        shown = list(tags) if isinstance(tags, Sequence) else tags
        raise ConfigError(f"logger.wandb.tags={shown!r} must be a list of non-empty strings, e.g. "
                          "logger.wandb.tags=[baseline]")
    if wcfg.get("mode", "offline") != "disabled":  # wandb's own limits, where wandb.init is called
        _check_wandb_names(wcfg.get("project"), tags)


#: Characters wandb refuses in a project name, and its longest project name and tag.
WANDB_PROJECT_FORBIDDEN, WANDB_PROJECT_MAX, WANDB_TAG_MAX = "/\\#?%:", 128, 64


def _check_wandb_names(project: object, tags: object) -> None:
    """A project name or tag wandb.init refuses (after the data and the model are built, with a traceback)."""
    if isinstance(project, str):
        bad = "".join(c for c in WANDB_PROJECT_FORBIDDEN if c in project)
        if len(project) > WANDB_PROJECT_MAX or bad:
            shown = project if len(project) <= 60 else project[:40] + "..."
            raise ConfigError(f"logger.wandb.project={shown!r}: wandb allows at most {WANDB_PROJECT_MAX} characters, "
                              f"none of {' '.join(WANDB_PROJECT_FORBIDDEN)}"
                              + (f" (found {' '.join(bad)})" if bad else f" (it has {len(project)})"))
    for tag in tags if isinstance(tags, Sequence) and not isinstance(tags, str) else ():
        if isinstance(tag, str) and len(tag) > WANDB_TAG_MAX:
            raise ConfigError(f"logger.wandb.tags: {tag[:20]!r}... is {len(tag)} characters; wandb allows tags of "
                              f"1 to {WANDB_TAG_MAX}")


def _import_wandb() -> ModuleType:
    """wandb, imported up front: a missing or broken install (protobuf) fails here in one line, not after the data
    and the model are built."""
    try:
        import wandb
    except Exception as e:  # a broken install raises more than ImportError (protobuf's TypeError, for one)
        why = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"{WANDB_MISSING} ({type(e).__name__}{': ' + why if why else ''}); install it with "
                          "`pip install wandb`, or run without a tracker with logger=none") from None
    return wandb


def _netrc_has_wandb_key() -> bool:
    """A ``.netrc`` entry for the wandb server (``$WANDB_BASE_URL``, else api.wandb.ai), as ``wandb login`` writes
    it: the fallback for a wandb release whose own reader has moved."""
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    hosts = {urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc, "api.wandb.ai"}
    try:
        entries = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return False
    return any((entries.authenticators(h) or (None, None, None))[2] for h in hosts)


def _wandb_key_configured() -> bool:
    """Whether wandb.init would find an API key, looked up offline and without side effects.

    wandb.login(prompt=False) answers False whenever $WANDB_MODE is offline (a command's explicit online mode
    would be refused) and rewrites wandb's settings files; wandb.api.api_key is deprecated and prints so. So this
    reads what wandb.init reads: WANDB_API_KEY, an identity token file, .netrc (wandb's own reader, which knows its
    server's address), wandb's settings files."""
    key = os.environ.get("WANDB_API_KEY")
    try:
        from wandb.sdk import wandb_setup
        from wandb.sdk.lib.wbauth import check_api_key, read_netrc_auth
    except ImportError:  # another wandb's layout
        return bool(key or os.environ.get("WANDB_IDENTITY_TOKEN_FILE")) or _netrc_has_wandb_key()
    if key:
        problem = check_api_key(key)  # its format: wandb.init would refuse a malformed one with a traceback
        if problem:
            raise ValueError(f"WANDB_API_KEY invalid: {problem}")
        return True
    if os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    settings = wandb_setup.singleton().settings
    return bool(read_netrc_auth(host=settings.base_url) or settings.api_key)


def _check_wandb_login() -> None:
    """Online mode needs an API key, and wandb finds none only at wandb.init, after the data and model work."""
    try:
        found = _wandb_key_configured()
    except Exception as e:  # a malformed key in .netrc (AuthenticationError): wandb's own line names what is wrong
        raise ConfigError(f"logger.wandb.mode=online: {str(e).splitlines()[0] if str(e) else type(e).__name__}; "
                          "fix the key (`wandb login --relogin`), or use logger.wandb.mode=offline") from None
    if not found:
        raise ConfigError("logger.wandb.mode=online needs a wandb API key and none is configured: run `wandb login` "
                          "or set WANDB_API_KEY, or use logger.wandb.mode=offline (`wandb sync` the run later)")


def _check_logger(cfg: DictConfig) -> None:
    """The tracker's settings, typed as wandb.init takes them (it would refuse them after the data and model work)."""
    logger = cfg.get("logger") or {}
    wcfg = logger.get("wandb") or {}
    mode = wcfg.get("mode", "offline")
    if mode not in WANDB_MODES + WANDB_MODE_ALIASES:
        env = os.environ.get("WANDB_MODE")
        source = " (from $WANDB_MODE, its default)" if env is not None and env == mode else ""
        raise ConfigError(f"logger.wandb.mode={mode!r}{source}; allowed: {', '.join(WANDB_MODES)} (or dryrun, "
                          "wandb's old name for offline)")
    if logger.get("name") == "wandb":
        _check_wandb_fields(wcfg)


def _check_tracker_ready(cfg: DictConfig) -> None:
    """logger=wandb: wandb imports and, online, has an API key (last of the checks: importing wandb takes a second,
    and a typo elsewhere is reported without waiting for it)."""
    logger = cfg.get("logger") or {}
    mode = (logger.get("wandb") or {}).get("mode", "offline")
    if logger.get("name") != "wandb" or mode == "disabled":  # the tracker neither imports wandb nor logs in
        return
    _import_wandb()
    if mode == "online":
        _check_wandb_login()


def _check_sweep_name(cfg: DictConfig) -> None:
    """``sweep.name`` names the sweep's dir and a run's wandb group, which must be a string (a number reads as one)."""
    name = (cfg.get("sweep") or {}).get("name", "default")
    if isinstance(name, bool) or not isinstance(name, (str, int)) or str(name).strip() == "":
        raise ConfigError(f"sweep.name={name!r} must be a non-empty name (a string)")


def _check_device_type(value: object) -> None:
    """``device=`` must be a name (``resolve_device`` checks which): ``device=null`` was shown as the string
    ``'None'``."""
    if not isinstance(value, str):
        raise ConfigError(f"device={value!r} must be a device name; allowed: {DEVICES_ALLOWED}")


def device_memory_bytes(device: torch.device) -> int:
    """The memory a run on ``device`` can use at most: the GPU's, or the machine's RAM on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _check_memory(cfg: DictConfig, model_cfg, device: torch.device, world_size: int) -> None:
    """Refuse a step that cannot fit the device (e.g. model.seq_len=100000 would run, then fail to allocate).
    The T x T scores count where attention keeps them: SDPA's math kernel, which a CPU also takes for attention
    dropout; its fused causal kernel (masked or not, with a backward) holds one row block at a time."""
    dense = cfg.train.get("attention", "auto") == "math" or (device.type == "cpu" and model_cfg.dropout > 0)
    per_rank = cfg.train.batch_size // world_size
    need, have = model_cfg.training_memory_bytes(per_rank, dense), device_memory_bytes(device)
    if need > have:
        raise ConfigError(f"model.seq_len={cfg.model.seq_len} with train.batch_size={cfg.train.batch_size} needs at "
                          f"least {need / 2**30:.1f} GiB for one training step, more than the "
                          f"{have / 2**30:.1f} GiB of {device}; lower model.seq_len or train.batch_size")


def _hydra_runtime(cfg: DictConfig, key: str) -> object:
    """Hydra's ``runtime.<key>`` of the command (``choices``, ``config_sources``, ``cwd``) as plain values: from a
    sweep's config, else from the running Hydra job; None outside a Hydra command."""
    from hydra.core.hydra_config import HydraConfig

    value = OmegaConf.select(cfg, f"hydra.runtime.{key}", default=None)
    if value is None and HydraConfig.initialized():
        value = OmegaConf.select(HydraConfig.get().runtime, key, default=None)
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def _command_choices(cfg: DictConfig) -> Mapping | None:
    """The config groups the command chose (Hydra's ``runtime.choices``): from a sweep's config, else from the
    running Hydra job; None outside a Hydra command (then every experiment's and recipe's keys count as known)."""
    return _hydra_runtime(cfg, "choices")


def shadowed_preset_line(choices: Mapping, sources: Sequence[Mapping], cwd: str = ".") -> str | None:
    """The line refusing a chosen option whose config file more than one directory of Hydra's search path holds
    (``--config-dir=DIR model=small`` with a ``DIR/model/small.yaml`` of the user's own), else None.

    Why: Hydra takes the first file of a name in its search path, and the project's ``conf/`` comes before
    ``--config-dir`` and ``hydra.searchpath``: the user's own preset was silently left out and the project's preset
    of that name trained in its place. A registered RoPE implementation's name is left to
    :func:`_check_preset_names_its_option`, which says what to do with a plugin."""
    dirs = list(dict.fromkeys(Path(cwd, str(s["path"])).resolve() for s in sources
                              if s.get("schema") == "file" and s.get("path")))
    for group, option in choices.items():
        if not isinstance(option, str) or (group == "rope" and option in rope.available()):
            continue
        found = [d / group / f"{option}.yaml" for d in dirs if (d / group / f"{option}.yaml").is_file()]
        if len(found) > 1:
            return (f"{group}={option} composes {found[0]}, not {', '.join(map(str, found[1:]))}: Hydra takes the "
                    f"first {group}/{option}.yaml of its search path, and {found[0].parent.parent} comes first; give "
                    f"your file a name of its own ({group}/my_{option}.yaml) and choose it with {group}=my_{option}")
    return None


def _check_shadowed_presets(cfg: DictConfig, choices: Mapping | None) -> None:
    """Refuse an option of ``choices`` (:func:`_command_choices`) whose file in a config dir of the user's is hidden
    by another of that name (see :func:`shadowed_preset_line`); nothing outside a Hydra command."""
    sources = _hydra_runtime(cfg, "config_sources")
    if choices and sources and (line := shadowed_preset_line(choices, sources, _hydra_runtime(cfg, "cwd") or ".")):
        raise ConfigError(line)


def check_config_keys(cfg: DictConfig, config_name: str = "config", command: str = "python -m llm.train") -> None:
    """Refuse a chosen option hidden by another file of its name in the search path (:func:`shadowed_preset_line`),
    a key no config file defines (added with ``+``, nothing would read it) or one a run reads that was removed
    (``~``), naming it and the closest known key. Checks the command's composed config against the keys of its
    primary config (``config_name``: llm.train's, ``generate``, ``eval_lengths``): a resumed run's saved config
    may hold keys of an older version, which it keeps."""
    choices = _command_choices(cfg)
    _check_shadowed_presets(cfg, choices)
    problems = schema(config_name, command).problems(cfg, choices)
    if problems:
        raise ConfigError(problems[0])


def validate_config(cfg: DictConfig, world_size: int = 1) -> None:
    """Every check a run needs before its first piece of work (data, model, run dir contents)."""
    seed = cfg.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed!r} must be an integer in [0, 2**32 - 1] (what numpy and torch seed with)")
    _check_device_type(cfg.get("device", "auto"))
    device = resolve_device(str(cfg.get("device", "auto")))
    model_cfg = _as_config_error(check_model_config, cfg.model)
    _as_config_error(check_train_config, cfg.train, world_size, cfg.data)
    _check_stop_at_step(cfg)
    _check_fused_loss(cfg, device)
    _as_config_error(check_peak_tflops, cfg.train.get("peak_tflops", "auto"))
    _check_cache_dir(cfg)
    _check_sweep_name(cfg)
    _check_logger(cfg)
    check_jobs_per_gpu((cfg.get("sweep") or {}).get("jobs_per_gpu", 1))  # as hydra/launcher=gpus reads it
    _as_config_error(check_optim_config, cfg.optim)
    _check_rope(cfg, model_cfg.head_dim, device)
    _as_config_error(check_data_config, cfg.data, cfg.tokenizer.name)
    _check_memory(cfg, model_cfg, device, world_size)
    _check_tracker_ready(cfg)
