"""What every benchmark shares: which RoPE code it imports, the timers, the environment columns, the CSV writer.

A benchmark row must say what ran where, or it cannot be compared with another: each row starts with
:data:`ENV_COLUMNS` (the date, the GPU, the commit of the RoPE code actually imported, torch's and triton's
versions). ``--rope-path DIR`` imports ``rope`` from ``DIR/rope`` instead of this checkout, so one GPU session can
time an older commit's code (``git archive <commit> rope | tar -x -C DIR``) beside today's: its commit comes from
``DIR/.commit`` (written with the archive: such a folder has no git history) or from git.
Importing this module imports torch only: ``rope`` is imported by :func:`import_rope`, after the path is set.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import importlib
import importlib.metadata
import io
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: Where ``--smoke`` rows go by default: CPU rows must never land in the GPU results.
SMOKE_RESULTS = ROOT / "outputs" / "bench"
ENV_COLUMNS = ("date", "gpu", "commit", "torch", "triton")
#: The file beside a ``rope/`` package that names its commit where there is no git history (``--rope-path``).
COMMIT_FILE = ".commit"
#: More than any current GPU's L2: flushed before each timed call, so no call finds its inputs in the L2.
FLUSH_BYTES = 256 * 2**20
#: GPU clock cycles slept before each timed call (about 1 ms): the host queues the call meanwhile, so the events
#: time the kernels and not Python's launch.
SLEEP_CYCLES = 2_000_000


# -- which rope -------------------------------------------------------------------------------------------------
def import_rope(rope_path: str | Path | None) -> Path:
    """Import ``rope`` (from ``rope_path/rope`` when given, else this checkout's) and return the folder holding it.

    Why a path and not a second package name: an older commit's ``rope`` imports itself as ``rope``, so it can only
    be timed as the one ``rope`` of a process; a benchmark is run once per commit, appending to the same CSV.
    """
    if rope_path is not None:
        root = Path(rope_path).resolve()
        if not (root / "rope" / "__init__.py").is_file():
            _refuse(f"--rope-path {rope_path}: no rope/__init__.py there (make one with `git archive "
                    f"<commit> rope | tar -x -C {rope_path}`)")
        loaded = sys.modules.get("rope")
        if loaded is not None and Path(loaded.__file__).resolve().parent.parent != root:
            _refuse(f"--rope-path {rope_path}: this process has already imported rope from "
                    f"{Path(loaded.__file__).parent}")
        sys.path.insert(0, str(root))
    rope = importlib.import_module("rope")
    return Path(rope.__file__).resolve().parent.parent


def code_commit(root: Path) -> str:
    """The commit of the ``rope`` package under ``root``: ``root/.commit`` if present, else git's HEAD of ``root``
    (``-dirty`` when ``rope/`` differs from it), else ``unknown``. Git is asked only where ``root`` is the top of its
    own checkout, so a git-ignored copy inside this checkout never reads as this checkout's commit."""
    marker = root / COMMIT_FILE
    if marker.is_file():
        return marker.read_text().strip() or "unknown"

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            return "unknown"
        return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--", "rope") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


#: The ``gpu`` column of a ``--smoke`` row: the reports leave such rows out, their times meaning nothing.
SMOKE_GPU = "cpu (smoke)"


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else SMOKE_GPU


def environment(device: torch.device, rope_root: Path, commit: str | None = None) -> dict[str, str]:
    """The :data:`ENV_COLUMNS` of every row of this run."""
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = ""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
            "gpu": device_name(device), "commit": commit or code_commit(rope_root),
            "torch": torch.__version__, "triton": triton}


def plugin_versions(names: Iterable[str]) -> str:
    """``"; my_rope: package my-rope 0.2.0"`` for the implementations among ``names`` that an installed package
    registers (a plugin): the commit column names this checkout's code only, so the log says which version of a
    kernel of one's own was timed. Empty where every one is this checkout's."""
    import rope

    parts = []
    for name in names:
        if name not in rope.available():
            continue
        top = rope.get(name).__module__.split(".")[0]
        if top == "rope":
            continue
        dists = importlib.metadata.packages_distributions().get(top) or []
        found = [f"{d} {importlib.metadata.version(d)}" for d in dists]
        parts.append(f"{name}: package {', '.join(found) or f'{top} (not installed: its version unknown)'}")
    return "".join(f"; {p}" for p in parts)


# -- command line ------------------------------------------------------------------------------------------------
#: ``--dtype``'s values, short and as torch spells them: every script takes both (they were one spelling each).
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


