"""Shared helpers for the tests: small configs, in-process and CLI runs, a fake multi-GPU ``torch.cuda``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

# A model and data small enough for a 2-core CPU. The byte tokenizer: cl100k's 100k-row head, not the model, set
# the cost of every step and eval (tests of what a BPE vocabulary changes set tokenizer= themselves). Evals take
# one batch (tests of what several batches add up to, or split across ranks, set train.eval_batches=2 themselves).
SMALL = [
    "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.seq_len=32", "tokenizer=bytes",
    "train.batch_size=4", "train.eval_batches=1", "train.log_every=5", "train.eval_every=10",
    # a fifth of the files in val, not the default twentieth: of 40 files that leaves 2 to 7 of them in val
    # in Python 3.10 to 3.13, where the default's one fallback document can be a file of 25 tokens, too short for
    # one window
    "data.max_files=40", "data.val_fraction=0.2", "logger=none",
]


#: RoPE entries that on float32 inputs run another entry's code: triton_v2's input-dtype arithmetic is float32 there,
#: so rope/triton/launch.py launches triton_v4's kernels with triton_v4's arguments (the low-precision code only
#: below float32); tests/rope/test_triton.py's test_v2_equals_v4_on_float32 holds the two bit for bit equal.
FLOAT32_SAME_AS = {"triton_v2": "triton_v4"}


def float32_entries(names: list[str]) -> list[str]:
    """``names`` less the entries that on float32 inputs run the code of another entry in ``names``: a float32 test
    of every implementation runs that code once."""
    return [n for n in names if FLOAT32_SAME_AS.get(n) not in names]


def compose_cfg(overrides: list[str], small: bool = True) -> DictConfig:
    """The composed config, with SMALL's CPU-sized overrides first unless ``small=False``."""
    if not small:
        base = []
    elif any(o.startswith("data=") for o in overrides):
        base = [o for o in SMALL if not o.startswith("data.")]  # the stdlib's keys, not every source's
    else:
        base = SMALL
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[*base, *overrides])


def run_inprocess(tmp: Path, overrides: list[str]) -> dict:
    """Train in this process through the entry point's ``train`` (exits like the CLI when a run fails);
    the overrides count as the command line (a resume may apply the safe ones)."""
    from llm.train import train

    cfg = compose_cfg(overrides)
    return train(cfg, tmp, overrides=tuple(overrides))


def eval_lengths_inprocess(run_dir: Path, *overrides: str) -> tuple[dict, list[str]]:
    """``python -m llm.eval_lengths run=RUN_DIR device=cpu OVERRIDES`` in this process: its record and the lines it
    printed (on the CPU, as the suite's runs are trained: a GPU's evaluation differs in the 6th digit)."""
    from llm.evaluation.lengths import eval_lengths_from_config

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("eval_lengths", overrides=[f"run={run_dir}", "device=cpu", *overrides])
    lines: list[str] = []
    result, _ = eval_lengths_from_config(cfg, emit=lines.append)
    return result, lines


def short_documents_only(monkeypatch, most: int) -> None:
    """The val split's documents, as ``llm.eval_lengths`` reads them, as if none had ``most`` tokens (cut short)."""
    import numpy as np

    from llm.evaluation import lengths

    real = lengths.document_segments

    def cut(tokens, eot):
        seg = real(tokens, eot)
        return type(seg)(seg.starts, np.minimum(seg.lengths, most - 1))

    monkeypatch.setattr(lengths, "document_segments", cut)


