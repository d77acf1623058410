"""What the Hydra entry points share: Hydra's own errors read like every other mistake, one line and exit 2.

Why: Hydra composes the config before any of our code runs and reports its own errors itself: an unknown group
option (``rope=nope``) as 18 lines, an unknown key (``train.max_step=5``) as 7 lines that suggest
``+train.max_step=5``, both with exit code 1. :func:`run_entry` asks Hydra to raise them instead (its documented
switch, ``HYDRA_FULL_ERROR=1``) and prints each as one line naming the option or key and what is allowed, exit
code 2, as the entry points print a :class:`llm.errors.UserError`; so is Hydra's refusal of two of its flags at
once (``-m --cfg job``: a 12-line traceback, exit code 1), with what works instead. Under torchrun the line is
printed once, by rank 0 (:func:`print_refusal`). A user who sets
``HYDRA_FULL_ERROR=1`` still gets every traceback (:func:`full_error_requested`).

A stop is not a mistake either: the commands that work in one process (``llm.generate``, ``llm.eval_lengths``) take a
SIGTERM as Ctrl-C (:func:`sigterm_stops_like_ctrl_c`) and end either with one line and the shell's exit code
(:func:`stopped`), as ``llm.train`` does. So does a stop while any of them still starts (importing torch, Hydra
composing the config): :func:`stop_quietly_while_starting` holds both signals until the command's own handling
begins (:func:`started`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from llm.errors import UserError, in_chain

if TYPE_CHECKING:
    from omegaconf import DictConfig

# Hydra, OmegaConf and the config schema are imported inside the functions that use them: an entry point imports
# this module before Hydra, to install :func:`stop_quietly_while_starting` first.

#: The user's own HYDRA_FULL_ERROR, kept while :func:`run_entry` sets Hydra's to 1 (job processes inherit both).
USER_FULL_ERROR = "ROPELAB_USER_FULL_ERROR"


def one_line_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix: one line, no traceback."""
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from llm.fileio import DiskFullError

    return UserError, DiskFullError, ConfigCompositionException, OverrideParseException
#: Hydra's refusals of its own flags, raised as a plain ValueError before any config is composed.
HYDRA_FLAG_ERRORS = ("Only one of --run, --multirun, --cfg, --info and --shell_completion can be specified",
                     "The --resolve flag can only be used in conjunction with --cfg or --help")


#: How long a torchrun process other than rank 0 waits before printing a refusal of its own (:func:`print_refusal`).
RANK0_GRACE_S = 5.0


#: Hydra's flags that print something and run nothing (the config, the help, the run's info).
PRINTING_FLAGS = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help")


def other_rank() -> bool:
    """Whether this is a process of torchrun's other than rank 0."""
    return int(os.environ.get("RANK", "0")) > 0 and int(os.environ.get("WORLD_SIZE", "1")) > 1


def print_refusal(line: str) -> None:
    """Print a refusal's one line (``Error: <line>``) on stderr, once for a command however many processes run it.

    Why: under torchrun every process composes and checks the same command, so each would print the same line; and
    the first process to exit makes torchrun SIGTERM the others (it looks every 0.1 s), which can cut rank 0 short
    before it printed its line or removed the run dir it created. So a process other than rank 0 waits
    :data:`RANK0_GRACE_S` first, for torchrun to end it once rank 0 has refused; a refusal that rank 0 does not
    share is printed after that wait, naming the rank.
    """
    rank = int(os.environ.get("RANK", "0"))
    if other_rank():
        time.sleep(RANK0_GRACE_S)
        line = f"rank {rank}: {line}"
    print(f"Error: {line}", file=sys.stderr)


def refuse_multirun(argv: list[str], refusal: str) -> None:
    """``-m`` refused in one line (``refusal``), exit 2, before Hydra starts: for the commands that work on a run
    dir given to them (``llm.generate``, ``llm.eval_lengths``), not in a dir Hydra makes.

    Why: Hydra's sweeper makes its sweep dir and writes ``multirun.yaml`` there before any job, in the current
    directory by default (``multirun/<date>/<time>/``, one dir per job, left empty), over a file of the user's with
    ``hydra.sweep.dir: .``; and a job's own refusal ends the sweep, after the jobs before it ran."""
    from hydra.main import get_args_parser

    if get_args_parser().parse_known_args(argv[1:])[0].multirun:
        print_refusal(refusal)
        sys.exit(2)


