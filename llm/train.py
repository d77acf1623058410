"""Train a GPT whose RoPE comes from the registry: ``python -m llm.train [overrides]``.

One process, or one per GPU under ``torchrun``. Every run writes into its Hydra run dir:
``config.yaml`` (resolved), ``metrics.jsonl`` (flushed per line), ``summary.json``, ``checkpoints/``
and, unless ``logger=none``, an offline wandb run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from llm.checkpoint import load_checkpoint, resolve_resume, save_checkpoint, set_rng_state
from llm.config_check import validate_config
from llm.data import TokenData, prepare_data, sample_batch
from llm.distributed import DistInfo, all_reduce_mean, any_rank, cleanup, init_distributed
from llm.evaluate import evaluate
from llm.model import GPT, build_model
from llm.optim import build_optimizers, lr_multiplier, set_lr
from llm.tracking import MetricsWriter, Tracker, write_json_atomic

log = logging.getLogger("llm.train")

# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' datasheets, for the MFU estimate.
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10G": 125.0,
                    "4090": 165.0, "3090": 71.0}


class StopTraining(Exception):
    """Raised inside the loop to end a run early with a status and a message for the user."""

    def __init__(self, status: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.status, self.exit_code = status, exit_code


def pick_device(name: str, dist_info: DistInfo) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device=cuda but no CUDA GPU is visible; use device=cpu or device=auto")
        if device.index is None:
            device = torch.device("cuda", dist_info.local_rank if dist_info.enabled else 0)
        torch.cuda.set_device(device)
    return device


def peak_tflops(setting, device: torch.device) -> float | None:
    if setting not in (None, "auto"):
        return float(setting)
    if device.type != "cuda":
        return None
    gpu = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in gpu), None)


def git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if sha.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def attention_backend(name: str):
    """Context restricting scaled_dot_product_attention to one kernel (``train.attention``); auto: no limit."""
    if name == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([backends[name]])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class GracefulStop:
    """First Ctrl-C/SIGTERM asks the loop to checkpoint and stop; a second Ctrl-C aborts at once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum
        tqdm.write(f"\n{signal.Signals(signum).name} received: finishing this step, then checkpointing "
                   "(press Ctrl-C again to abort without a checkpoint)")

    def __enter__(self) -> GracefulStop:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def rope_label(cfg: DictConfig) -> str:
    """The RoPE implementation as runs are told apart: name, variant, non-default compute dtype."""
    r = cfg.rope
    parts = [r.name] if r.name == "none" else [r.name, r.get("variant", "partial")]
    if r.get("compute_dtype") not in (None, "float32"):
        parts.append(r.compute_dtype)
    return "-".join(parts)


def run_name(cfg: DictConfig) -> str:
    return f"{rope_label(cfg)}-s{cfg.seed}"