def run_cli(args: list[str], timeout: float = 600, extra_env: dict | None = None,
            module: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", **(extra_env or {})}
    flags = [a for a in args if a.startswith("-")]  # Hydra wants -m before the overrides
    overrides = [a for a in args if not a.startswith("-")]
    cmd = [sys.executable, "-m", *(module or ["llm.train"]), *flags, *SMALL, *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_command_inprocess(args: list[str], small: bool = True, multirun: bool = True) -> int:
    """``python -m llm.train -m [SMALL] ARGS`` (``multirun=False``: without ``-m``) in this process: Hydra's own
    multirun (sweeper, launcher, callbacks) or single run through the entry point, and the exit code the command
    would end with. For tests that need Hydra's machinery but not a process of their own: a new process would
    import torch, Hydra and the app again.

    Hydra configures the process as a command's own: the root logger's handlers (its console handler writes to
    the ``sys.stdout`` of the moment, which ``capsys`` reads), its global state, the environment (the entry point
    sets ``HYDRA_FULL_ERROR``), and the run sets torch's deterministic mode. All of it is put back afterwards, so
    the tests that run next in this process see none of it.
    """
    import logging

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from llm.entry import run_entry
    from llm.sweep import FAILED_JOBS
    from llm.train import main

    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    saved_env, saved_argv = dict(os.environ), sys.argv
    saved_deterministic = torch.are_deterministic_algorithms_enabled()
    # an absolute --config-path: imported, llm.train's "../conf" would be looked up as a Python package
    base = [] if not small else [o for o in SMALL if not o.startswith("data.")] if any(
        a.startswith("data=") for a in args) else SMALL  # as compose_cfg: SMALL's data keys are the stdlib's
    sys.argv = ["llm.train", *(["-m"] if multirun else []), f"--config-path={CONF}", *base, *args]
    try:
        run_entry(main)
        return 1 if FAILED_JOBS else 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
        FAILED_JOBS.clear()
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        torch.use_deterministic_algorithms(saved_deterministic)


def run_module_main(monkeypatch, capsys, module: str, args: list[str]) -> tuple[int, list[str]]:
    """``python -m <module> ARGS`` in this process, its ``__main__`` block included: the exit code and the non-empty
    lines written to stderr. For the commands' refusals (before any work), which need the entry point, not a process
    of their own. The environment variables the entry point sets are put back afterwards (``monkeypatch``)."""
    import runpy

    import pytest

    for name in ("HYDRA_FULL_ERROR", "ROPELAB_USER_FULL_ERROR"):
        monkeypatch.setenv(name, "")  # (delenv alone records nothing for an unset variable)
        monkeypatch.delenv(name)
    monkeypatch.delitem(sys.modules, module, raising=False)  # run as __main__, as `python -m` runs it
    monkeypatch.setattr(sys, "argv", [module, *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        runpy.run_module(module, run_name="__main__")
    return done.value.code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def train_losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_metrics(run_dir) if m["kind"] == "train"}


def val_losses(run_dir: Path) -> dict[int, float]:
    return {m["step"]: m["val_loss"] for m in read_metrics(run_dir) if m["kind"] == "val"}


def _wandb_records(raw: bytes) -> list:
    """The protobuf records of a wandb transaction log's bytes (framing: see :func:`read_wandb_run`)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    block = 32768
    pos, payloads, partial = 7, [], b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if pos + 7 + length > len(raw):  # a record still being written
            break
        if kind == 0:
            pos += left
            continue
        data, pos = raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            payloads.append(data)
        elif kind == 2:
            partial = data
        elif kind == 3:
            partial += data
        elif kind == 4:
            payloads.append(partial + data)
    records = []
    for data in payloads:
        rec = pb.Record()
        rec.ParseFromString(data)
        records.append(rec)
    return records


def read_wandb_run(wandb_file: Path, wait_s: float = 30.0) -> dict:
    """Decode an offline ``run-*.wandb`` transaction log (LevelDB-style log of protobuf records).

    wandb no longer ships a Python reader, so the tests decode the documented log framing: a 7-byte
    file header, then 32 KiB blocks of records, each with a 7-byte header (crc32, length, type).
    wandb's service process writes the log on its own schedule: once in CI (2 cores, under load) the log
    read right after ``run.finish()`` held no ``run`` record, most likely not yet written out. So this
    re-reads the file until its ``exit`` record (a finished run's last) is there, for up to ``wait_s``
    seconds, and decodes only whole records.
    """
    import time

    deadline = time.monotonic() + wait_s
    while True:
        raw = Path(wandb_file).read_bytes()
        records = _wandb_records(raw) if raw[:4] == b":W&B" else []
        if any(rec.WhichOneof("record_type") == "exit" for rec in records) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert raw[:4] == b":W&B", "not a wandb transaction log"
    out = {"history": [], "summary": {}, "config": {}, "group": None, "name": None}
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            out["group"], out["name"] = rec.run.run_group, rec.run.display_name
            out["config"] = {i.key: json.loads(i.value_json) for i in rec.run.config.update}
        elif kind == "history":
            out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            out["summary"].update({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                   for i in rec.summary.update})
    return out


class FakeGpus:
    """``torch.cuda`` as a machine with ``count`` GPUs answers it, for CPU tests of code that picks a device:
    ``is_available``, ``device_count``, the current device (``current``, 0 at first), ``set_device`` (logged in
    ``set_calls``; an index-less device refused, as torch refuses it) and the ``torch.cuda.device`` context."""

    def __init__(self, monkeypatch, count: int = 2) -> None:
        self.current = 0
        self.set_calls: list[torch.device] = []
        fake = self

        class Switch:
            def __init__(self, device) -> None:
                self.index = device if isinstance(device, int) else torch.device(device).index

            def __enter__(self):
                self.before, fake.current = fake.current, self.index

            def __exit__(self, *exc):
                fake.current = self.before

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", self._set_device)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "device", Switch)

    def _set_device(self, device) -> None:
        device = torch.device(device)
        if device.index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        self.set_calls.append(device)
        self.current = device.index


# The child sends itself a SIGINT as ``module`` starts importing ``trigger``: a real Ctrl-C while its modules load.
_CTRL_C_WHILE_IMPORTING = """
import builtins, json, os, runpy, signal, sys
module, trigger, argv = json.loads(sys.argv[1])
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it (a background job ignores Ctrl-C)
real_import = builtins.__import__
def importing(name, *args, **kwargs):
    if name == trigger:
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = importing
sys.argv = argv
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def ctrl_c_while_importing(module: str, trigger: str, argv: list[str]) -> subprocess.CompletedProcess:
    """``python -m <module>`` in a child process of the checkout that gets a Ctrl-C as it starts importing
    ``trigger``; ``argv`` is its ``sys.argv`` while the module is found (``python -m`` leaves ``["-m", ...]`` there
    until then). Its exit code and output, for the commands' one-line stop while they load."""
    return subprocess.run([sys.executable, "-c", _CTRL_C_WHILE_IMPORTING, json.dumps([module, trigger, argv])],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