def full_error_requested() -> bool:
    """Whether the user asked for tracebacks (``HYDRA_FULL_ERROR=1``), also inside :func:`run_entry`."""
    own = os.environ.get(USER_FULL_ERROR)
    return (own if own is not None else os.environ.get("HYDRA_FULL_ERROR")) == "1"


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in str(text).splitlines() if ln.strip()]


def chosen_groups(argv: list[str]) -> set[str]:
    """The config groups a command line chooses (``rope=torch``, ``+experiment=x``): not dotted keys."""
    return {arg.partition("=")[0].lstrip("+~") for arg in argv
            if "=" in arg and "." not in arg.partition("=")[0] and not arg.startswith("-")}


def hydra_error_line(exc: BaseException, config_name: str = "config", command: str = "python -m llm.train",
                     argv: list[str] | None = None) -> str:
    """One line for an error of Hydra's composition (or any one-line error), naming what to fix; ``argv``: the
    command line's arguments (default ``sys.argv[1:]``), for the groups it chose."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from llm.config_schema import rope_key_without_kernel, schema, unknown_option_note

    text = " ".join(_lines(exc)) or type(exc).__name__
    if line := _launcher_plugin_missing(text):
        return line
    if isinstance(exc, MissingConfigException) and exc.options and "/" in str(exc.missing_cfg_file or ""):
        group, _, option = str(exc.missing_cfg_file).rpartition("/")
        return (f"{group}={option} is not an option of {group}; allowed: {', '.join(exc.options)}"
                f"{unknown_option_note(group, option)}")
    if isinstance(exc, OverrideParseException):
        return f"cannot parse the override {exc.override!r}: {text}"
    if not isinstance(exc, ConfigCompositionException):
        return text
    cause = " ".join(_lines(exc.__cause__ or ""))
    if m := re.search(r"Could not override '([^']+)'", text):
        key = m.group(1)
        if "not in struct" not in cause:
            return f"{key}: {cause or text}"
        args = sys.argv[1:] if argv is None else argv
        chosen = chosen_groups(args)
        typed = next((a.lstrip("+~") for a in args if a.lstrip("+~").partition("=")[0] == key), None)
        if key.startswith("rope.") and "rope" not in chosen:  # the run's rotation, in generate and eval_lengths
            value = "" if typed is None else typed.partition("=")[2]
            if (line := rope_key_without_kernel(key.split(".")[1], value, config_name, argv=args)) is not None:
                return line
        group = key.partition(".")[0]
        option = next((a.partition("=")[2] for a in args if a.lstrip("+").partition("=")[0] == group), None)
        return schema(config_name, command).absent_key(key, chosen, option, typed)
    if m := (re.search(r"Multiple values for (\S+)\. To override", text)
             or re.search(r"(\S+) appears more than once in the final defaults list", text)):
        return _group_twice_line(m.group(1), sys.argv[1:] if argv is None else argv)
    if m := re.search(r"An item is already at '([^']+)'", text):
        return f"{m.group(1)} is already in the config: set it without the leading +"
    return f"{text} ({cause})" if cause else text


#: The packages of the Hydra launcher plugins conf/hydra/launcher builds on, by their configs' name.
_LAUNCHER_PACKAGES = {"submitit_": "hydra-submitit-launcher", "joblib": "hydra-joblib-launcher"}


def _launcher_plugin_missing(text: str) -> str | None:
    """The line for a launcher preset whose Hydra plugin is not installed, from Hydra's error ``text`` (which names
    only the config it could not load and its search path), else None."""
    m = re.search(r"In 'hydra/launcher/(\w+)': Could not load 'hydra/launcher/(\w+)'", text)
    package = m and next((p for name, p in _LAUNCHER_PACKAGES.items() if m.group(2).startswith(name)), None)
    if not package:
        return None
    return (f"hydra/launcher={m.group(1)} builds on Hydra's {m.group(2)} launcher, which is not installed here: "
            f"pip install {package} (a dependency of ropelab, which pip install -e . installs)")


def _group_twice_line(group: str, argv: list[str]) -> str:
    """The line for a config group chosen twice: added with ``+`` where the config already chooses it
    (``+model=small``), or typed more than once (``+experiment=a +experiment=b``).

    Why: Hydra's own words ("model appears more than once in the final defaults list", or, under ``--cfg``, "use
    'override model: small'", a config file's syntax) name neither the ``+`` nor what to type instead."""
    typed = [a for a in argv if not a.startswith("-") and a.partition("=")[0].lstrip("+~") == group]
    if len(typed) > 1:
        return f"{group} is chosen more than once ({' '.join(typed)}): it takes one option; give one of them"
    option = typed[0].partition("=")[2] if typed else "<option>"
    return (f"{typed[0] if typed else group}: {group} is already chosen by the config's defaults: choose "
            f"{group}={option} without the leading +")