def train(cfg: DictConfig, run_dir: Path, group: str = "single", resume_hint: str = "") -> dict:
    """Train as ``cfg`` says, writing into ``run_dir``; returns the summary (also in summary.json)."""
    wall_start = time.perf_counter()
    dist_info = init_distributed(torch.device("cuda" if cfg.device != "cpu" and torch.cuda.is_available()
                                              else "cpu"))
    validate_config(cfg, world_size=dist_info.world_size)
    if dist_info.enabled:  # every rank works in rank 0's run dir (checkpoints to resume from)
        shared = [str(run_dir)]
        torch.distributed.broadcast_object_list(shared, src=0)
        run_dir = Path(shared[0])
    deterministic = bool(cfg.train.get("deterministic"))  # same seed -> same bits (slower)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # strict: an op with no deterministic kernel raises instead of silently varying between runs; set
    # either way, so a Hydra multirun (one process) does not carry one job's mode into the next
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    device = pick_device(cfg.device, dist_info)
    if device.type == "cuda":  # TF32 for the few float32 matmuls left outside bf16 autocast
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tc = cfg.train
    is_main = dist_info.is_main
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = run_dir / "checkpoints"
    if is_main:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))

    seed_everything(cfg.seed)
    data: TokenData = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir) if is_main else None
    if dist_info.enabled:  # rank 0 builds the cache first, the others then read it
        torch.distributed.barrier()
        if not is_main:
            data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir)

    model: GPT = build_model(cfg.model, cfg.rope, data.vocab_size).to(device)
    optimizers = build_optimizers(model, cfg.optim, device)
    n_params = model.num_params()
    rope_info = model.rotary.describe()

    use_bf16 = tc.dtype == "bfloat16" or (tc.dtype == "auto" and device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()

    start_step, tracker_id = 0, None
    resume_path = resolve_resume(tc.resume, ckpt_dir)
    if resume_path is not None:
        ckpt = load_checkpoint(resume_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        for opt, state in zip(optimizers, ckpt["optimizers"], strict=True):
            opt.load_state_dict(state)
        set_rng_state(ckpt["rng"])
        start_step, tracker_id = ckpt["step"], ckpt.get("wandb_id")
        if is_main:
            log.info(f"resumed from {resume_path} at step {start_step}")
            _truncate_metrics(run_dir / "metrics.jsonl", start_step)

    train_model: torch.nn.Module = model
    if tc.compile:
        train_model = torch.compile(model)
    if dist_info.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(train_model, device_ids=[device.index] if device.type == "cuda" else None)

    metrics = MetricsWriter(run_dir / "metrics.jsonl") if is_main else None
    tracker = None
    if is_main:
        tracker = Tracker(cfg.logger, run_dir, name=run_name(cfg), group=group,
                          config=OmegaConf.to_container(cfg, resolve=True), resume_id=tracker_id)
    peak = peak_tflops(tc.peak_tflops, device)
    flops_per_token = model.flops_per_token()
    seq_len = cfg.model.seq_len
    per_rank = tc.batch_size // dist_info.world_size
    rows = slice(dist_info.rank * per_rank, (dist_info.rank + 1) * per_rank)
    tokens_per_step = tc.batch_size * tc.grad_accum * seq_len
    warmup_steps = int(round(tc.warmup_frac * tc.max_steps))

    summary = {
        **rope_info, "seed": cfg.seed, "params": n_params, "device": _device_name(device),
        "world_size": dist_info.world_size, "model": cfg.model.name, "data": cfg.data.name,
        "tokenizer": cfg.tokenizer.name, "optim": cfg.optim.name, "max_steps": tc.max_steps,
        "tokens_per_step": tokens_per_step, "compile": bool(tc.compile), "git_commit": git_commit(),
        "run_dir": str(run_dir), "status": "running",
    }
    if is_main:
        log.info(f"model {cfg.model.name}: {n_params / 1e6:.2f}M params, rope={rope_label(cfg)}, "
                 f"device={summary['device']}, world={dist_info.world_size}, tokens/step={tokens_per_step}")

    train_time = compile_warmup = 0.0
    timed_tokens = 0
    last_val: dict[str, float] = {}
    skipped = 0
    step = start_step
    status, exit_code, message = "completed", 0, ""
    bar = tqdm(total=tc.max_steps, initial=start_step, desc="train", disable=not is_main, dynamic_ncols=True)

    def run_eval() -> dict[str, float]:
        return evaluate(model, data.val, tc.batch_size, seq_len, tc.eval_batches, device, autocast, dist_info,
                        data.vocab_size)

    def mfu(tokens_per_s: float | None) -> float | None:
        """Model FLOPs utilisation: achieved training FLOP/s over the GPUs' dense bf16 peak."""
        if not peak or not tokens_per_s:
            return None
        return flops_per_token * tokens_per_s / (peak * 1e12 * dist_info.world_size)

    def do_checkpoint(at_step: int) -> None:
        if is_main:
            save_checkpoint(ckpt_dir, at_step, model, optimizers,
                            {"config": OmegaConf.to_container(cfg, resolve=True), "wandb_id": tracker.run_id,
                             "data": {"seed": cfg.seed, "next_step": at_step}},
                            keep=tc.get("keep_checkpoints", 2))

    train_model.train()
    try:
        with GracefulStop() as stopper, logging_redirect_tqdm(), attention_backend(tc.get("attention", "auto")):
            while step < tc.max_steps:
                t0 = time.perf_counter()
                set_lr(optimizers, lr_multiplier(step, tc.max_steps, warmup_steps, tc.min_lr_frac))
                loss_sum = torch.zeros((), device=device)
                for micro in range(tc.grad_accum):
                    x, y = sample_batch(data.train, tc.batch_size, seq_len, cfg.seed, step, micro)
                    x, y = x[rows].to(device, non_blocking=True), y[rows].to(device, non_blocking=True)
                    sync = nullcontext() if micro == tc.grad_accum - 1 or not dist_info.enabled \
                        else train_model.no_sync()
                    with sync, autocast:
                        _, loss = train_model(x, y)
                        (loss / tc.grad_accum).backward()
                    loss_sum += loss.detach()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip if tc.grad_clip > 0
                                                           else float("inf"))
                step_loss = all_reduce_mean(loss_sum / tc.grad_accum, dist_info).item()
                finite = math.isfinite(step_loss) and math.isfinite(grad_norm.item())
                if finite:
                    for opt in optimizers:
                        opt.step()
                for opt in optimizers:
                    opt.zero_grad(set_to_none=True)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                dt = time.perf_counter() - t0
                step += 1
                bar.update(1)

                if not finite:
                    skipped += 1
                    if skipped > tc.skip_nonfinite:
                        raise StopTraining("nonfinite", f"non-finite loss ({step_loss}) or grad norm at step {step}; "
                                           f"stopped (train.skip_nonfinite={tc.skip_nonfinite} tolerated). "
                                           f"Last good checkpoint kept in {ckpt_dir}", exit_code=1)
                    log.warning(f"step {step}: non-finite loss/grad, step skipped "
                                f"({skipped}/{tc.skip_nonfinite} tolerated)")

                if tc.compile and step == start_step + 1:
                    compile_warmup = dt  # first compiled step: compilation, not training
                else:
                    train_time += dt
                    timed_tokens += tokens_per_step
                tok_s = timed_tokens / train_time if train_time > 0 else float("nan")
                if is_main and (step % tc.log_every == 0 or step == tc.max_steps):
                    rec = {"kind": "train", "step": step, "loss": step_loss, "lr": optimizers[0].param_groups[0]["lr"],
                           "grad_norm": grad_norm.item(), "train_time_s": train_time,
                           "wall_time_s": time.perf_counter() - wall_start, "tokens": step * tokens_per_step,
                           "tokens_per_s": tok_s}
                    if peak:
                        rec["mfu"] = mfu(tok_s)
                    metrics.write(rec)
                    tracker.log({f"train/{k}": v for k, v in rec.items() if k not in ("kind", "step")}, step)
                    bar.set_postfix(loss=f"{step_loss:.3f}", tok_s=f"{tok_s:,.0f}")

                if step % tc.eval_every == 0 or step == tc.max_steps:
                    last_val = run_eval()
                    if is_main:
                        rec = {"kind": "val", "step": step, **last_val, "train_time_s": train_time,
                               "wall_time_s": time.perf_counter() - wall_start, "tokens": step * tokens_per_step}
                        metrics.write(rec)
                        tracker.log({f"val/{k.removeprefix('val_')}": v for k, v in last_val.items()}, step)
                        log.info(f"step {step:>6}/{tc.max_steps}  val_loss {last_val['val_loss']:.4f}  "
                                 f"val_acc {last_val['val_acc']:.4f}  val_ppl {last_val['val_ppl']:.2f}  "
                                 f"train_time {train_time:.1f}s")

                if tc.ckpt_every and step % tc.ckpt_every == 0 and step < tc.max_steps:
                    do_checkpoint(step)
                stop_at = tc.get("stop_at_step")
                if any_rank(stopper.signum is not None or (stop_at is not None and step >= stop_at), dist_info,
                            device) and step < tc.max_steps:
                    do_checkpoint(step)
                    why = signal.Signals(stopper.signum).name if stopper.signum else f"train.stop_at_step={stop_at}"
                    code = 128 + stopper.signum if stopper.signum else 0
                    raise StopTraining("interrupted", f"stopped at step {step} ({why}); checkpoint saved in "
                                       f"{ckpt_dir}. Resume with:\n  {resume_hint} train.resume=auto", code)
            if not last_val:  # resumed at the end: nothing was evaluated in this process yet
                last_val = run_eval()
            do_checkpoint(step)
    except StopTraining as stop:
        status, exit_code, message = stop.status, stop.exit_code, str(stop)
    finally:
        bar.close()

    summary.update({
        "status": status, "step": step, "train_time_s": train_time, "compile_warmup_s": compile_warmup,
        "wall_time_s": time.perf_counter() - wall_start,
        "tokens_per_s": timed_tokens / train_time if train_time > 0 else None, "skipped_steps": skipped,
        "val_loss": last_val.get("val_loss"), "val_acc": last_val.get("val_acc"), "val_ppl": last_val.get("val_ppl"),
    })
    summary["mfu"] = mfu(summary["tokens_per_s"])
    if device.type == "cuda":
        summary["peak_mem_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    if message:
        summary["message"] = message
    if is_main:
        write_json_atomic(run_dir / "summary.json", summary)
        tracker.summary({k: v for k, v in summary.items() if v is not None})
        tracker.finish(exit_code=exit_code)
        metrics.close()
        (log.error if status == "nonfinite" else log.info)(message or
            f"done: val_loss {summary['val_loss']:.4f}  val_acc {summary['val_acc']:.4f}  "
            f"val_ppl {summary['val_ppl']:.2f}  train_time {train_time:.1f}s  -> {run_dir}")
    cleanup(dist_info)
    if exit_code:
        sys.exit(exit_code)
    return summary


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop lines logged after the checkpoint being resumed: they will be logged again, identically."""
    if not path.exists():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    keep = [ln for ln in lines if json.loads(ln).get("step", 0) <= step]
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep))
    os.replace(tmp, path)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        group = f"{cfg.sweep.name}-{Path(hc.sweep.dir).name}"
    else:
        group = cfg.sweep.name
    overrides = " ".join(o for o in hc.overrides.task if not o.startswith("train.resume="))
    hint = f"python -m llm.train {overrides} hydra.run.dir={run_dir}".replace("  ", " ")
    summary = train(cfg, run_dir, group=group, resume_hint=hint)
    return summary.get("val_loss")


def _quiet_non_main_rank(argv: list[str]) -> list[str]:
    """Under torchrun only rank 0 owns a run dir: other ranks get no Hydra output dir or log file."""
    if int(os.environ.get("RANK", "0")) == 0:
        return argv
    keep = [a for a in argv if not a.startswith(("hydra.run.dir=", "hydra.output_subdir="))]
    return keep + ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=disabled"]


if __name__ == "__main__":
    sys.argv = _quiet_non_main_rank(sys.argv)
    main()
