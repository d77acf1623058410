"""A sweep whose every job would be refused is refused once, before any job starts.

Why: a bad value the whole sweep shares (``python -m llm.train -m seed=0,1,2 train.batch_size=-1``) would
otherwise be refused by each job in turn, one identical error per job, each after a launch (with the GPU
launcher: a worker process, a device slot and a run dir per job). The sweep's process expands the jobs as Hydra's
basic sweeper does, composes them one by one and runs the run's own config check on each, stopping at the first
that passes: a sweep with one good job costs one composition, and jobs refused on their own (one bad seed among
good ones) are still refused one by one, while the others run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

#: The sweeper whose expansion :func:`job_overrides` reproduces (Hydra's default).
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: The launcher of ``hydra/launcher=joblib``: its jobs run side by side in worker processes.
JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
#: The launcher of ``hydra/launcher=gpus``: joblib's, each worker process a pool of its own (llm/launcher.py).
GPUS_LAUNCHER = "hydra_plugins.ropelab_launcher.gpus_launcher.GpusLauncher"
#: Launchers whose jobs run side by side in worker processes of this host (or one after another in its own process,
#: with one worker).
PARALLEL_LAUNCHERS = (GPUS_LAUNCHER, JOBLIB_LAUNCHER)
#: Launchers whose jobs run on this host (in this process, or in its joblib workers): only there does this host's
#: check (its GPUs, its memory, its kernels) say what the jobs' would. A cluster's jobs run elsewhere.
LOCAL_LAUNCHERS = ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", *PARALLEL_LAUNCHERS)
#: Arguments a continuing command replaces (:func:`llm.sweep.continue_sweep_command`): no part of a job's identity.
PER_INVOCATION_ARGS = ("hydra.sweep.dir=", "train.resume=", "train.stop_at_step=")


def sweep_arguments(hydra: Mapping) -> list[str]:
    """The arguments a sweep expands, from its ``hydra`` config (a DictConfig, or a saved ``multirun.yaml``'s as a
    dict): the sweeper's ``params`` (an experiment's sweep) first, then the command's own overrides."""
    sweeper, overrides = hydra.get("sweeper") or {}, hydra.get("overrides") or {}
    params = sweeper.get("params") or {}
    return [f"{key}={value}" for key, value in params.items()] + list(overrides.get("task") or [])


