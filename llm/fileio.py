"""Files that are either whole or absent: the one atomic-write helper every writer in ``llm`` uses.

Why: a run is interrupted at any byte (Ctrl-C twice, ``kill -9``, a full disk). Readers (resume,
the comparison, the data cache) must never see half a file, and a failed write must leave neither
a half-written temporary behind nor a traceback the user has to decode. So every write goes to a
temporary beside the target, is flushed and fsynced, then renamed over it; any failure, including
``KeyboardInterrupt``, removes the temporary; a full disk becomes :class:`DiskFullError` naming the
file.

The one lock protocol on a directory (:func:`lock_file`: a run dir's, a data cache dir's) lives here too, for the
same reason: a holder interrupted at any point, or one that removes what it locked, must never leave the next
process a directory it mistakes for its own. Only the standard library is imported: the report reads run dirs
without torch.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

#: Suffix of every temporary this module writes (``<name>.tmp<pid>``); :func:`remove_stale_temps` finds them.
TMP_MARK = ".tmp"

# Below this many free bytes a failed write is reported as a full disk even when the library that wrote
# (torch.save's zip writer, for one) lost the errno on the way up.
_FULL_DISK_SLACK = 1 << 20


class DiskFullError(OSError):
    """No space left on the device while writing ``path``; the message says so in one line."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.ENOSPC, f"no space left on device writing {path}")
        self.path = path

    def __str__(self) -> str:
        return f"no space left on device writing {self.path}"


def _is_disk_full(exc: BaseException, directory: Path) -> bool:
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
    if isinstance(exc, (OSError, RuntimeError)):
        try:
            return shutil.disk_usage(directory).free < _FULL_DISK_SLACK
        except OSError:
            return False
    return False


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_path(path: str | os.PathLike) -> Path:
    """The temporary a writer of ``path`` in this process uses (unique per process)."""
    path = Path(path)
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write ``path`` through; on success it is fsynced and renamed into place.

    Any exception (``KeyboardInterrupt`` too) removes the temporary and re-raises, a full disk as
    :class:`DiskFullError`. The caller writes the temporary however it likes (``torch.save``, ``np.tofile``).
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if _is_disk_full(exc, path.parent):
            raise DiskFullError(path) from exc
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """``open(path, mode)`` that lands whole or not at all (see :func:`atomic_path`)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp, open(tmp, mode) as f:
        yield f


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_files_whole(write: Callable[[Path], Path], out: Path) -> Path:
    """``write(dir)`` (which writes a set of files, such as a report's Markdown, CSV and plots, and returns one of
    them) into a temporary dir beside ``out``, then the files moved into ``out``; returns the moved path of the one
    ``write`` returned. Why: Ctrl-C or a failure midway leaves ``out`` as it was, never a new Markdown file beside an
    earlier report's plots and CSV."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial", dir=out.parent))
    try:
        named = write(tmp)
        out.mkdir(exist_ok=True)
        for f in sorted(tmp.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / named.name


def _no_nonfinite(value: float) -> None:
    """null: the "no value" every reader already checks for."""
    return None


def json_safe(obj: Any, nonfinite: Callable[[float], Any] = _no_nonfinite) -> Any:
    """``obj`` with every non-finite float (in dicts, lists and tuples, at any depth) replaced by ``nonfinite(v)``:
    ``json.dumps`` would write it as ``NaN``/``Infinity``, which is not JSON (a browser's or jq's parser fails)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return nonfinite(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v, nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, nonfinite) for v in obj]
    return obj


def write_json_atomic(path: str | os.PathLike, obj: Any, nonfinite: Callable[[float], Any] = _no_nonfinite) -> None:
    """JSON through :func:`atomic_open` (non-JSON values as ``str``), so readers never see half a file.

    Non-finite floats become ``nonfinite(v)`` (default: null), so the file is valid JSON for any reader;
    ``allow_nan=False`` makes a value this misses an error here, not an unreadable file."""
    text = json.dumps(json_safe(obj, nonfinite), indent=2, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def read_jsonl(path: str | os.PathLike) -> tuple[list[dict], int]:
    """The JSON objects of a line-per-record file and how many unreadable lines were skipped.

    Appended files (``metrics.jsonl``) are not written atomically: a crash can leave a torn last
    line, which readers skip (and report) rather than fail on.
    """
    records, dropped = [], 0
    path = Path(path)
    if not path.is_file():
        return records, dropped
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records, dropped


def remove_stale_temps(directory: str | os.PathLike) -> list[Path]:
    """Delete temporaries a killed writer left in ``directory`` (call only while owning it); returns them."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = [p for p in directory.iterdir() if p.is_file() and TMP_MARK in p.name]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


# -- directory locks ------------------------------------------------------------------------------------------
class LockBusyError(Exception):
    """Another process holds the lock a non-blocking :func:`lock_file` asked for; ``holder`` is what that process
    wrote into the lock file (its pid, say), empty where it wrote nothing yet. The caller words the refusal."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by another process" + (f" ({holder})" if holder else ""))
        self.path, self.holder = path, holder


@dataclass(frozen=True)
class LockedFile:
    """A lock :func:`lock_file` took: the open descriptor that holds it (closing it releases the lock), and whether
    this call created the lock file (nobody had locked it there before)."""

    fd: int
    created: bool


def lock_text(fd: int) -> str:
    """What a lock's holder wrote at the start of its lock file (its pid, say), stripped; empty when nothing yet."""
    return os.pread(fd, 64, 0).decode(errors="replace").strip()


def _is_current(fd: int, path: Path) -> bool:
    """True when ``fd`` is still the file named ``path`` (its holder did not remove or replace it)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _open_lock(path: Path) -> tuple[int, bool] | None:
    """(descriptor, created) of the lock file ``path``, or None when its directory vanished meanwhile (try again)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        pass
    except FileNotFoundError:  # a holder removed the directory between our mkdir and open
        return None
    try:
        return os.open(path, os.O_RDWR), False
    except FileNotFoundError:  # removed between the two opens
        return None


def _make_parents(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def lock_file(path: str | os.PathLike, block: bool, make_dir: Callable[[Path], None] = _make_parents,
              on_wait: Callable[[], None] | None = None) -> LockedFile:
    """Take the exclusive ``flock`` of the lock file ``path``, creating it and its directory (``make_dir``) as needed.

    ``block``: wait for another holder (``on_wait()`` is called first, to say so), else raise
    :class:`LockBusyError` naming what the holder wrote into the file. Writes nothing into the file itself.

    Why this protocol, shared by every lock on a directory (a run dir, a data cache dir): the lock is advisory, per
    open file, and released by the kernel when its process dies, so a killed holder never blocks the next. A holder
    may remove the lock file and its directory before it lets go (a run refused, a cache build that failed), which
    is safe only because a process that got the lock then checks that the file it locked still has the lock file's
    name: a lock on a removed file guards nothing, so it starts over, recreating the directory and the file."""
    path = Path(path)
    while True:
        make_dir(path.parent)
        opened = _open_lock(path)
        if opened is None:
            continue
        fd, created = opened
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not block:
                    raise LockBusyError(path, lock_text(fd)) from None
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _is_current(fd, path):
                return LockedFile(fd, created)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder removed the file we locked: start over