def add_common_args(parser: argparse.ArgumentParser, name: str, rope_path: bool = True) -> None:
    """``--out``, ``--smoke`` and (``rope_path``) ``--rope-path``/``--commit``, worded alike in every script."""
    parser.add_argument("--out", type=Path, default=None,
                        help=f"CSV file the rows are appended to (default: bench/results/{name}.csv; with --smoke: "
                             f"outputs/bench/{name}.csv)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on the CPU (Triton kernels under TRITON_INTERPRET=1): checks the script "
                             "end to end in seconds; its times mean nothing")
    if rope_path:
        parser.add_argument("--rope-path", default=None, metavar="DIR",
                            help="import rope from DIR/rope (another commit's code: git archive <commit> rope | "
                                 "tar -x -C DIR), not from this checkout")
        parser.add_argument("--commit", default=None,
                            help="what the commit column says (default: DIR/.commit, else git's HEAD of the "
                                 "imported rope code, else 'unknown')")


def out_path(args: argparse.Namespace, name: str) -> Path:
    if args.out is not None:
        return args.out
    return (SMOKE_RESULTS if args.smoke else RESULTS) / f"{name}.csv"


def pick_device(smoke: bool, script: str) -> torch.device:
    """CUDA for a measurement, the CPU for ``--smoke`` (with Triton's interpreter where triton is not imported yet;
    where it is, without the interpreter, the Triton entries are left out as unable to run on the CPU). One line
    and exit 2 where a measurement has no GPU."""
    if smoke:
        if "triton" not in sys.modules:  # read when triton is imported; later, a process keeps what it chose
            os.environ.setdefault("TRITON_INTERPRET", "1")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        _refuse(f"{script}: no CUDA GPU here (--smoke runs it at tiny shapes on the CPU)")
    return torch.device("cuda", torch.cuda.current_device())


def split_list(text: str | None, option: str | None = None) -> list[str]:
    """The comma-separated items of ``text``. With ``option`` named, an option given with no item in it (``--impls
    ,``) is refused in one line: an empty list must not fall back to the option's default, every implementation."""
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    if option is not None and text is not None and not items:
        _refuse(f"{option} takes a comma-separated list of one item or more, got {text!r}")
    return items