def hydra_flag_error_line(exc: BaseException, argv: list[str] | None = None) -> str | None:
    """One line for Hydra's refusal of its flags (``-m --cfg job``), naming the flags and what works instead, or
    None for any other error: Hydra raises these as a bare ValueError, which a run's own code raises too."""
    from hydra.main import get_args_parser

    text = str(exc)
    if not isinstance(exc, ValueError) or text not in HYDRA_FLAG_ERRORS:
        return None
    if text == HYDRA_FLAG_ERRORS[1]:
        return "--resolve only goes with --cfg or --help (it resolves the config they print): add --cfg job"
    # Hydra's own parser, so that -mc job, --cfg=job and --info=config read as Hydra read them
    args, _ = get_args_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    given = [flag for flag, on in (("--run", args.run), ("-m (--multirun)", args.multirun),
                                   ("--cfg", args.cfg is not None), ("--info", args.info is not None),
                                   ("--shell-completion", args.shell_completion)) if on]
    if args.multirun and args.cfg is not None:  # Hydra prints one config: a job's, never a sweep's
        return ("-m (--multirun) and --cfg cannot be combined: drop -m and give each swept key one value (seed=0) "
                "to print that job's config; without -m, +experiment=<name> --cfg job prints the config its jobs "
                "share and --cfg hydra its swept keys (hydra.sweeper.params)")
    return (f"{' and '.join(given)} cannot be combined: Hydra takes one of --run, -m (--multirun), --cfg, --info "
            "and --shell-completion at a time")


#: Hydra's refusal of a group chosen with a value that is no option's name (``rope=null``), raised as a bare ValueError.
GROUP_VALUE_ERROR = "Config group override must be a string or a list. Got "


def _group_options(config_name: str) -> dict[str, list[str]]:
    """Each config group a command line may choose (those of the primary config, and those added with ``+``: the
    experiments and recipes) and its options."""
    from llm.config_schema import GLOBAL_GROUPS, schema

    found = schema(config_name)
    groups = {g: sorted(options) for g, options in found.groups.items()}
    for group in GLOBAL_GROUPS.get(config_name, ()):
        groups.setdefault(group, [])
    for name in found.global_files:  # experiment/rope_quality: the options of the groups added with +
        groups[name.partition("/")[0]].append(name.partition("/")[2])
    return groups


