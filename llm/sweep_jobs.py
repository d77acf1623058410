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
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from llm.config_keys import as_written

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
    params = as_written(sweeper.get("params")) or {}
    return [f"{key}={value}" for key, value in params.items()] + list(as_written(overrides.get("task")) or [])


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


def compose_jobs(config: DictConfig) -> list[tuple[list[str], DictConfig]]:
    """Each job's overrides and config in launch order, composed as the launcher composes them (its number and id
    included: a job dir's name may read them). Raises Hydra's errors for a job it cannot compose."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    loader = GlobalHydra.instance().config_loader()
    jobs = []
    for idx, overrides in enumerate(job_overrides(config)):
        job = loader.load_sweep_config(config, list(overrides))
        with open_dict(job):
            job.hydra.job.id = f"{job.hydra.job.name}_{idx}"
            job.hydra.job.num = idx
        jobs.append((list(overrides), job))
    return jobs


def every_job_refused(config: DictConfig, composed: list[tuple[list[str], DictConfig]] | None = None) -> str | None:
    """The one line refusing the sweep when each of its jobs fails the run's config check, else None.

    None also where the check cannot speak for the jobs: another sweeper, a launcher whose jobs run on other hosts,
    a job that resumes (``train.resume``), a job whose ``train.init_from`` holds a run (its run fills in settings
    from it first, such as YaRN's original length), or an expansion or composition that fails otherwise. Then the
    jobs say what they say, as before. A ``train.init_from`` the job would refuse (not a run dir, no checkpoint, or
    another architecture: :func:`llm.training.init_from.check_init_from`, the job's first check) is a refusal here:
    a fine-tuning sweep pointed at a wrong source is refused once, not by each of its jobs."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf.errors import InterpolationToMissingValueError, MissingMandatoryValue

    from llm.config_check import check_config_keys, validate_config
    from llm.errors import UserError
    from llm.training.init_from import check_init_from

    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    if OmegaConf.select(config, "hydra.launcher._target_") not in LOCAL_LAUNCHERS:
        return None
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from llm.entry import hydra_error_line, unresolved_line

    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    refusals: list[tuple[list[str], str]] = []
    reasons: set[str] = set()  # the refusals less each job's own train.init_from
    try:
        if composed is None:
            try:  # every job: a misspelt option anywhere in a list stops Hydra
                composed = compose_jobs(config)
            except (ConfigCompositionException, OverrideParseException) as e:
                return hydra_error_line(e)
        for overrides, job in composed:
            hydra_config.set_config(job)  # the job's ${hydra:...} values, as its own process will see them
            if (line := unresolved_line(job)) is not None:  # a ${...} no job can resolve: what a run checks first
                refusals.append((overrides, line))
                reasons.add(line)
                continue
            try:
                check_config_keys(job)  # the job's first check: a swept key nothing reads (+train.max_step=5,6)
                if OmegaConf.select(job, "train.resume"):
                    return None  # its run completes its config from its checkpoint before checking it
                # the source run is checked first, as the job checks it; one that passes fills in settings the
                # config check needs (YaRN's original length), so such a job is left to check itself
                if check_init_from(job) is not None:
                    return None
                validate_config(job)
            except UserError as e:
                refusals.append((overrides, str(e)))
                reasons.add(_reason(job, str(e)))
                continue
            except (MissingMandatoryValue, InterpolationToMissingValueError) as e:  # a `???` nobody gave
                refusals.append((overrides, message := missing_value_line(e)))
                reasons.add(message)
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


def missing_value_line(error: BaseException) -> str:
    """The refusal of a job whose config leaves a mandatory value (``???``) unset, naming the key to give: an
    experiment's own input, such as ``+experiment=length_finetune``'s ``finetune.source``. Without it each job would
    fail with OmegaConf's traceback as it reads the value."""
    match = re.search(r"Missing mandatory value: ?([\w.\[\]]+)", str(error))
    key = match.group(1) if match else str(getattr(error, "full_key", "") or "a value")
    return (f"{key} is not set (??? in the config) and the run reads it: give it on the command line, {key}=<value> "
            "(--cfg job shows what the experiment expects)")


def _reason(job: DictConfig, message: str) -> str:
    """A refusal without the job's own ``train.init_from`` (each job of a fine-tuning sweep has its source), read
    while the job's Hydra config is set: two jobs refused alike for their own sources are refused for one reason."""
    source = OmegaConf.select(job, "train.init_from", throw_on_resolution_failure=False)
    return message.replace(f"train.init_from={source}", "train.init_from=<source>") if source else message


def interval_sweep(config: DictConfig) -> str | None:
    """The one line refusing an ``interval()`` sweep (``optim.lr=interval(0.001,0.01)``), else None.

    Why: ``interval()`` is a range for a sweeper that samples values (Optuna, Nevergrad, Ax), and this project runs
    Hydra's basic sweeper, which only runs listed values: Hydra refused it after the sweep dir was claimed, with a
    traceback and a sweep dir holding nothing but its lock."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import IntervalSweep

    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(sweep_arguments(config.hydra))
    except Exception as e:  # noqa: BLE001 - Hydra's own parse says what is wrong
        log.debug("the sweep's arguments were not parsed up front: %s", e)
        return None
    for o in parsed:
        if isinstance(o.value(), IntervalSweep):
            key = o.get_key_element()
            return (f"{o.input_line}: interval() is for sweepers that sample values (Optuna, Nevergrad), and this "
                    f"project's sweeper runs the values it is given: list them ({key}=0.001,0.003,0.01), or use "
                    f"range() or choice()")
    return None


def empty_sweep(config: DictConfig) -> str | None:
    """The one line refusing a sweep of no jobs (``seed=range(0)``, a range whose end is not above its start), naming
    the empty sweep, else None: Hydra would launch nothing and the command would end with exit code 0, as if its
    runs were done. None also for another sweeper, or an expansion that fails (Hydra says why itself)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    try:
        if any(True for _ in job_overrides(config)):
            return None
        loader = GlobalHydra.instance().config_loader()
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(sweep_arguments(config.hydra))
        empty = [o.input_line for o in parsed if o.is_sweep_override() and not list(o.sweep_string_iterator())]
    except Exception as e:  # noqa: BLE001 - Hydra's own expansion says what is wrong
        log.debug("the sweep's jobs were not counted up front: %s", e)
        return None
    what = ", ".join(e for e in empty if e) or "its sweep"
    return f"this sweep has no jobs: {what} gives no value; give each swept key at least one (seed=range(3): 0, 1, 2)"


def shared_job_dirs(config: DictConfig, composed: list[tuple[list[str], DictConfig]] | None = None) -> str | None:
    """The one line refusing a sweep two of whose jobs would write into one job dir, else None. A job dir is named
    by ``hydra.sweep.subdir``: the job's number and values by default, which no two jobs share, but the length
    experiments name it by rope, packing and seed alone (``torch_random_s0``, so that the fine-tuning sweep finds
    each source run); there a repeated value (``seed=0,0``) or another swept key (``+rope.base=1e4,5e5``) would
    give two jobs one dir, and the second would be refused only after the first trained, as a dir holding a run.
    None where the dir names hold the job's number, or the jobs cannot be composed here (they say what they say)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    node = config.hydra.sweep._get_node("subdir")
    pattern = str(node._value()) if node is not None else ""
    if "hydra.job.num" in pattern or "hydra.job.id" in pattern:
        return None  # every job has a number of its own
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    seen: dict[str, tuple[int, list[str]]] = {}
    try:
        loader = GlobalHydra.instance().config_loader()
        for idx, (overrides, job) in enumerate(compose_jobs(config) if composed is None else composed):
            hydra_config.set_config(job)
            subdir = str(job.hydra.sweep.subdir)
            if subdir in seen:
                num, first = seen[subdir]
                where = Path(str(config.hydra.sweep.dir)) / subdir
                if set(first) == set(overrides):
                    swept = " ".join(_repeated_values(config, loader)) or " ".join(overrides)
                    return (f"jobs #{num} and #{idx} of this sweep are the same job (a value repeated in: {swept}) "
                            f"and would share the job dir {where}, which names a job by its values "
                            f"(hydra.sweep.subdir={pattern}); drop the repeated value")
                ours, theirs = ([o for o in a if o not in b] for a, b in ((first, overrides), (overrides, first)))
                return (f"jobs #{num} and #{idx} of this sweep would share the job dir {where}: they differ in "
                        f"{' '.join(ours)} against {' '.join(theirs)}, which its name (hydra.sweep.subdir={pattern}) "
                        "leaves out; run each value as a sweep of its own, into its own hydra.sweep.dir")
            seen[subdir] = (idx, list(overrides))
    except Exception as e:  # noqa: BLE001 - the jobs say what they say
        log.debug("the sweep's job dirs were not compared up front: %s", e)
        return None
    finally:
        hydra_config.cfg = saved
    return None


def _repeated_values(config: DictConfig, config_loader: Any) -> list[str]:
    """The sweeps of ``config`` that give a value twice (``seed=0,1,0``), as the command or experiment gave them: a
    key given twice counts once, its last (a command's ``seed=`` replaces an experiment's), as Hydra's sweeper
    takes it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create(config_loader=config_loader).parse_overrides(sweep_arguments(config.hydra))
    last = {o.get_key_element(): o for o in parsed}
    return [o.input_line for o in last.values() if o.is_sweep_override()
            and len(values := list(o.sweep_string_iterator())) > len(set(values))]


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
