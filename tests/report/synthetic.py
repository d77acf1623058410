"""Synthetic run dirs with planted numbers, written the way the training app writes them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

CONFIG = {
    "seed": 0,
    "rope": {"name": "torch", "variant": "partial", "base": 10000.0, "compute_dtype": "float32"},
    "model": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 64, "seq_len": 128},
    "data": {"name": "tinystories"},
    "tokenizer": {"name": "gpt2"},
    "train": {"max_steps": 100, "batch_size": 8, "grad_accum": 1, "eval_every": 50},
    "optim": {"name": "adamw"},
    "logger": {"name": "none"},
    "sweep": {"name": "synth"},
    "device": "cpu",
}


def config_for(rope: str, seed: int, variant: str = "partial", dtype: str | None = "float32",
               logger: dict | None = None) -> dict:
    cfg = copy.deepcopy(CONFIG)
    cfg["seed"] = seed
    cfg["rope"].update({"name": rope, "variant": variant, "compute_dtype": dtype})
    if logger is not None:
        cfg["logger"] = logger
    return cfg


#: The data fingerprint synthetic runs record (``summary["data_fingerprint"]``), as the trainer writes it.
DATA = {"source": "tinystories", "corpus": None, "tokenizer": "gpt2", "split": {"val_fraction": None},
        "tokens_sha256": {"train": "a" * 64, "val": "b" * 64}, "id": "c" * 64}


def write_run(run_dir: Path, rope: str, seed: int, val_loss: float, val_acc: float = 0.4, *,
              variant: str = "partial", dtype: str | None = "float32", status: str = "completed",
              message: str | None = None, curve: dict[int, float] | None = None,
              extra: dict | None = None, logger: dict | None = None, data: dict | None = DATA,
              windows: list[float] | None = None, starts: list[int] | None = None) -> Path:
    """A finished run: config.yaml + .hydra/, metrics.jsonl with val lines (``curve``: step -> val loss),
    summary.json with ``data`` as its data fingerprint (None: a run from before fingerprints), and with
    ``windows`` an eval_windows.json of the final eval (window ``i`` starting at ``starts[i]``, default i*128)."""
    cfg = config_for(rope, seed, variant, dtype, logger)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    curve = curve if curve is not None else {50: val_loss + 0.5, 100: val_loss}
    lines = [{"kind": "val", "step": s, "val_loss": v, "val_acc": val_acc, "train_time_s": s / 10}
             for s, v in sorted(curve.items())]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = {"rope": rope, "variant": variant, "compute_dtype": dtype, "seed": seed, "status": status,
               "step": 100, "train_time_s": 10.0, "val_loss": val_loss, "val_acc": val_acc,
               "val_ppl": 2.718 ** val_loss, "tokens_per_s": 1000.0, "device": "cpu", **(extra or {})}
    if message is not None:
        summary["message"] = message
    if data is not None:
        summary["data_fingerprint"] = data
    (run_dir / "summary.json").write_text(json.dumps(summary))
    if windows is not None:
        starts = starts if starts is not None else [128 * i for i in range(len(windows))]
        (run_dir / "eval_windows.json").write_text(json.dumps({"step": 100, "seq_len": 128, "starts": starts,
                                                               "loss": windows}))
    return run_dir


def write_sweep(root: Path, values: dict[tuple[str, str | None], dict[int, tuple[float, float]]],
                **kwargs) -> Path:
    """A multirun dir: one job dir per (implementation, seed) with (val_loss, val_acc) from ``values``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    job = 0
    for (rope, dtype), per_seed in values.items():
        for seed, (loss, acc) in per_seed.items():
            write_run(root / f"{job}_{rope}_{dtype}_s{seed}", rope, seed, loss, acc, dtype=dtype, **kwargs)
            job += 1
    return root


# Seed-to-seed spread (0.1 nats) much larger than the implementation effects planted below, so only a
# paired analysis can see them.
SEED_LOSS = {0: 3.00, 1: 3.12, 2: 2.95, 3: 3.20, 4: 3.05}
SEED_ACC = {0: 0.40, 1: 0.37, 2: 0.42, 3: 0.35, 4: 0.39}
JITTER = {0: 0.002, 1: -0.001, 2: 0.000, 3: -0.002, 4: 0.001}  # small per-seed noise of a paired Δ


def planted(delta: float, seeds=(0, 1, 2, 3, 4), jitter: float = 1.0, acc_delta: float = 0.0,
            offset: int = 0) -> dict[int, tuple[float, float]]:
    """Per seed ``(val_loss, val_acc)`` = the reference's values + ``delta`` (+ scaled jitter).

    ``offset`` renumbers the seeds (seed s becomes s + offset) with the same values: unmatched seeds.
    """
    return {s + offset: (SEED_LOSS[s] + delta + jitter * JITTER[s], SEED_ACC[s] + acc_delta - jitter * JITTER[s])
            for s in seeds}


def reference(seeds=(0, 1, 2, 3, 4)) -> dict[int, tuple[float, float]]:
    return {s: (SEED_LOSS[s], SEED_ACC[s]) for s in seeds}