class Progress:
    """``[  12 s] message`` lines on stderr: long runs show where they are. Problems (an implementation that failed,
    an output far from the reference) are logged as they come and counted by :meth:`exit_code`."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.problems: list[str] = []

    def __call__(self, message: str) -> None:
        print(f"[{time.time() - self.t0:5.0f} s] {message}", file=sys.stderr, flush=True)

    def problem(self, message: str) -> None:
        self.problems.append(message)
        self(message)

    def exit_code(self, tool: str) -> int:
        """0, or 1 after one line counting the problems: a script or CI job running a benchmark must not take a run
        in which an implementation failed or computed something else for a clean one (its other rows are kept)."""
        if not self.problems:
            return 0
        self(f"{tool}: {len(self.problems)} problem(s), each logged above (first: {self.problems[0]}); the rows "
             "measured are kept")
        return 1


# -- the kernels' launch settings ---------------------------------------------------------------------------------
def parse_tuning(text: str | None) -> dict[str, object]:
    """``tiling=rows,tile=2048`` -> {"tiling": "rows", "tile": 2048}: the fields of ``--tuning``."""
    spec: dict[str, object] = {}
    for item in split_list(text):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise ValueError(f"--tuning takes FIELD=VALUE items separated by commas, got {item!r}")
        spec[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return spec


def triton_package():
    """``rope.triton`` of the rope code imported, or None where that code has none (an older commit's).

    Asked of the imported package's own folder: an editable install's import hook would otherwise find a
    ``rope/triton`` missing from a ``--rope-path`` tree in this checkout, and mix the two commits' code."""
    rope = importlib.import_module("rope")
    if not (Path(rope.__file__).parent / "triton" / "__init__.py").is_file():
        return None
    return importlib.import_module("rope.triton")


def _cutedsl_fields() -> set[str]:
    """The launch settings ``rope.cutedsl.tuning`` takes (none where the rope code imported has no such hook)."""
    cutedsl = sys.modules.get("rope.cutedsl") or importlib.import_module("rope.cutedsl")
    config = getattr(cutedsl, "CuteLaunchConfig", None)
    return {f.name for f in dataclasses.fields(config)} if hasattr(cutedsl, "tuning") and config else set()


def tuning(spec: dict[str, object]) -> contextlib.AbstractContextManager:
    """The benchmarks' one way to the kernels' launch settings: ``rope.cutedsl.tuning`` takes the ``cutedsl``
    entry's fields (``threads``, ``rows_per_thread``), ``rope.triton.tuning`` every other (``tiling``, ``tile``,
    ``num_warps``, ``maxnreg``); under both, launches take the given fields; no fields: a no-op.

    Why one function: launch settings are each kernel package's business, and a benchmark that reached into them
    in several places would have to follow every change of their internals."""
    if not spec:
        return contextlib.nullcontext()
    cute = {k: v for k, v in spec.items() if k in _cutedsl_fields()}
    rest = {k: v for k, v in spec.items() if k not in cute}
    with contextlib.ExitStack() as stack:  # a refused field leaves no setting of the other package behind
        if cute:
            stack.enter_context(importlib.import_module("rope.cutedsl").tuning(**cute))
        if rest:
            package = triton_package()
            if package is None or not hasattr(package, "tuning"):
                _refuse("--tuning: the rope code imported has no rope.triton.tuning hook")
            stack.enter_context(package.tuning(**rest))
        return stack.pop_all()


def check_tuning(spec: dict[str, object]) -> None:
    """A bad ``--tuning`` field or value: one line and exit 2, before any work."""
    try:
        with tuning(spec):
            pass
    except (TypeError, ValueError) as exc:  # the hook's message names the field
        _refuse(str(exc))


def plan_label(module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None) -> str:
    """The launch a Triton entry makes for these inputs, in a line (``rope.triton.plan_for``, under the current
    :func:`tuning`): which tiling a result row measured. Empty for other entries, and for rope code that cannot
    say (an older commit's)."""
    package = triton_package()
    if package is None or not hasattr(package, "plan_for") or not isinstance(module, package.TritonRotary):
        return ""
    return str(package.plan_for(module, q, k, positions))


# -- timing ------------------------------------------------------------------------------------------------------
class GpuTimer:
    """Microseconds of ``fn`` on the GPU: the lower of two medians of ``reps`` calls each, after warm-up calls.

    Before each timed call the L2 is flushed and the GPU sleeps while the host queues the call, so the time is the
    kernels' and the inputs come from memory. How the L2 is flushed is the benchmark's choice (``flush``), after
    what runs before its kernels in use:

    * ``"zero"``: :data:`FLUSH_BYTES` zeroed (``triton.testing.do_bench``'s flush). The call starts with an L2 of
      dirty lines, whose write-back it pays, and leaves its own: a training step's steady state, where each kernel
      writes as much as it reads (``bench.kernel``).
    * ``"read"``: :data:`FLUSH_BYTES` read (a sum into one element). The call starts with clean lines, which a miss
      drops for free: a decode step, whose kernels before the attention write almost nothing, so that a read-only
      call over a KV cache is not charged another kernel's write-back (``bench.attention``).

    Two medians, the lower kept: a pass disturbed by the host (another process compiling) reads high as a whole.
    """

    FLUSHES = ("zero", "read")

    def __init__(self, reps: int, device: torch.device, flush: str = "zero") -> None:
        if flush not in self.FLUSHES:
            raise ValueError(f"flush must be one of {self.FLUSHES}, got {flush!r}")
        self.reps = reps
        self.flush = flush
        self.buffer = torch.zeros(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)

    def flush_l2(self) -> None:
        """Evict what the L2 holds: zero :data:`FLUSH_BYTES` (dirty lines left) or read them (clean lines left)."""
        if self.flush == "zero":
            self.buffer.zero_()
        else:
            torch.sum(self.buffer, dim=0, out=self.sink)

    def _median(self, fn: Callable[[], object], reps: int) -> float:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in events:
            self.flush_l2()
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return 1e3 * statistics.median(s.elapsed_time(e) for s, e in events)

    def __call__(self, fn: Callable[[], object], reps: int | None = None) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        reps = reps or self.reps
        return min(self._median(fn, reps), self._median(fn, reps))


class WallTimer:
    """:class:`GpuTimer`'s interface on the CPU (``--smoke``): the median wall-clock microseconds of ``reps`` calls
    after one warm-up call."""

    def __init__(self, reps: int) -> None:
        self.reps = reps

    def __call__(self, fn: Callable[[], object], reps: int | None = None) -> float:
        fn()
        times = []
        for _ in range(reps or self.reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)


def make_timer(reps: int, device: torch.device, flush: str = "zero") -> GpuTimer | WallTimer:
    """The GPU timer (``flush``: :class:`GpuTimer`'s), or the wall clock's on the CPU (``--smoke``)."""
    return GpuTimer(reps, device, flush) if device.type == "cuda" else WallTimer(reps)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_gbps(timer: GpuTimer | WallTimer, nbytes: int, device: torch.device) -> float:
    """GB/s of a device-to-device copy of ``nbytes`` (bytes read plus bytes written): the 100% mark of a
    memory-bound kernel, measured on the same GPU in the same run."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    us = timer(lambda: dst.copy_(src), reps=10)
    return 2 * nbytes / (us * 1e-6) / 1e9


# -- results -----------------------------------------------------------------------------------------------------
def _cell(value: object) -> object:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


class ResultsCsv:
    """An append-only CSV with a fixed header: every run adds rows, none rewrites what is there.

    A path no rows can go to (a folder, under a file, a folder or file this user cannot write, a read-only file
    system) and a file whose header differs (written by another version of the benchmark) are refused before any
    work, in one line and exit 2, rather than failing at the first row, after its measurement, or mixing rows of
    another meaning.
    """

    #: Rows each file got from this process, for the line a Ctrl-C ends with (:func:`run_main`).
    appended: dict[Path, int] = {}

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path, self.columns = Path(path), list(columns)
        above = next((p for p in self.path.parents if p.exists()), None)
        if self.path.exists() and not self.path.is_file():
            _refuse(f"--out {self.path}: not a file; name the CSV file the rows are appended to")
        if above is not None and not above.is_dir():
            _refuse(f"--out {self.path}: {above} is a file, not a folder")
        if self.path.is_file() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                header = next(csv.reader(f), [])
            if header != self.columns:
                _refuse(f"{self.path}: its columns are not the ones this benchmark writes "
                        f"({','.join(self.columns)}); append to another file with --out")
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # a row cut short, or an edit without a final newline: the next row joins it
                    _refuse(f"{self.path}: its last line has no line end (a row cut short, or an edit): mend or "
                            "remove it, or append to another file with --out")
        self._try_to_open()

    def _try_to_open(self) -> None:
        """Open the file for appending once, then leave the file system as it was: permission bits alone cannot say
        whether a file can be made there (root passes them; a read-only mount or ``/proc`` still refuses)."""
        made = [p for p in (self.path, *self.path.parents) if not p.exists()]  # the file first, then its folders
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab"):
                pass
        except OSError as e:
            _refuse(f"--out {self.path}: cannot be written ({e.strerror or e}); name a CSV file in a folder you can "
                    "write")
        finally:
            for p in made:
                with contextlib.suppress(OSError):
                    p.unlink() if p == self.path else p.rmdir()

    def line_ending(self) -> str:
        """The line ending of the file's header (``\n`` or ``\r\n``; a new file: the csv module's ``\r\n``):
        appends keep the file's own style, so that no file mixes the two."""
        if not (self.path.is_file() and self.path.stat().st_size):
            return "\r\n"
        with open(self.path, "rb") as f:
            first = f.readline()
        return "\r\n" if first.endswith(b"\r\n") else "\n"

    def append(self, rows: Iterable[dict]) -> None:
        """Append ``rows`` whole or not at all: they are formatted first and written in one call, so that an
        interrupt (Ctrl-C) never leaves part of a row, or part of one measurement's rows, in the file."""
        rows = list(rows)
        if not rows:
            return
        new = not (self.path.is_file() and self.path.stat().st_size)
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=self.columns, extrasaction="raise", lineterminator=self.line_ending())
        if new:
            writer.writeheader()
        writer.writerows([{k: _cell(v) for k, v in row.items()} for row in rows])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                f.write(text.getvalue().encode())
            ResultsCsv.appended[self.path] = ResultsCsv.appended.get(self.path, 0) + len(rows)
        except OSError as e:  # a disk that filled up, a folder removed mid-run: the measurement is not lost
            sys.stdout.write(text.getvalue())
            print(f"{self.path}: {len(rows)} row(s) could not be appended ({e.strerror or e}); they are on stdout "
                  "above, the rows before them are in the file", file=sys.stderr)
            raise SystemExit(1) from None