def _group_overrides(argv: list[str], groups: Mapping[str, list[str]]) -> list:
    """The overrides of ``argv`` that choose one of ``groups`` (``rope=torch``, ``+experiment=x``,
    ``hydra/launcher=gpus``), as Hydra parses them; none where one does not parse (Hydra's own line says which)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [a for a in argv if not a.startswith("-") and "=" in a]
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except Exception:  # noqa: BLE001 - an override that does not parse: Hydra refuses it in its own line
        return []
    return [o for o in overrides if (o.key_or_group in groups or "/" in o.key_or_group) and not o.is_delete()]


def group_value_error_line(exc: BaseException, config_name: str = "config",
                           argv: list[str] | None = None) -> str | None:
    """One line for a config group given a value that names no option (``rope=null``, ``model=1``), naming the
    override and the group's options, or None for any other error.

    Why: Hydra refuses it with a bare ValueError out of its defaults list, which reached the user as a 40-line
    traceback naming neither the override nor what the group takes (null does not deselect a group: ``~group``
    does, and a run reads every group it chooses by default)."""
    if not isinstance(exc, ValueError) or not str(exc).startswith(GROUP_VALUE_ERROR):
        return None
    groups = _group_options(config_name)
    for o in _group_overrides(sys.argv[1:] if argv is None else argv, groups):
        value = o.value()
        if not o.is_sweep_override() and not isinstance(value, (str, list)):
            options = groups.get(o.key_or_group, [])
            allowed = f"; allowed: {', '.join(options)}" if options else ""
            return f"{o.input_line}: {o.key_or_group} takes the name of one of its options{allowed}"
    return None


def group_list_line(argv: list[str], config_name: str = "config", command: str = "python -m llm.train") -> str | None:
    """One line refusing a config group chosen as a list (``rope=[torch,none]``), or None.

    Why: Hydra takes a list of a group's options as one config merged from all of them, the last one's keys over
    the others': ``rope=[torch,torch_full]`` trained a single run of torch_full's full rotation, and
    ``model=[gpt2_small,tiny]`` one of model=tiny, without a word; and Hydra's own line for ``rope=torch,none``
    without ``-m`` suggests exactly that list. What is meant is a sweep: ``-m rope=torch,none``."""
    for o in _group_overrides(argv, _group_options(config_name)):
        value = o.value()
        if isinstance(value, list):
            key, names = o.get_key_element(), [str(v) for v in value]
            if len(names) == 1:
                hint = f"choose it as {key}={names[0]}"
            elif config_name == "config" and "/" not in key:  # llm.train sweeps; the launcher is no sweep's key
                hint = f"to run each: {command} -m {key}={','.join(names)}"
            else:
                hint = f"choose one: {key}={names[-1]}"
            return (f"{o.input_line}: {o.key_or_group} takes one option, not a list (Hydra would merge the options "
                    f"into one config, the last one's keys over the others'); {hint}")
    return None


def misplaced_flag_line(argv: list[str], command: str = "python -m llm.train") -> str | None:
    """One line for overrides both before and after a flag (``rope=torch -m seed=0,1``), or None.

    Why: Hydra's parser takes overrides only before its first flag or after its last one, and refuses the rest with
    its 8-line usage text and "unrecognized arguments", which does not say that the order is the mistake."""
    from hydra.main import get_args_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # Hydra's own parse, after this one, prints its usage once
            args, extra = get_args_parser().parse_known_args(argv)
    except SystemExit:  # a flag Hydra cannot parse (--cfg without a value): Hydra's own message says which
        return None
    stray = [a for a in extra if not a.startswith("-")]
    if not stray or not args.overrides:
        return None
    flags = [a for a in argv if a not in args.overrides and a not in stray]
    return (f"{stray[0]} comes after a flag that follows other overrides ({args.overrides[0]}): give the flags first, "
            f"then every override: {command} {' '.join(flags)} {' '.join(args.overrides + stray)}")


def interpolation_error_line(exc: BaseException) -> str:
    """One line for an interpolation OmegaConf cannot resolve (``train.eval_every=${train.max_stepz}``,
    ``${oc.env:UNSET}``, a resolver no one registered), naming the key whose value holds it: OmegaConf's own message
    is its first line, the key on the lines after."""
    message = _lines(exc)[0] if _lines(exc) else type(exc).__name__
    key = getattr(exc, "full_key", None)
    return f"{key}: its interpolation cannot be resolved: {message}" if key else message


def unresolved_line(cfg: DictConfig) -> str | None:
    """The line refusing a command's config one of whose interpolations cannot be resolved, or reads a value no
    one gave (``???``: an experiment's input), else None.

    Why: a single run read its interpolations only once it began, after Hydra had made its run dir: a typo in
    ``${...}`` on the command line was a 60-line traceback with exit code 1 and an empty run dir left behind. Checked
    before the run dir is made (:class:`llm.sweep.CheckRunDir`), with the job's Hydra config set, as ``${hydra:...}``
    reads it. A task function's config (no ``hydra`` node: ``llm.generate``, ``llm.eval_lengths``, which read their
    keys as they work) is checked under the Hydra config its run set."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import InterpolationResolutionError, InterpolationToMissingValueError

    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg  # put back after: the caller's (a sweep's), or none before a run's job sets it
    whole = "hydra" in cfg
    if whole:
        hydra_config.set_config(cfg)
    try:
        for key in cfg:
            value = None if key == "hydra" else OmegaConf.select(cfg, str(key))  # a scalar resolved; ??? is None
            if isinstance(value, (DictConfig, ListConfig)):
                OmegaConf.to_container(value, resolve=True)
        if whole:
            str(cfg.hydra.run.dir)
    except InterpolationToMissingValueError as e:  # an experiment's input left unset (finetune.source)
        from llm.sweep_jobs import missing_value_line

        return missing_value_line(e)
    except InterpolationResolutionError as e:
        cause = user_error_within(e)
        return str(cause) if cause is not None else interpolation_error_line(e)
    finally:
        hydra_config.cfg = saved
    return None


