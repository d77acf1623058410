"""The training loop as an object: set-up, one optimizer step, and the decisions of when to log,
evaluate, checkpoint and stop.

Read top to bottom: ``Trainer.__init__`` builds everything a run needs (device, data, model,
optimizers, a restored checkpoint, compile/DDP wrapping, outputs); :meth:`Trainer.train_step` is one
optimizer step; :meth:`Trainer.fit` loops over steps and asks the ``should_*`` methods what to do
after each. Rank 0 writes through :class:`RunOutputs`, the other ranks through :class:`NullOutputs`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.contrib.logging import logging_redirect_tqdm

import rope
from llm.checks import as_typed, positive_int
from llm.code_version import code_version
from llm.data import TokenData, check_streams, data_fingerprint, prepare_data, sample_batch
from llm.data.config import packing
from llm.data.packing import document_batch
from llm.doc_attention import DocumentMask, takes_dense
from llm.errors import ConfigError, ResumeError, one_line
from llm.fileio import DiskFullError
from llm.model import GPT, build_model, compile_model, rope_cache_len
from llm.optim import build_optimizers, lr_multiplier, set_lr
from llm.run_files import ABORTED, COMPLETED, FAILED, INTERRUPTED, NONFINITE, read_summary
from llm.training import runtime
from llm.training.checkpoint import (
    LAST,
    TrainTotals,
    clean_checkpoint_dir,
    rank_rng_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from llm.training.distributed import DistInfo, all_reduce_mean, any_rank
from llm.training.evaluate import evaluate
from llm.training.outputs import (
    METRICS_FILE,
    SAMPLES_FILE,
    NullOutputs,
    RunOutputs,
    Tracker,
    truncate_metrics,
)
from llm.training.progress import Progress
from llm.training.samples import TrainingSamples, check_sample_config

log = logging.getLogger("llm.train")

LIGER_MISSING = "train.fused_linear_ce=true needs Liger-Kernel: pip install -e '.[liger]'"
#: Summary keys that say which code, where and when the run trained: each checkpoint holds them, and a resume that
#: trains nothing (a finished run resumed) keeps them, since that command only read the run.
TRAINED_BY = ("git_commit", "code_fingerprint", "device", "device_id", "host", "device_uuid", "torch_threads",
              "world_size", "started_at", "ended_at", "peak_mem_gb")


@dataclass
class StepResult:
    loss: float
    grad_norm: float
    finite: bool
    seconds: float


@dataclass
class TrainOutcome:
    """How a run ended: its summary (also in summary.json) and the process exit code it asks for."""

    summary: dict
    exit_code: int

    @property
    def status(self) -> str:
        return self.summary["status"]


class StopTraining(Exception):
    """Raised inside the loop to end a run early with a status and a message for the user."""

    def __init__(self, status: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.status, self.exit_code = status, exit_code


def check_train_config(tc: DictConfig, world_size: int = 1, data_cfg: DictConfig | None = None) -> None:
    """Validate the ``train`` config group before any work; each message names the key. ``data_cfg`` (default:
    the ``data`` group of the config ``tc`` belongs to) is read for the settings the two groups must agree on."""
    for key in ("max_steps", "batch_size", "grad_accum", "eval_every", "eval_batches", "log_every"):
        positive_int(tc[key], f"train.{key}", shown=as_typed)
    for key in ("ckpt_every", "skip_nonfinite"):
        positive_int(tc.get(key, 0), f"train.{key}", minimum=0, shown=as_typed)
    positive_int(tc.get("keep_checkpoints", 2), "train.keep_checkpoints", shown=as_typed,
                 must_be="an integer >= 1 (the newest checkpoint is what a resume, init_from and generation read)")
    positive_int(tc.get("stop_at_step"), "train.stop_at_step", allow_none=True)
    for key, takes in (("init_from", "a run dir, or train.init_from=null for a new run from random weights"),
                       ("resume", "auto or a checkpoint file, or train.resume=null for a new run")):
        # `train.init_from=$SRC` with SRC unset: read as unset, it trained from scratch without a word
        if isinstance(tc.get(key), str) and not tc.get(key).strip():
            raise ConfigError(f"train.{key} is empty: give {takes}")
    if tc.batch_size % world_size:
        raise ConfigError(f"train.batch_size={tc.batch_size} (global) must be divisible by the {world_size} "
                          "processes of torchrun")
    if tc.dtype not in ("auto", "float32", "bfloat16"):
        raise ConfigError(f"train.dtype={tc.dtype!r}; allowed: auto, float32, bfloat16")
    check_sample_config(tc)
    if tc.get("attention", "auto") not in runtime.ATTENTION_BACKENDS:
        raise ConfigError(f"train.attention={tc.attention!r}; allowed: {', '.join(runtime.ATTENTION_BACKENDS)}")
    if data_cfg is None and isinstance(tc, DictConfig) and isinstance(tc._get_parent(), DictConfig):
        data_cfg = tc._get_parent().get("data")
    if tc.get("attention") == "flash" and data_cfg is not None and packing(data_cfg) == "documents":
        raise ConfigError("data.packing=documents needs attention with a document mask, which train.attention=flash "
                          "cannot take; use train.attention=auto, efficient or math")
    # indexed, no default here: the key check refuses a train.* key removed with ~, so conf/train/ holds the only one
    for key, closed in (("warmup_frac", False), ("min_lr_frac", True)):
        v = tc[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v <= 1 if closed else 0 <= v < 1):
            raise ConfigError(f"train.{key}={v!r} must be in [0, 1{']' if closed else ')'}")
    clip = tc["grad_clip"]
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 0:
        raise ConfigError(f"train.grad_clip={clip!r} must be a finite number >= 0 (0 disables clipping)")
    for key in ("compile", "deterministic", "fused_linear_ce"):
        if not isinstance(tc.get(key, False), bool):
            raise ConfigError(f"train.{key}={tc.get(key)!r} must be true or false")
    fused = tc.get("fused_linear_ce", False)
    if fused and importlib.util.find_spec("liger_kernel") is None:
        raise ConfigError(LIGER_MISSING)


class FusedLinearCrossEntropy(torch.nn.Module):
    """The training forward through Liger-Kernel's fused linear + cross-entropy (``train.fused_linear_ce``).

    Why: with a 100k-token vocabulary the head's logits (tokens × vocabulary, and their gradient) are most of a
    small model's step memory and much of its time; Liger computes them a chunk of tokens at a time inside the
    loss, writing each chunk's gradient in place, and never stores them whole. Its arithmetic is deterministic:
    cuBLAS matrix products over fixed chunks and one Triton program per row, with no atomics. It is another
    arithmetic than the model's own loss (bf16 logits, the logit gradient in bf16), so every run of a comparison
    must use the same setting (a train.* key: the report refuses runs that differ in it). Evaluation keeps the
    model's own forward. The model is the GPT's ``hidden`` and ``head``, unchanged.

    Under ``train.compile`` the hidden states are compiled and the loss runs eagerly (``fused_loss``): Dynamo
    cannot trace Liger's autograd function (torch 2.11 fails on its ``addmm(..., out_dtype=, out=)`` under fake
    tensors), and the loss is one hand-written kernel that a compiler has nothing to fuse into.
    """

    def __init__(self, model: GPT) -> None:
        super().__init__()
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

        self.model = model
        self.loss = LigerFusedLinearCrossEntropyLoss()
        # made here, not by a decorator: torch.compiler.disable imports Dynamo, which a refused command must not load
        self.fused_loss = torch.compiler.disable(self._loss)

    @property
    def rotary(self) -> torch.nn.Module:
        """The model's RoPE module: :func:`llm.model.compile_model` compiles with its Inductor options."""
        return self.model.rotary

    def forward(self, idx: torch.Tensor, targets: torch.Tensor, **documents: Any) -> tuple[None, torch.Tensor]:
        h = self.model.hidden(idx, **documents)
        return None, self.fused_loss(self.model.head.weight, h.flatten(0, 1), targets.flatten())

    def _loss(self, weight: torch.Tensor, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The mean cross-entropy of ``hidden @ weight.T`` against ``targets``; called as :attr:`fused_loss`, outside
        any compiled graph."""
        return self.loss(weight, hidden, targets)


def inductor_determinism(deterministic: bool) -> None:
    """Set Inductor's deterministic mode to the run's ``train.deterministic`` before compiling.

    Why: strict deterministic algorithms (``torch.use_deterministic_algorithms``) make eager kernels repeat
    bit for bit; a compiled graph also needs Inductor to choose its kernels without on-device benchmarking
    (a reduction's config picked by timing can differ between two runs, and with it the summation order).
    ``torch._inductor.config.deterministic`` turns that off, where this torch has it. It is global: set for
    every compiled run, so a job of a sweep does not inherit the previous job's setting.
    """
    from torch._inductor import config as inductor_config

    if hasattr(inductor_config, "deterministic"):
        inductor_config.deterministic = deterministic


def run_label(cfg: DictConfig) -> str:
    """The RoPE implementation of a config as tables and dashboards name it (see :func:`rope.label`)."""
    r = cfg.rope
    variant = None if r.name == "none" else r.get("variant", "partial")
    return rope.label(r.name, variant, r.get("compute_dtype"))


class Trainer:
    """One training run of ``cfg`` in ``run_dir`` (rank ``dist_info.rank`` of ``world_size``)."""

    def __init__(self, cfg: DictConfig, run_dir: Path, dist_info: DistInfo, *, resume: tuple[Path, dict] | None = None,
                 group: str = "single", resume_hint: str = "", job: str = "", swept: str = "") -> None:
        self.cfg, self.tc, self.run_dir, self.dist = cfg, cfg.train, run_dir, dist_info
        self.job = job  # a sweep job's name, for its progress lines
        self.swept = swept  # a sweep job's values of the keys its sweep varies (optim.lr=0.003), for its run's name
        self.ckpt_dir = run_dir / "checkpoints"
        self.resume_hint = resume_hint
        self.group = group  # the tracker group, saved with each checkpoint for a resume to keep
        self.wall_start = time.perf_counter()
        self.device = runtime.pick_device(cfg.device, dist_info)
        runtime.configure_torch(self.device, bool(self.tc.get("deterministic")))
        m = cfg.model
        runtime.check_attention_backend(self.tc.get("attention", "auto"), self.device, self.tc.dtype,
                                        float(m.get("dropout", 0.0)), m.n_head, m.get("n_kv_head") or m.n_head,
                                        m.n_embd // m.n_head)
        runtime.seed_everything(cfg.seed)
        self.samples = self._make_samples()  # tokenizes the prompts: a prompt too long fails before the data
        self.data = self._load_data()
        check_streams(self.data.train, self.data.val, cfg.model.seq_len)  # a short val stream: now, not at the 1st eval
        self.model: GPT = build_model(cfg.model, cfg.rope, self.data.vocab_size).to(self.device)
        if dist_info.rank > 0:  # the weights are drawn alike on every rank; the dropout masks each its own
            torch.manual_seed(runtime.rank_seed(cfg.seed, dist_info.rank))
        self.optimizers = build_optimizers(self.model, cfg.optim, self.device)
        self.autocast = runtime.autocast_context(self.tc.dtype, self.device)
        self.step, self.totals, tracker_id = 0, TrainTotals(), None
        self.last_val: dict[str, float] = {}  # the newest eval's metrics, and the step it ran at
        self._eval_size_said = False  # a val split smaller than the eval asks for, said once
        self.last_val_step: int | None = None
        self.saved: tuple[int, int | None] | None = None  # (step, eval step) of the checkpoint on disk, if any
        self.trained_by: dict[str, Any] = {}  # the resumed checkpoint's TRAINED_BY record
        self.init_from: dict | None = None  # where a run started from another's weights came from (its checkpoints')
        if resume is not None:
            tracker_id = self._restore(*resume)
        self.train_model = self._wrap(self.model)
        self.outputs = self._make_outputs(self.group, tracker_id)
        self.outputs.write_config(OmegaConf.to_yaml(cfg, resolve=True))  # after a resume succeeded, not before
        self.seq_len = cfg.model.seq_len
        self.documents = packing(cfg.data) == "documents"  # windows laid out by document (llm.data.packing)
        per_rank = self.tc.batch_size // dist_info.world_size
        self.rows = slice(dist_info.rank * per_rank, (dist_info.rank + 1) * per_rank)
        self.tokens_per_step = self.tc.batch_size * self.tc.grad_accum * self.seq_len
        self.warmup_steps = int(round(self.tc.warmup_frac * self.tc.max_steps))
        self.peak = runtime.peak_tflops(self.tc.peak_tflops, self.device)
        self.flops_per_token = self.model.flops_per_token()
        self.stopper = runtime.GracefulStop(announce=dist_info.is_main)
        self.summary = self._initial_summary()

    # -- set-up -----------------------------------------------------------------------------------
    def _make_samples(self) -> TrainingSamples | None:
        """The prompts of ``train.sample_every`` (None when off), checked against the model's context."""
        tc = self.tc
        if not tc.get("sample_every"):
            return None
        return TrainingSamples(tc.sample_prompts, tc.get("sample_tokens", 32), self.cfg.tokenizer.name,
                               rope_cache_len(self.cfg.model, self.cfg.rope))

    def _load_data(self) -> TokenData:
        """Rank 0 builds the token cache first; the others then read it."""
        cfg = self.cfg
        data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir) if self.dist.is_main else None
        if self.dist.enabled:
            torch.distributed.barrier()
            if not self.dist.is_main:
                data = prepare_data(cfg.data, cfg.tokenizer.name, cfg.cache_dir)
        return data

    def _restore(self, path: Path, state: dict) -> str | None:
        """Load model, optimizers, RNG, step and totals from a checkpoint; returns the tracker id."""
        trained_on, now = (state.get("data") or {}).get("id"), data_fingerprint(self.data.meta)["id"]
        if trained_on and now and trained_on != now:  # equal config, other tokens: the source's files changed
            raise ResumeError(f"the data of {self.cfg.data.name} is not what this run trained on (data id "
                              f"{trained_on[:12]}, now {now[:12]}): its source changed since the checkpoint, and the "
                              "steps after it would train on other tokens; restore the source, or start a new run")
        try:
            self.model.load_state_dict(state["model"])
        except (RuntimeError, TypeError, AttributeError) as e:  # torch's words for weights of another shape or kind
            raise ResumeError(f"checkpoint {path}: its weights do not fit the model of its config ({one_line(e)}); "
                              "resume from another checkpoint of the run, or start a new run") from None
        for opt, opt_state in zip(self.optimizers, state["optimizers"], strict=True):
            try:
                opt.load_state_dict(opt_state)
            except ValueError as e:  # torch's words for groups of other sizes, from code that grouped them otherwise
                raise ResumeError(f"checkpoint {path}: its {type(opt).__name__} state does not fit this code's "
                                  f"parameter groups ({one_line(e)}): it was saved by code that grouped the parameters "
                                  "otherwise (optim=muon with optim.adamw_weight_decay > 0 decayed norms and biases "
                                  "before they were exempted); start a new run, or train.init_from=<this run's dir> "
                                  "to begin from its weights") from None
        self.step, self.totals = state["step"], TrainTotals.from_state(state.get("totals"))
        own = rank_rng_state(state, self.dist.rank, self.dist.world_size)
        set_rng_state(state["rng"] if own is None else own)
        if own is None:  # a rank the checkpoint has no stream of: its own from this step
            torch.manual_seed(runtime.rank_seed(self.cfg.seed, self.dist.rank, self.step))
        self.init_from = state.get("init_from")
        saved_val = state.get("last_val") or {}
        if saved_val.get("step") == self.step:  # evaluated at this step: a resume at the end need not eval again
            self.last_val = {k: v for k, v in saved_val.items() if k != "step"}
            self.last_val_step = self.step
        if path.resolve() == (self.ckpt_dir / LAST).resolve():  # the run's newest: what a resume=auto would load
            self.saved, self.trained_by = (self.step, self.last_val_step), {**dict(state.get("trained_by") or {}),
                                                                              **self._summary_at(self.step)}
        if self.dist.is_main:
            log.info(f"resumed from {path} at step {self.step}")
            truncate_metrics(self.run_dir / METRICS_FILE, self.step)
            truncate_metrics(self.run_dir / SAMPLES_FILE, self.step)  # those steps are sampled again
        return state.get("wandb_id")

    def _wrap(self, model: GPT) -> torch.nn.Module:
        """The module a training step calls: the model, or its fused-loss forward; compiled with
        ``train.compile``, wrapped in DDP under torchrun."""
        tc = self.tc
        wrapped: torch.nn.Module = FusedLinearCrossEntropy(model) if getattr(tc, "fused_linear_ce", False) else model
        if tc.compile:
            inductor_determinism(bool(getattr(tc, "deterministic", False)))
            wrapped = compile_model(wrapped)  # it reads .rotary, which the fused-loss forward passes on
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            wrapped = DDP(wrapped, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        return wrapped

    def _make_outputs(self, group: str, tracker_id: str | None) -> RunOutputs | NullOutputs:
        if not self.dist.is_main:
            return NullOutputs()
        clean_checkpoint_dir(self.ckpt_dir)
        name = " ".join(filter(None, (f"{run_label(self.cfg)} s{self.cfg.seed}", self.swept)))
        # a resume that trains on rewinds its wandb run to the checkpoint's step, as metrics.jsonl is cut back to it;
        # a finished run resumed logs no step, so its wandb run is resumed as it is
        resume_step = self.step if tracker_id and self.step < self.tc.max_steps else None
        tracker = Tracker(self.cfg.logger, self.run_dir, name=name, group=group,
                          config=OmegaConf.to_container(self.cfg, resolve=True), resume_id=tracker_id,
                          resume_step=resume_step)
        return RunOutputs(self.run_dir, tracker)

    def _initial_summary(self) -> dict:
        cfg, tc = self.cfg, self.tc
        summary = {
            **self.model.rotary.describe(), "rope_label": run_label(cfg), "seed": cfg.seed,
            "params": self.model.num_params(), "device": runtime.device_name(self.device),
            "device_id": str(self.device), **runtime.device_identity(self.device),
            "torch_threads": torch.get_num_threads(),  # a CPU run's bits depend on it, deterministic or not
            # what train.dtype chose here (auto: bfloat16 on a GPU); compute_dtype above is the RoPE arithmetic's
            "autocast_dtype": runtime.autocast_name(tc.dtype, self.device),
            "world_size": self.dist.world_size, "model": cfg.model.name,
            # every field the model was built with, code defaults included: config.yaml holds only the preset's keys
            "model_config": dataclasses.asdict(self.model.cfg), "data": cfg.data.name,
            "tokenizer": cfg.tokenizer.name, "data_fingerprint": data_fingerprint(self.data.meta),
            "optim": cfg.optim.name, "max_steps": tc.max_steps,
            "tokens_per_step": self.tokens_per_step, "train_passes": self.train_passes(),
            "compile": bool(tc.compile), "fused_linear_ce": bool(tc.get("fused_linear_ce")),
            **code_version(), "run_dir": str(self.run_dir), "status": "running",
            "started_at": time.time(), **({"init_from": self.init_from} if self.init_from else {}),
        }
        if self.dist.is_main:
            log.info(f"model {cfg.model.name}: {summary['params'] / 1e6:.2f}M params, rope={summary['rope_label']}, "
                     f"device={summary['device']}, world={self.dist.world_size}, tokens/step={self.tokens_per_step}")
            if summary["train_passes"] > 1:
                log.warning(f"{tc.max_steps} steps draw {summary['train_passes']:.1f} times the "
                            f"{len(self.data.train):,} train tokens: the model sees its data repeatedly, and once it "
                            "memorizes it, training amplifies last-bit differences between runs (use more data or "
                            "fewer steps)")
            if self.peak is None and self.device.type == "cuda":  # else MFU is missing from every line unexplained
                log.info(f"MFU left out: the peak of {summary['device']} is not known; train.peak_tflops=<its dense "
                         "bf16 TFLOP/s> gives it")
        return summary

    def train_passes(self) -> float:
        """Tokens the run draws over the train split's tokens: how many times it reads its data, on average."""
        return self.tokens_per_step * self.tc.max_steps / max(1, len(self.data.train))

    # -- one step ---------------------------------------------------------------------------------
    def batch(self, micro: int) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Micro-batch ``micro`` of the current step, this rank's rows, on its device: the one place training
        data is fetched (a function of (seed, step, micro) only, so a resumed run continues the same stream).
        The third item holds the model's document layout under ``data.packing=documents`` (positions restarting
        at each document, the mask keeping attention inside it), else nothing."""
        tc = self.tc
        if self.documents:
            b = document_batch(self.data.train, self.data.eot, tc.batch_size, self.seq_len, self.cfg.seed, self.step,
                               micro).rows(self.rows).to(self.device)
            mask = DocumentMask.build(b.doc_ids, dense=takes_dense(self.device, self.model.cfg.dropout))
            return b.x, b.y, {"positions": b.positions, "doc_mask": mask}
        x, y = sample_batch(self.data.train, tc.batch_size, self.seq_len, self.cfg.seed, self.step, micro)
        return x[self.rows].to(self.device, non_blocking=True), y[self.rows].to(self.device, non_blocking=True), {}

    def train_step(self) -> StepResult:
        """One optimizer step: grad_accum micro-batches, clip, step (skipped when not finite)."""
        t0 = time.perf_counter()
        tc, step = self.tc, self.step
        set_lr(self.optimizers, lr_multiplier(step, tc.max_steps, self.warmup_steps, tc.min_lr_frac))
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(tc.grad_accum):
            x, y, documents = self.batch(micro)
            last_micro = micro == tc.grad_accum - 1
            sync = nullcontext() if last_micro or not self.dist.enabled else self.train_model.no_sync()
            with sync, self.autocast:
                _, loss = self.train_model(x, y, **documents)
                (loss / tc.grad_accum).backward()
            loss_sum += loss.detach()
        clip = tc.grad_clip if tc.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip).item()
        loss = all_reduce_mean(loss_sum / tc.grad_accum, self.dist).item()
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        if finite:
            for opt in self.optimizers:
                opt.step()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.step += 1
        return StepResult(loss, grad_norm, finite, time.perf_counter() - t0)

    # -- when -------------------------------------------------------------------------------------
    def should_log(self) -> bool:
        return self.step % self.tc.log_every == 0 or self.step == self.tc.max_steps

    def should_eval(self) -> bool:
        return self.step % self.tc.eval_every == 0 or self.step == self.tc.max_steps

    def should_sample(self) -> bool:
        every = self.tc.get("sample_every") or 0
        return bool(every) and (self.step % every == 0 or self.step == self.tc.max_steps)

    def should_checkpoint(self) -> bool:
        every = self.tc.ckpt_every
        return bool(every) and self.step % every == 0 and self.step < self.tc.max_steps

    def should_stop(self) -> str | None:
        """Why to stop early at this step (a signal, ``train.stop_at_step``), agreed by every rank; else None. A signal
        at the last step or during the final eval stops too: ignored there, it let a sweep start its next jobs, and a
        second Ctrl-C during the final eval aborted a run with no checkpoint (``ckpt_every=0``)."""
        stop_at = self.tc.get("stop_at_step")
        at_stop = stop_at is not None and stop_at <= self.step < self.tc.max_steps
        if not any_rank(self.stopper.signum is not None or at_stop, self.dist, self.device):
            return None
        return signal.Signals(self.stopper.signum).name if self.stopper.signum else f"train.stop_at_step={stop_at}"

    # -- what -------------------------------------------------------------------------------------
    def wall_time(self) -> float:
        return self.totals.wall_time_s + time.perf_counter() - self.wall_start

    def tokens_per_s(self) -> float:
        t = self.totals
        return t.timed_tokens / t.train_time_s if t.train_time_s > 0 else float("nan")

    def mfu(self, tokens_per_s: float | None) -> float | None:
        """Model FLOPs utilisation: achieved training FLOP/s over the GPUs' dense bf16 peak."""
        if not self.peak or not tokens_per_s or math.isnan(tokens_per_s):
            return None
        return self.flops_per_token * tokens_per_s / (self.peak * 1e12 * self.dist.world_size)

    def account(self, result: StepResult, first_step: int) -> None:
        """Add the step to the totals (the first compiled step is compilation, not training) and
        enforce ``train.skip_nonfinite``."""
        if self.tc.compile and self.step == first_step + 1:
            self.totals.compile_warmup_s += result.seconds
        else:
            self.totals.train_time_s += result.seconds
            self.totals.timed_tokens += self.tokens_per_step
        if result.finite:
            return
        self.totals.skipped_steps += 1
        tolerated = self.tc.skip_nonfinite
        # name the value that is not finite: a diverging run often has a huge but finite loss and an inf grad norm
        what = (f"non-finite {'loss' if not math.isfinite(result.loss) else 'grad norm'} (loss {result.loss}, "
                f"grad norm {result.grad_norm})")
        if self.totals.skipped_steps > tolerated:
            self.log_train(result)  # the step that stops the run is the last line of metrics.jsonl, logged or not
            kept = (f"last good checkpoint kept in {self.ckpt_dir}" if (self.ckpt_dir / LAST).exists()
                    else "no checkpoint was saved before it (train.ckpt_every=N saves one every N steps)")
            raise StopTraining(NONFINITE, f"{what} at step {self.step}; "
                               f"stopped (train.skip_nonfinite={tolerated} tolerated); {kept}", exit_code=1)
        log.warning(f"step {self.step}: {what}, step skipped ({self.totals.skipped_steps}/{tolerated} tolerated)")

    def log_train(self, result: StepResult) -> None:
        tok_s = self.tokens_per_s()
        rec = {"kind": "train", "step": self.step, "loss": result.loss, "lr": self.optimizers[0].param_groups[0]["lr"],
               "grad_norm": result.grad_norm, "train_time_s": self.totals.train_time_s,
               "wall_time_s": self.wall_time(), "tokens": self.step * self.tokens_per_step, "tokens_per_s": tok_s}
        for opt in self.optimizers[1:]:  # muon's AdamW for the embeddings and head: its own learning rate
            rec[f"lr_{type(opt).__name__.lower()}"] = opt.param_groups[0]["lr"]
        if self.peak:
            rec["mfu"] = self.mfu(tok_s)
        self.outputs.log_train(rec)

    def run_eval(self) -> dict[str, float]:
        result = evaluate(self.model, self.data.val, self.tc.batch_size, self.seq_len, self.tc.eval_batches,
                          self.device, self.autocast, self.dist, self.data.vocab_size,
                          self.data.eot if self.documents else None)
        asked = self.tc.eval_batches * self.tc.batch_size
        if self.dist.is_main and len(result.starts) < asked and not self._eval_size_said:  # once a run
            log.warning(f"eval: {len(result.starts)} windows ({len(result.starts) * self.seq_len:,} tokens) of the "
                        f"{asked} asked (train.eval_batches x train.batch_size): the val split holds no more; the "
                        "val loss is noisier than the setting suggests")
            self._eval_size_said = True
        self.last_val, self.last_val_step = result.metrics, self.step
        self.outputs.write_eval_windows(self.step, self.seq_len, result.starts, result.window_loss)
        v = self.last_val
        self.outputs.log_val({"kind": "val", "step": self.step, **v, "train_time_s": self.totals.train_time_s,
                              "wall_time_s": self.wall_time(), "tokens": self.step * self.tokens_per_step})
        if self.dist.is_main:
            se = v["val_loss_se"]  # NaN with one val window: no spread to take a standard error of
            se = "" if se is None or math.isnan(se) else f" ± {se:.4f}"
            job = f"{self.job}: " if self.job else ""  # jobs side by side share a console, as the step lines say
            log.info(f"{job}step {self.step:>6}/{self.tc.max_steps}  val_loss {v['val_loss']:.4f}{se}  "
                     f"val_acc {v['val_acc']:.4f}  val_ppl {v['val_ppl']:.2f}  "
                     f"train_time {self.totals.train_time_s:.1f}s")
        return v

    def write_samples(self) -> None:
        """Rank 0 writes the model's greedy continuations of ``train.sample_prompts`` (outside the timed
        step, like evaluation; no random numbers drawn, so training goes on exactly as without)."""
        if not self.dist.is_main or self.samples is None:
            return
        records = self.samples.generate(self.model, self.device, self.autocast)
        self.outputs.log_samples(self.step, records)
        for r in records:
            log.info(f"step {self.step:>6} sample: {r['prompt']!r} -> {r['text'][:80]!r}")

    def checkpoint(self) -> None:
        """Save the state at the current step (rank 0), with the run's config and running totals, and under torchrun
        every rank's RNG state (each draws its own dropout masks: a resume on as many processes goes on bitwise)."""
        if self.saved == (self.step, self.last_val_step):  # a stop right after a periodic save, or a resume at its end
            return
        self.saved, self.trained_by = (self.step, self.last_val_step), {}
        ranks = None
        if self.dist.enabled:  # every rank checkpoints at the same steps (a stop is agreed by all of them)
            ranks = [None] * self.dist.world_size
            torch.distributed.all_gather_object(ranks, rng_state())
        if not self.dist.is_main:
            return
        self.totals.wall_time_s, self.wall_start = self.wall_time(), time.perf_counter()
        data = {"seed": self.cfg.seed, "next_step": self.step, "id": self.summary["data_fingerprint"]["id"]}
        extra = {"config": OmegaConf.to_container(self.cfg, resolve=True), "wandb_id": self.outputs.tracker_id,
                 "trained_by": {**{k: self.summary.get(k) for k in TRAINED_BY}, **self._ended()},
                 "wandb_group": self.group, "data": data, "init_from": self.summary.get("init_from"),
                 "last_val": {"step": self.last_val_step, **self.last_val} if self.last_val else None,
                 **({"rng_ranks": ranks} if ranks else {})}
        save_checkpoint(self.ckpt_dir, self.step, self.model, self.optimizers, self.totals, extra,
                        keep=self.tc.get("keep_checkpoints", 2))

    # -- the loop ---------------------------------------------------------------------------------
    def _stop(self, why: str) -> None:
        self.checkpoint()
        code = 128 + self.stopper.signum if self.stopper.signum else 0
        # the first line stands alone: a sweep's listing of its jobs shows only that
        raise StopTraining(INTERRUPTED, f"stopped at step {self.step} ({why}); checkpoint saved in "
                           f"{self.ckpt_dir}\nResume with:\n  {self.resume_hint}", code)

    def _loop(self, progress: Progress) -> None:
        first_step = self.step
        why = self.should_stop()  # resumed at or past train.stop_at_step: stop before training a step more
        if why:
            self._stop(why)
        while self.step < self.tc.max_steps:
            result = self.train_step()
            self.account(result, first_step)
            progress.update(self.step, result.loss, self.tokens_per_s())
            if self.should_log():
                self.log_train(result)
            if self.should_eval():
                self.run_eval()
            if self.should_sample():
                self.write_samples()
            if self.should_checkpoint():
                self.checkpoint()
            why = self.should_stop()
            if why:
                self._stop(why)
        if self.last_val_step != self.step:  # resumed at the end from a checkpoint without this step's eval
            self.run_eval()
        why = self.should_stop()  # a signal during the final eval: checkpointed and stopped as mid-run
        if why:
            self._stop(why)
        self.checkpoint()

    def fit(self) -> TrainOutcome:
        """Train to ``train.max_steps`` (or an early stop); always writes the summary, returns the outcome.

        A second Ctrl-C (a KeyboardInterrupt out of the loop, the stop checkpoint included) writes the summary with
        ``status: aborted`` and is raised on: the entry point reports the abort and exits 130."""
        status, exit_code, message = COMPLETED, 0, ""
        interrupt: KeyboardInterrupt | None = None
        progress = Progress(self.tc.max_steps, self.step, self.tc.log_every, enabled=self.dist.is_main, job=self.job)
        if self.step < self.tc.max_steps:  # a finished run reopened keeps its summary until it writes it again
            self.outputs.begin()
        self.train_model.train()
        try:
            with self.stopper, logging_redirect_tqdm(), runtime.attention_backend(self.tc.get("attention", "auto")):
                self._loop(progress)
        except KeyboardInterrupt as e:
            interrupt, status, exit_code = e, ABORTED, 128 + signal.SIGINT
            message = f"aborted by a second Ctrl-C at step {self.step}, without a checkpoint of that step"
        except StopTraining as stop:
            status, exit_code, message = stop.status, stop.exit_code, str(stop)
        except DiskFullError as e:
            status, exit_code = FAILED, 1
            message = f"{e}; stopped at step {self.step} (metrics.jsonl and earlier checkpoints are kept)"
        except Exception as e:  # a crash mid-run: recorded in the summary, traceback in the log
            log.exception(f"run failed at step {self.step}")
            status, exit_code = FAILED, 1
            message = f"{type(e).__name__} at step {self.step}: " + (str(e).strip().splitlines() or [""])[0]
        finally:
            progress.close()
        outcome = self._finish(status, exit_code, message)
        if interrupt is not None:
            raise interrupt
        return outcome

    def _summary_at(self, step: int) -> dict[str, Any]:
        """The record (:data:`TRAINED_BY`, wall time) of the run's ``summary.json`` where it ended at ``step``, the
        newest checkpoint's: written after that checkpoint, its times are the run's final ones, which a resume that
        trains nothing keeps."""
        prior = read_summary(self.run_dir)
        if prior is None or prior.get("step") != step:  # none to keep, or another stop's
            return {}
        return {k: prior[k] for k in (*TRAINED_BY, "wall_time_s") if k in prior}

    def _ended(self) -> dict[str, float]:
        """When the run's newest work ended, and the device memory it took (CUDA): the summary's, and each
        checkpoint's (:data:`TRAINED_BY`)."""
        ended = {"ended_at": time.time()}
        if self.device.type == "cuda":
            ended["peak_mem_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        return ended

    def _finish(self, status: str, exit_code: int, message: str) -> TrainOutcome:
        tok_s = self.tokens_per_s()
        v, t = self.last_val, self.totals
        # a command that saved nothing new (a finished run resumed) only read the run: its record stays the training's
        unchanged = bool(self.trained_by) and self.saved == (self.step, self.last_val_step)
        self.summary.update({
            "status": status, "step": self.step, "train_time_s": t.train_time_s, "compile_warmup_s": t.compile_warmup_s,
            "wall_time_s": self.trained_by.get("wall_time_s", t.wall_time_s) if unchanged else self.wall_time(),
            "tokens_per_s": None if math.isnan(tok_s) else tok_s,
            "skipped_steps": t.skipped_steps, "val_loss": v.get("val_loss"), "val_loss_se": v.get("val_loss_se"),
            "val_acc": v.get("val_acc"), "val_ppl": v.get("val_ppl"), "val_tokens": v.get("val_tokens"),
            **self._ended(),
        })
        self.summary["mfu"] = self.mfu(self.summary["tokens_per_s"])
        if unchanged:
            self.summary.update({key: value for key, value in self.trained_by.items() if key in TRAINED_BY})
        if message:
            self.summary["message"] = message
        self.outputs.finish(self.summary, exit_code)
        if self.dist.is_main:
            if status == COMPLETED:
                log.info(f"done: val_loss {v['val_loss']:.4f}  val_acc {v['val_acc']:.4f}  val_ppl {v['val_ppl']:.2f}  "
                         f"train_time {t.train_time_s:.1f}s  -> {self.run_dir}")
            elif status != ABORTED:  # the entry point says how an aborted run can go on
                (log.info if status == INTERRUPTED else log.error)(message)
        return TrainOutcome(self.summary, exit_code)