def run_main(main: Callable[[], int], tool: str) -> NoReturn:
    """A benchmark's ``__main__``: its exit code, and a Ctrl-C (or the SIGINT a job scheduler sends) as one line,
    exit 130, saying where the rows measured before it are (each was appended as it was measured), instead of a
    traceback from wherever the interpreter was."""
    from llm.entry import started

    started()  # the signals bench/__init__.py held while the script's modules loaded come back
    try:
        code = main()
    except KeyboardInterrupt:
        kept = ", ".join(f"{n} row(s) in {path}" for path, n in ResultsCsv.appended.items() if n)
        print(f"\n{tool}: interrupted; {kept or 'no rows were written'}", file=sys.stderr, flush=True)
        code = 130
    raise SystemExit(code)


def ignore_ctrl_c() -> None:
    """A worker process's initializer: a Ctrl-C at the terminal reaches every process of its group, and the parent
    alone answers it (its pool ends the workers), so no worker prints a traceback of its own."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _refuse(message: str) -> NoReturn:
    """A user error of a benchmark's command line: one line on stderr, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric_from: int = 0) -> list[str]:
    """Lines of a Markdown table; columns from ``numeric_from`` on are right-aligned (numbers)."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def heads_of(row: dict) -> str:
    """The heads of a kernel row's shape (B x T x H x D, or packed B T x H x D): ``16``, or ``32/8`` (q's/k's)."""
    return row["shape"].split("x")[-2]