def refuse_unresolved(cfg: DictConfig) -> None:
    """Raise :func:`unresolved_line`'s line as a :class:`UserError` (exit 2, one line): a command whose task reads
    its keys as it works (``llm.generate``, ``llm.eval_lengths``) would otherwise meet a ``${...}`` typo at the key's
    first read, as OmegaConf's traceback."""
    line = unresolved_line(cfg)
    if line is not None:
        raise UserError(line)


def printed_config_error_line(exc: BaseException, argv: list[str] | None = None) -> str | None:
    """One line for an interpolation that ``--cfg``/``--help`` cannot resolve while printing, or None for a
    command that prints nothing. ``--cfg hydra`` leaves out the job's keys, so ``--cfg hydra --resolve`` (or
    ``-p hydra.run.dir``) cannot resolve ``hydra.run.dir``, which names the run by ``rope.name`` and ``seed``: the
    line says which flags print it."""
    from hydra.main import get_args_parser

    args, _ = get_args_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    if args.cfg is None and not args.help:
        return None
    line = interpolation_error_line(exc)
    key = str(getattr(exc, "full_key", None) or "")
    if args.cfg == "hydra" and (not key or key.startswith("hydra.")):
        flags = f"--cfg all -p {key}" if key else "--cfg all --resolve"
        line += (" (--cfg hydra leaves out the job's keys, which hydra.run.dir reads to name the run: "
                 f"{flags} prints Hydra's settings resolved)")
    return line


def user_error_within(exc: BaseException) -> UserError | None:
    """The :class:`UserError` an exception wraps, if any: OmegaConf reports a resolver's own error (the launcher's
    ``ropelab_jobs`` refusing ``sweep.jobs_per_gpu=0``) as an InterpolationResolutionError raised while handling
    it, possibly inside another one for the enclosing interpolation."""
    return in_chain(exc, UserError)