def expand(arguments: Sequence[str], config_loader: Any = None) -> list[list[str]]:
    """Each job's overrides in launch order, as Hydra's basic sweeper expands ``arguments``: every sweep
    (``seed=0,1``) crossed with the rest (``config_loader``: what a ``glob()`` sweep needs)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(list(arguments))
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def saved_sweep(sweep_dir: Path) -> dict:
    """The ``hydra`` section of the sweep dir's ``multirun.yaml`` as saved (interpolations unresolved: a job's dir
    name refers to ``hydra.job.num``); raises OSError where there is none."""
    return OmegaConf.to_container(OmegaConf.load(sweep_dir / "multirun.yaml"), resolve=False).get("hydra") or {}


def job_overrides(config: DictConfig) -> Iterator[list[str]]:
    """Each job's overrides in launch order, as Hydra's basic sweeper expands them (:func:`expand`)."""
    from hydra.core.global_hydra import GlobalHydra

    yield from expand(sweep_arguments(config.hydra), GlobalHydra.instance().config_loader())


def every_job_refused(config: DictConfig) -> str | None:
    """The one line refusing the sweep when each of its jobs fails the run's config check, else None.

    None also where the check cannot speak for the jobs: another sweeper, a launcher whose jobs run on other hosts,
    a job that resumes (``train.resume``), a job whose ``train.init_from`` holds a run (its run fills in settings
    from it first, such as YaRN's original length), or an expansion or composition that fails otherwise. Then the
    jobs say what they say, as before. A ``train.init_from`` the job would refuse (not a run dir, no checkpoint, or
    another architecture: :func:`llm.training.init_from.check_init_from`, the job's first check) is a refusal here:
    a fine-tuning sweep pointed at a wrong source is refused once, not by each of its jobs."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from llm.config_check import validate_config
    from llm.errors import UserError
    from llm.training.init_from import check_init_from

    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    if OmegaConf.select(config, "hydra.launcher._target_") not in LOCAL_LAUNCHERS:
        return None
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from llm.entry import hydra_error_line

    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    refusals: list[tuple[list[str], str]] = []
    reasons: set[str] = set()  # the refusals less each job's own train.init_from
    try:
        loader = GlobalHydra.instance().config_loader()
        composed = []
        for overrides in job_overrides(config):  # every job: a misspelt option anywhere in a list stops Hydra
            try:
                composed.append((overrides, loader.load_sweep_config(config, overrides)))
            except (ConfigCompositionException, OverrideParseException) as e:
                return hydra_error_line(e)
        for overrides, job in composed:
            if OmegaConf.select(job, "train.resume"):
                return None  # its run completes its config from its checkpoint before checking it
            hydra_config.set_config(job)  # the job's ${hydra:...} values, as its own process will see them
            try:
                # the source run is checked first, as the job checks it; one that passes fills in settings the
                # config check needs (YaRN's original length), so such a job is left to check itself
                if check_init_from(job) is not None:
                    return None
                validate_config(job)
            except UserError as e:
                refusals.append((overrides, str(e)))
                reasons.add(_reason(job, str(e)))
                continue
            return None
    except Exception as e:  # noqa: BLE001 - not a refusal of the config: the jobs report it themselves
        log.debug("the sweep's jobs were not checked up front: %s", e)
        return None
    finally:
        hydra_config.cfg = saved
    if not refusals:
        return None
    messages = {message for _, message in refusals}
    if len(refusals) == 1:  # a sweep of one job: its own refusal
        return refusals[0][1]
    if len(messages) == 1:
        return f"every job of this sweep ({len(refusals)}) would be refused: {refusals[0][1]}"
    first, message = refusals[0]
    shared = set.intersection(*(set(overrides) for overrides, _ in refusals))
    job = " ".join(o for o in first if o not in shared)  # what sets the first job apart: its swept values
    if len(reasons) == 1:  # one reason, said of each job's own source (<source>/<rope>_<packing>_s<seed>)
        return (f"every job of this sweep ({len(refusals)}) would be refused for the same reason; the first ({job}): "
                f"{message}")
    return (f"every job of this sweep ({len(refusals)}) would be refused, for {len(reasons)} reasons; the first "
            f"({job}): {message}")


def _reason(job: DictConfig, message: str) -> str:
    """A refusal without the job's own ``train.init_from`` (each job of a fine-tuning sweep has its source), read
    while the job's Hydra config is set: two jobs refused alike for their own sources are refused for one reason."""
    source = OmegaConf.select(job, "train.init_from", throw_on_resolution_failure=False)
    return message.replace(f"train.init_from={source}", "train.init_from=<source>") if source else message


def _jobs(config: DictConfig) -> list[frozenset[str]]:
    return [frozenset(o for o in job if not o.lstrip("+").startswith(PER_INVOCATION_ARGS))
            for job in job_overrides(config)]


def continuation_change(config: DictConfig, earlier: DictConfig) -> str | None:
    """How ``config``, continuing the sweep whose saved config (its ``multirun.yaml``) is ``earlier``, changes its
    jobs: None (the same jobs in the same order, or they cannot be compared here), ``"order"`` (the same jobs
    numbered otherwise: its arguments in another order) or ``"jobs"`` (other jobs: more seeds, another rope). A job's
    dir is ``<num>_<rope>_s<seed>``, its number its place in the sweep: either change would have jobs find their run
    in a sibling's dir, or train runs the first sweep never asked for beside its own."""
    try:
        now, before = _jobs(config), _jobs(earlier)
    except Exception as e:  # noqa: BLE001 - the jobs say what they say
        log.debug("the continued sweep's jobs were not compared up front: %s", e)
        return None
    if now == before:
        return None
    return "order" if sorted(map(sorted, now)) == sorted(map(sorted, before)) else "jobs"


def swept_values(job: Sequence[str], sweep_dir: Path) -> str:
    """This job's values of the keys its sweep varies, but rope and seed (a run's name says them already), e.g.
    ``optim.lr=0.003``: a sweep over a learning rate would otherwise name every wandb run alike. Read from the
    sweep dir's ``multirun.yaml`` (empty where it cannot be read)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        arguments = sweep_arguments(saved_sweep(sweep_dir))
        swept = {o.key_or_group for o in OverridesParser.create().parse_overrides(arguments) if o.is_sweep_override()}
    except Exception as e:  # noqa: BLE001 - a name without them, as before
        log.debug("the sweep's varied keys could not be read: %s", e)
        return ""
    swept -= {"rope", "seed"}
    return " ".join(o for o in job if o.lstrip("+~").split("=", 1)[0] in swept)
