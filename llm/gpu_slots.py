"""Places for a sweep's parallel jobs on the visible devices: never more than ``per_device`` jobs on one device.

Why slots rather than the job number: Hydra's joblib launcher starts the next job as soon as any of its workers
is free, whatever device the job that ended had used. Job n on ``cuda:(n mod GPUs)`` therefore puts more jobs on
one GPU than it can hold whenever jobs end out of order (the jobs of a 4-GPU sweep with 4 per GPU ran up to 7 on
one GPU, and ran out of memory at their first eval). Instead each job claims a free slot, ``(device, place)``,
for its whole life: an exclusive ``flock`` on ``<sweep dir>/.gpu_slots/<device>.<place>.lock``, released when
the job ends, and by the kernel when its process dies, so a crashed or killed job never keeps its slot. With as
many workers as slots a job always finds one free; a job that finds none (another process runs jobs of the same
sweep) waits for one, saying so, rather than crowding a device.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

#: The folder of a sweep dir that holds its slots' lock files (a dot name: not a job dir).
SLOTS_DIR = ".gpu_slots"


def slot_order(devices: int, per_device: int) -> list[tuple[int, int]]:
    """Every ``(device, place)`` slot, in the order a job tries them: the first place of every device before the
    second of any, so fewer jobs than slots still spread over all devices."""
    if devices < 1 or per_device < 1:
        raise ValueError(f"devices={devices} and per_device={per_device} must be positive")
    return [(device, place) for place in range(per_device) for device in range(devices)]


class Slot:
    """One claimed ``(device, place)``: held until :meth:`release` (or the process ends)."""

    def __init__(self, device: int, place: int, path: Path, fd: int) -> None:
        self.device, self.place, self.path = device, place, path
        self._fd: int | None = fd

    @property
    def name(self) -> str:
        return f"{self.device}.{self.place}"

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def try_claim(slot_dir: Path, devices: int, per_device: int) -> Slot | None:
    """The first free slot, now held by this caller, or None when every slot is held. Each attempt opens its own
    descriptor, so two claims of one process exclude each other as two processes do."""
    slot_dir.mkdir(parents=True, exist_ok=True)
    for device, place in slot_order(devices, per_device):
        path = slot_dir / f"{device}.{place}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return Slot(device, place, path, fd)
    return None


def claim(slot_dir: Path, devices: int, per_device: int, *, label: str = "job", poll_s: float = 0.5,
          say_every_s: float = 60.0, say: Callable[[str], None] | None = None) -> Slot:
    """A free slot, waiting for one while all are held: a line when the wait starts, then one every
    ``say_every_s`` seconds (``say``, default stderr), so a waiting job is never silent or crowding a device."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    started = last_said = None
    while (slot := try_claim(slot_dir, devices, per_device)) is None:
        now = time.monotonic()
        if started is None:
            started = last_said = now
            say(f"{label}: all {devices * per_device} device slots in {slot_dir} are held (another process runs "
                f"jobs of this sweep); waiting for one to free")
        elif now - last_said >= say_every_s:
            last_said = now
            say(f"{label}: still waiting for a device slot in {slot_dir} ({now - started:.0f} s)")
        time.sleep(poll_s)
    return slot
