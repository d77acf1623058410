"""Resume continues the run that was saved, not whatever the resume command happens to compose.

The README's resume line (``hydra.run.dir=<run dir> train.resume=auto``) carries none of the
original overrides, so the composed config is mostly defaults. The checkpoint holds the run's own
config: that is the truth. Keys the user names on the resume command line are applied only when
they cannot change what is being trained (other eval/log/checkpoint/sample intervals,
the logger, the device); naming any other changed key is refused, listing the keys, because the
result would be neither the old run nor a new one. The logger is the run's own unless named: a run
started with ``logger=none`` or ``logger.wandb.mode=online`` and resumed by the printed command
(which names neither) would otherwise switch to the default offline wandb for its second half, a
tracker run holding only the steps after the resume. A key the saved config lacks (a run older than
the key) takes the resume command's value, its default unless named: ``train.sample_every`` is off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from llm.config_keys import BOOKKEEPING_KEYS, covered, flatten
from llm.errors import ResumeError

#: Keys that belong to one invocation, never to the run: taken from the resume command, not the checkpoint.
PER_INVOCATION = ("train.resume", "train.stop_at_step", "device", "cache_dir")
#: Keys a resume may change when asked to: they change when and where things happen, not what is trained.
SAFE_TO_CHANGE = ("train.eval_every", *BOOKKEEPING_KEYS, "train.skip_nonfinite", "train.compile", "sweep", "logger")
#: Keys refused because they change what the val metrics are measured on, not what is trained.
MEASURING = ("train.eval_batches ",)
#: Keys refused because they change how the run's random numbers are drawn (see :func:`draws_otherwise`).
DRAWING = ("train.compile ",)


def draws_otherwise(key: str, old: Mapping) -> bool:
    """Whether changing ``key`` on a resume of the run saved as ``old`` (flattened) would draw its random numbers
    otherwise: ``train.compile`` with ``model.dropout`` > 0 (a compiled graph draws its dropout masks with
    Inductor's own generator, eager PyTorch with the global one). The steps after the resume would then be another
    draw than the one the run's seed gives, and no longer share their masks with that seed's runs of other RoPE
    implementations, which the report pairs it with; without dropout the change is only rounding, as a device's."""
    return key == "train.compile" and float(old.get("model.dropout") or 0.0) > 0


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The config keys (or groups) a list of Hydra command-line overrides sets."""
    keys = []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        keys.append(key.split("@", 1)[0])
    return keys


def resumed_group(state: Mapping, group: str, overrides: Iterable[str]) -> str:
    """The tracker group a resumed run logs under: the one saved in its checkpoint, unless the resume
    command names ``sweep`` (then ``group``, derived from the command as for a new run).

    Why: the group of a sweep's job is its sweep's name and directory, which a resume run as a single
    run (the printed ``hydra.run.dir=<job dir> train.resume=auto``) cannot derive; a tracker run resumed
    under another group leaves its sweep's group on the dashboard. Checkpoints older than the saved
    group keep ``group``.
    """
    saved = state.get("wandb_group")
    asked = any(covered(key, ("sweep",)) for key in override_keys(overrides))
    return group if saved is None or asked else saved


def _other_option(key: str, old: Mapping, new: Mapping) -> bool:
    """Whether ``key`` belongs to a config group whose option (its ``name``) the run chose otherwise than the resume
    command composed: the composed option's keys are not the run's (``data.max_files`` is no setting of
    ``data=text_files``, ``optim.lr`` none of ``optim=muon``) and would make the resumed config one no run has."""
    group = key.split(".", 1)[0]
    name = f"{group}.name"
    return group != key and name in old and name in new and old[name] != new[name]


def reconcile_resume_config(saved: Mapping, composed: DictConfig, overrides: Iterable[str]) -> DictConfig:
    """The config a resumed run continues with: ``saved``, plus the safe keys the command line asked for.

    Raises :class:`ResumeError` naming every changed key that the command line asked for but a resume
    cannot honour (model, data, optimizer, RoPE, seed, ...).
    """
    requested = override_keys(overrides)
    new = flatten(OmegaConf.to_container(composed, resolve=True))
    old = flatten(dict(saved))
    result = OmegaConf.create(dict(saved))
    refused = []
    for key in sorted(set(new) | set(old)):
        if key not in old and not covered(key, (*PER_INVOCATION, *requested)) and _other_option(key, old, new):
            continue  # a setting of the default option, not of the one the run chose (data=text_files, optim=muon)
        if covered(key, PER_INVOCATION) or key not in old:  # per invocation, or a key newer than the run
            value = new.get(key)
        elif new.get(key) == old.get(key) or not covered(key, requested):
            continue  # unchanged, or only a default of the resume command: the saved run wins
        elif covered(key, SAFE_TO_CHANGE) and not draws_otherwise(key, old):
            value = new.get(key)
        else:
            refused.append(f"{key} (saved {old.get(key, '<absent>')!r}, asked {new.get(key, '<absent>')!r})")
            continue
        OmegaConf.update(result, key, value, force_add=True)
    if refused:
        steps = (" (the learning rate's warmup and cosine run over train.max_steps: train.stop_at_step=N stops a run "
                 "early and keeps them; train.init_from=<run dir> starts a new run from its weights)"
                 if any(r.startswith("train.max_steps ") for r in refused) else "")
        measured = [r for r in refused if r.startswith(MEASURING)]
        drawn = [r for r in refused if r.startswith(DRAWING)]
        trained = [r for r in refused if r not in measured and r not in drawn]
        clauses = [f"{', '.join(keys)}: {why}" for keys, why in (
            (trained, f"that would train a different model{steps}"),
            (measured, "that would measure the run's val metrics on other batches than before"),
            (drawn, "with model.dropout > 0 that would draw the dropout masks with another generator from the "
                    "resumed step on (compiled and eager training draw them differently), a run no longer paired "
                    "with its seed's runs; resume with the run's own train.compile")) if keys]
        raise ResumeError(f"resume cannot change {'; nor '.join(clauses)}; start a new run instead (keys a resume may "
                          f"change: {', '.join(k for k in (*SAFE_TO_CHANGE, *PER_INVOCATION) if k != 'train.resume')})")
    return result


def another_run_s_keys(path: Path, state: Mapping, run_dir: Path, config_file: str) -> str | None:
    """``"k=theirs (config.yaml: ours), ..."`` where the checkpoint ``path`` in ``run_dir``'s own ``checkpoints/``
    holds another run than the run's ``config_file`` (a key a resume may not change: another model, data,
    optimizer, seed, ...), else None. Such a file was put there by hand, not left by a crash: a resume would train
    the other run on in this dir, and a command reading the run (generation, evaluation) would record the other
    run's weights under this run's name."""
    saved = state.get("config")
    if not isinstance(saved, Mapping) or path.resolve().parent != (run_dir / "checkpoints").resolve():
        return None
    try:
        own = OmegaConf.to_container(OmegaConf.load(run_dir / config_file), resolve=True)
    except Exception:  # no record to compare with (none yet, or cut short): the checkpoint's config is all there is
        return None
    if not isinstance(own, dict):
        return None
    ours, theirs = flatten(own), flatten(dict(saved))
    differ = [k for k in sorted(set(ours) & set(theirs))
              if not covered(k, (*SAFE_TO_CHANGE, *PER_INVOCATION)) and ours[k] != theirs[k]]
    if not differ:
        return None
    more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
    return ", ".join(f"{k}={theirs[k]!r} ({config_file}: {ours[k]!r})" for k in differ[:3]) + more