def run_entry(main: Callable[[], object], config_name: str = "config", command: str = "python -m llm.train") -> None:
    """Call a ``@hydra.main`` function; Hydra's composition errors, its refusals of its flags and the user errors
    that reach here (one raised by a sweep callback, or re-raised by an entry point) become one line on stderr and
    exit code 2."""
    from omegaconf.errors import InterpolationResolutionError

    user_full = full_error_requested()
    if not user_full and (line := misplaced_flag_line(sys.argv[1:], command) or group_list_line(
            sys.argv[1:], config_name, command)) is not None:
        print_refusal(line)
        sys.exit(2)
    os.environ[USER_FULL_ERROR] = "1" if user_full else "0"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises what it would print as a traceback and exit 1
    if other_rank() and any(a in PRINTING_FLAGS or a.startswith("--cfg=") for a in sys.argv[1:]):
        # under torchrun every process would print the same config or help: rank 0 prints it once
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the process ends after Hydra prints)
    try:
        main()
    except InterpolationResolutionError as e:
        cause = user_error_within(e)
        line = str(cause) if cause is not None else printed_config_error_line(e)
        if user_full or line is None:
            raise
        print_refusal(line)
        sys.exit(2)
    except one_line_errors() as e:
        if user_full:
            raise
        print_refusal(hydra_error_line(e, config_name, command))
        sys.exit(2)
    except ValueError as e:
        line = hydra_flag_error_line(e) or group_value_error_line(e, config_name)
        if user_full or line is None:
            raise
        print_refusal(line)
        sys.exit(2)
    finally:
        started()  # a command that ends before its task began (a refusal, a sweep's process) ends the startup too


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where the command is, as Ctrl-C raises KeyboardInterrupt: one path ends both, keeping what
    was done and saying so (:func:`sigterm_stops_like_ctrl_c`)."""

    signum = signal.SIGTERM


@contextmanager
def sigterm_stops_like_ctrl_c() -> Iterator[None]:
    """While the command works, a SIGTERM raises :class:`Terminated`.

    Why: the default handler ends the process at once, without a word and with exit code -15, where Ctrl-C says what
    was kept; a job scheduler or ``kill`` stops a long command with SIGTERM. The previous handler comes back after.
    """

    def handle(signum, frame) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stopped(exc: BaseException) -> tuple[str, int]:
    """How a command stopped by ``exc`` (Ctrl-C, or a SIGTERM as :class:`Terminated`) begins its one line, and its
    exit code: 128 + the signal, the shell's convention, as ``llm.train`` ends a run stopped by a signal."""
    terminated = in_chain(exc, Terminated)
    return _stop_word(signal.SIGINT if terminated is None else terminated.signum)


def _stop_word(signum: int) -> tuple[str, int]:
    """The first words of a stop's line for ``signum``, and the exit code 128 + it."""
    return ("Stopped by SIGTERM" if signum == signal.SIGTERM else "Interrupted"), 128 + signum


#: The line :func:`stop_quietly_while_starting` prints after its first word, while the command starts; empty once
#: :func:`started` (or outside a command).
_STARTING: list[str] = []
#: The handlers :func:`stop_quietly_while_starting` replaced, which :func:`started` puts back.
_BEFORE: dict[int, object] = {}


def _stop_while_starting(signum: int, frame: object) -> None:
    if not _STARTING:  # started() already, and something restored this handler it had saved: the defaults' way
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    word, code = _stop_word(signum)
    try:
        if not other_rank():  # torchrun passes the signal to every process: rank 0 says it once
            print(f"{word} {_STARTING[0]}", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def stop_quietly_while_starting(what: str) -> None:
    """From here until :func:`started`, a Ctrl-C or SIGTERM ends the command at once with one line, ``Interrupted
    <what>`` (``Stopped by SIGTERM <what>``), and exit code 128 + the signal; an entry point calls it in its
    ``__main__`` block before it imports Hydra.

    Why: the interpreter's KeyboardInterrupt cuts an import or Hydra's composition with a traceback, a SIGTERM ends
    the process without a word, and torch's C init drops an exception raised while it imports numpy, so the Ctrl-C
    is lost and the command goes on; the handler itself ends the process, as nothing of the command's exists yet.
    A signal the command was started ignoring (a shell's background job ignores Ctrl-C) stays ignored, as Python
    itself leaves it.
    """
    _STARTING[:] = [what]
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous = signal.signal(signum, _stop_while_starting)
        if previous is not _stop_while_starting:  # called again before started(): the handler from before stays
            _BEFORE[signum] = previous  # (not a stale one of a command in this process that never started)


def started() -> None:
    """The command's own handling of a stop begins (the first line of its Hydra task, or the end of
    :func:`run_entry`): the handlers from before :func:`stop_quietly_while_starting` come back (a Ctrl-C raises
    KeyboardInterrupt, a SIGTERM takes its default), each until the command installs its own. Nothing changes where
    it was not called."""
    _STARTING.clear()
    for signum, previous in list(_BEFORE.items()):
        if signal.getsignal(signum) is _stop_while_starting:
            signal.signal(signum, previous)
        del _BEFORE[signum]