#: The form of the cells a reader splits: a kernel row's shape (B x T x H x D, or packed B T x H x D; the heads
#: ``16`` or ``32/8``) and an attention row's heads (``32/8``).
CELL_FORMS = {"shape": re.compile(r"(\d+x)+\d+(/\d+)?x\d+"), "heads": re.compile(r"\d+/\d+")}


def read_rows(path: Path, numeric: Sequence[str] = (), integer: Sequence[str] = (), forms: Sequence[str] = (),
              infinite_ok: Sequence[str] = ()) -> list[dict[str, str]]:
    """Every row of a results CSV (an absent file: none). A row with fewer or more cells than the header (a line cut
    short by a crash, an edit), a cell that is not a finite number in a ``numeric`` column (the writer leaves a
    missing value empty, never ``nan``; ``infinite_ok`` columns may hold ``inf``, such as the error of outputs that
    overflowed), not a whole number in an ``integer`` one, or not of its :data:`CELL_FORMS` form in a ``forms`` one
    is refused in one line naming the file, line and column, exit 2: left out or read as another value, it would
    change a table or a comparison without a word, or end in a traceback."""
    if not Path(path).is_file():
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = []
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            if None in row or None in row.values():
                cells = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None) or [])
                _refuse(f"{where}: {cells} cells where the header has "
                        f"{len(reader.fieldnames or [])}: a row cut short or edited; mend or remove that line")
            for key in numeric:
                value = row.get(key, "")
                if value:
                    try:
                        number = float(value)
                        finite = math.isfinite(number) or (key in infinite_ok and math.isinf(number))
                    except ValueError:
                        finite = False
                    if not finite:
                        _refuse(f"{where}: {key} is {value!r}, not a finite number; mend or remove that line")
            for key in integer:
                value = row.get(key, "")
                if value and not value.lstrip("-").isdigit():
                    _refuse(f"{where}: {key} is {value!r}, not a whole number; mend or remove that line")
            for key in forms:
                value = row.get(key, "")
                if value and not CELL_FORMS[key].fullmatch(value):
                    _refuse(f"{where}: {key} is {value!r}, not of the form this benchmark writes; mend or remove "
                            "that line")
            rows.append(row)
    return rows


def rope_config(name: str):
    """``conf/rope/<name>.yaml`` (a registered name without one: its defaults), for the benchmarks that build the
    project's model."""
    from omegaconf import OmegaConf

    path = ROOT / "conf" / "rope" / f"{name}.yaml"
    return OmegaConf.load(path) if path.is_file() else OmegaConf.create({"name": name})


def model_config(name: str, parser: argparse.ArgumentParser):
    """``conf/model/<name>.yaml``, or the parser's one-line error naming the presets."""
    from omegaconf import OmegaConf

    path = ROOT / "conf" / "model" / f"{name}.yaml"
    if not path.is_file():
        parser.error(f"--model {name}: no conf/model/{name}.yaml; the presets: "
                     f"{', '.join(sorted(p.stem for p in path.parent.glob('*.yaml')))}")
    return OmegaConf.load(path)


def registered(names: Sequence[str], device: torch.device, parser: argparse.ArgumentParser,
               log: Callable[[str], None]) -> list[str]:
    """``names`` checked against the registry (an unknown one is the parser's one-line error), those that cannot
    run on ``device`` left out with a note."""
    import rope

    unknown = [n for n in names if n not in rope.available()]
    if unknown:
        parser.error(f"unknown RoPE implementation(s) {', '.join(unknown)}; available: {', '.join(rope.available())}")
    kept = []
    for name in names:
        reason = rope.get(name).unavailable_reason(device)
        if reason:
            log(f"{name} left out: {reason}")
        else:
            kept.append(name)
    return kept
