"""Evaluate a finished run at other context lengths: val loss, accuracy and perplexity per length, and the
loss against position, with any RoPE scaling and any implementation of the run's rotation.

Why these choices:

* **The same tokens at every length.** A token budget (``tokens``, by default 16 windows of the
  longest length) is taken from the start of the run's val stream and cut into L-token windows at
  each length L (the windows of :func:`llm.data.val_batches`, starting at multiples of L). Every
  length then predicts the same tokens, so a change of loss is the length's, not the text's.
* **Memory.** Long windows shrink the batch (``batch_tokens`` tokens per forward, at least one
  window); attention is SDPA (flash / memory-efficient kernels on a GPU under the training's bfloat16
  autocast); the vocabulary head runs on a few hundred positions at a time, so the (tokens × vocab)
  logits are never held at once. A length whose single window cannot fit the device is refused
  before any work, naming ``lengths``.
* **The RoPE cache** is sized to the longest length (``rope.max_seq_len``); positions beyond the
  training length are exactly what is being measured.
* **Loss against position**: the mean loss per bucket of ``bucket_size`` positions, the same buckets
  at every length, so a plot shows where a model stops generalizing (typically at the training length).

Outputs (run dir): ``eval_lengths/<label>.json`` (per-length metrics, per-bucket loss, the val token
count and the exact config used) and ``eval_lengths/<label>.csv`` (one row per length).
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

import rope
from llm.config_check import device_memory_bytes
from llm.data import prepare_data, val_batches
from llm.errors import ConfigError
from llm.evaluation.scaling import ScalingPlan, resolve_scaling
from llm.fileio import atomic_open, write_json_atomic
from llm.generation.load import OpenedRun, load_run_model, open_run, rope_for_generation, run_tokenizer
from llm.model import GPT, GPTConfig, build_model
from llm.training import runtime

OUT_DIR = "eval_lengths"
#: Default evaluation lengths, as multiples of the run's training ``model.seq_len``.
DEFAULT_MULTIPLES = (1, 2, 4, 8, 16)
#: Default token budget, in windows of the longest length.
DEFAULT_WINDOWS = 16
#: Default bucket count of the loss-vs-position curve at the longest length.
DEFAULT_BUCKETS = 64
#: Float32 logits the head computes at once (elements): 64 Mi = 256 MiB.
LOGITS_CHUNK_ELEMENTS = 64 * 2**20
DTYPES = ("auto", "float32", "bfloat16")
CSV_COLUMNS = ("label", "length", "factor", "val_loss", "val_loss_se", "val_acc", "val_ppl", "val_tokens", "windows",
               "batch_size", "loss_within_train", "loss_beyond_train", "seconds")

Emit = Callable[[str], None]


# -- settings ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSettings:
    """The checked settings of one evaluation (conf/eval_lengths.yaml)."""

    lengths: tuple[int, ...] | None  # None: DEFAULT_MULTIPLES x the run's seq_len
    tokens: int | None  # None: DEFAULT_WINDOWS x the longest length, capped to the val stream
    batch_tokens: int
    bucket_size: int | None  # None: the longest length / DEFAULT_BUCKETS
    device: torch.device
    dtype: str = "auto"
    attention: str = "auto"
    cache_dir: str = "~/.cache/ropelab"
    label: str | None = None


def _positive_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _optional_positive(cfg: Mapping, key: str) -> int | None:
    v = cfg.get(key)
    if v is not None and not _positive_int(v):
        raise ConfigError(f"{key}={v!r} must be a positive integer (or null for the default)")
    return v


def read_lengths(value: object) -> tuple[int, ...] | None:
    """``lengths=[512,1024]`` (or one int) as sorted distinct positive ints; None for the default."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    if not items or not all(_positive_int(v) for v in items):
        shown = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
        raise ConfigError(f"lengths={shown!r} must be a list of positive integers, e.g. lengths=[512,1024,2048]")
    return tuple(sorted(set(items)))


def read_settings(cfg: Mapping) -> EvalSettings:
    """Every setting checked before the run is opened; each problem is one line naming the key."""
    batch_tokens = cfg.get("batch_tokens", 65536)
    if not _positive_int(batch_tokens):
        raise ConfigError(f"batch_tokens={batch_tokens!r} must be a positive integer (tokens per forward batch)")
    dtype = cfg.get("dtype", "auto")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    attention = cfg.get("attention", "auto")
    if attention not in runtime.ATTENTION_BACKENDS:
        raise ConfigError(f"attention={attention!r}; allowed: {', '.join(runtime.ATTENTION_BACKENDS)}")
    label = cfg.get("label")
    if label is not None and (not str(label) or "/" in str(label) or str(label).startswith(".")):
        raise ConfigError(f"label={label!r} must be a file name (no '/', not starting with '.')")
    return EvalSettings(read_lengths(cfg.get("lengths")), _optional_positive(cfg, "tokens"), batch_tokens,
                        _optional_positive(cfg, "bucket_size"), runtime.resolve_device(str(cfg.get("device", "auto"))),
                        dtype, attention, str(cfg.get("cache_dir") or "~/.cache/ropelab"),
                        None if label is None else str(label))


# -- memory -----------------------------------------------------------------------------------------------
def eval_memory_bytes(cfg: GPTConfig, batch: int, length: int, dense_attention: bool) -> int:
    """A lower bound of what one evaluation batch allocates: float32 weights, one layer's activations
    (nothing is kept for backward), the T x T scores when attention is not a fused kernel, and one
    chunk of float32 logits with its softmax."""
    d, ff = cfg.n_embd, cfg.d_ff or 4 * cfg.n_embd
    qkv = (cfg.n_head + 2 * (cfg.n_kv_head or cfg.n_head)) * cfg.head_dim
    weights = 4 * cfg.param_count()
    activations = 4 * batch * length * (6 * d + qkv + 2 * ff)
    scores = 8 * batch * cfg.n_head * length * length if dense_attention else 0
    logits = 8 * min(batch * length, logits_chunk(cfg.padded_vocab)) * cfg.padded_vocab
    return weights + activations + scores + logits


def logits_chunk(padded_vocab: int) -> int:
    """Positions whose logits the head computes at once (a bounded float32 buffer)."""
    return max(1, LOGITS_CHUNK_ELEMENTS // padded_vocab)


def batch_for_length(cfg: GPTConfig, length: int, batch_tokens: int, device: torch.device, attention: str) -> int:
    """Windows per forward at ``length``: ``batch_tokens // length`` (at least 1), halved until the batch fits
    the device. Raises :class:`ConfigError` naming ``lengths`` when one window does not fit."""
    dense = device.type == "cpu" or attention == "math"
    have = device_memory_bytes(device)
    batch = max(1, batch_tokens // length)
    while batch > 1 and eval_memory_bytes(cfg, batch, length, dense) > have:
        batch //= 2
    need = eval_memory_bytes(cfg, batch, length, dense)
    if need > have:
        raise ConfigError(f"lengths: {length} needs at least {need / 2**30:.1f} GiB for one window, more than the "
                          f"{have / 2**30:.1f} GiB of {device}; drop it from lengths"
                          + (" (on a GPU, attention is a fused kernel: far less)" if dense else ""))
    return batch


# -- the plan: everything checked before any work ---------------------------------------------------------
@dataclass
class EvalPlan:
    """What one evaluation will do, checked: lengths, batches, the RoPE group per length, the output label."""

    lengths: tuple[int, ...]
    batches: dict[int, int]
    scaling: ScalingPlan
    rope_cfgs: dict[int, dict]  # the rope group built for each length
    label: str
    max_len: int
    notes: list[str] = field(default_factory=list)


def rope_override(cfg: Mapping) -> dict | None:
    """The ``rope`` group the command line chose (``rope=<name>``), without its ``scaling`` keys; None if none."""
    r = cfg.get("rope")
    if r is None:
        return None
    r = OmegaConf.to_container(r, resolve=True) if isinstance(r, DictConfig) else dict(r)
    r.pop("scaling", None)
    return r if r.get("name") is not None else None


def scaling_request(cfg: Mapping) -> dict | None:
    """The ``rope.scaling`` keys the command line set (None values: unset)."""
    r = cfg.get("rope")
    s = None if r is None else r.get("scaling")
    if s is None:
        return None
    return OmegaConf.to_container(s, resolve=True) if isinstance(s, DictConfig) else dict(s)


def impl_tag(rope_cfg: Mapping) -> str:
    """The implementation part of an output label: ``triton_v4``, ``torch_bfloat16``, ``none``."""
    dtype = rope_cfg.get("compute_dtype")
    return rope_cfg["name"] + (f"_{dtype}" if dtype not in (None, "float32", "none") else "")


def _rope_label(rope_cfg: Mapping) -> str:
    name = rope_cfg["name"]
    variant = None if name == "none" else rope_cfg.get("variant", "partial")
    return rope.label(name, variant, rope_cfg.get("compute_dtype"))


class LengthEvaluator:
    """One run opened for evaluation at other lengths: checked at once, weights and val tokens loaded on
    first use and then kept, so several scalings of one run cost one load."""

    def __init__(self, opened: OpenedRun, settings: EvalSettings, override: Mapping | None = None,
                 emit: Emit = print) -> None:
        self.opened, self.settings, self.emit = opened, settings, emit
        self.run_cfg = opened.config
        self.train_len = int(self.run_cfg.model.seq_len)
        run_rope = OmegaConf.to_container(self.run_cfg.rope, resolve=True)
        self.run_rope = dict(run_rope)
        self.base_rope = rope_for_generation(run_rope, override, settings.device)
        self.enc = run_tokenizer(opened)
        fields = GPTConfig.__dataclass_fields__
        model_kw = {k: v for k, v in OmegaConf.to_container(self.run_cfg.model, resolve=True).items() if k in fields}
        self.model_cfg = GPTConfig(vocab_size=self.enc.n_vocab, **model_kw)
        self.lengths = settings.lengths or tuple(m * self.train_len for m in DEFAULT_MULTIPLES)
        self.max_len = max(self.lengths)
        if settings.tokens is not None and settings.tokens < self.max_len:
            raise ConfigError(f"tokens={settings.tokens} must be at least the longest length {self.max_len} "
                              "(one window of it)")
        self.batches = {L: batch_for_length(self.model_cfg, L, settings.batch_tokens, settings.device,
                                            settings.attention) for L in self.lengths}
        self._val: np.ndarray | None = None
        self._state: dict | None = None
        self._model: tuple[str, GPT] | None = None
        self.checkpoint: Path | None = None
        self.step: int | None = None

    # -- checks -----------------------------------------------------------------------------------
    def plan(self, request: Mapping | None) -> EvalPlan:
        """The evaluation of one scaling request, every argument checked (no weights or data touched)."""
        scaling = resolve_scaling(request, self.run_rope, self.train_len)
        rope_cfgs = {}
        for L in self.lengths:
            r = {**self.base_rope, "max_seq_len": self.max_len, "scaling": scaling.for_length(L)}
            options = {k: v for k, v in r.items() if k not in ("name", "base", "max_seq_len")}
            try:
                rope.check_args(r["name"], self.model_cfg.head_dim, self.max_len, r.get("base", 10000.0), **options)
            except rope.RopeArgumentError as e:
                raise ConfigError(f"rope.{e.argument}: {e}") from None
            rope_cfgs[L] = r
        notes = list(scaling.notes)
        if self.base_rope["name"] == "none" and scaling.type != "none":
            notes.append("rope=none rotates nothing: the scaling changes nothing")
        label = self.settings.label or f"{impl_tag(self.base_rope)}-{scaling.tag}"
        return EvalPlan(self.lengths, self.batches, scaling, rope_cfgs, label, self.max_len, notes)

    # -- loading (once) ---------------------------------------------------------------------------
    def val_tokens(self) -> np.ndarray:
        if self._val is None:
            cfg = self.run_cfg
            self._val = prepare_data(cfg.data, cfg.tokenizer.name, self.settings.cache_dir).val
        return self._val

    def token_budget(self) -> tuple[int, str | None]:
        """The val tokens evaluated at every length, and a note when the default had to be capped."""
        n = len(self.val_tokens()) - 1  # the last token is only ever a target
        fits = n // self.max_len * self.max_len
        if self.settings.tokens is not None:
            if self.settings.tokens > n:
                raise ConfigError(f"tokens={self.settings.tokens} exceeds the run's val stream of {n + 1} tokens "
                                  f"(at most {n})")
            return self.settings.tokens, None
        if fits == 0:
            raise ConfigError(f"lengths: the longest, {self.max_len}, needs {self.max_len + 1} val tokens; the run's "
                              f"val stream holds {n + 1} (a larger data.val_fraction, or shorter lengths)")
        want = DEFAULT_WINDOWS * self.max_len
        if fits < want:
            return fits, (f"tokens: {fits} (the val stream holds {fits // self.max_len} windows of {self.max_len}, "
                          f"fewer than the default {DEFAULT_WINDOWS})")
        return want, None

    def model_for(self, rope_cfg: dict) -> GPT:
        """The run's weights in a model with ``rope_cfg`` (built once per distinct RoPE group)."""
        key = json.dumps(rope_cfg, sort_keys=True, default=str)
        if self._model is not None and self._model[0] == key:
            return self._model[1]
        device = self.settings.device
        if self._state is None:
            loaded = load_run_model(self.opened, rope_cfg, device, self.enc)
            self.checkpoint, self.step, model = loaded.checkpoint, loaded.step, loaded.model
            self._state = dict(model.state_dict())  # kept (not copied) for the models of other RoPE groups
        else:
            self._model = None  # free the previous model first
            with device:  # built where it runs: its random init (overwritten at once) costs nothing on a GPU
                model = build_model(self.run_cfg.model, rope_cfg, self.enc.n_vocab)
            model.load_state_dict(self._state)
            model.eval()
        self._model = (key, model)
        return model

    # -- the evaluation ---------------------------------------------------------------------------
    def evaluate(self, plan: EvalPlan) -> dict[str, Any]:
        """Evaluate every length of ``plan`` (one progress line each); returns the output record."""
        s = self.settings
        tokens, cap_note = self.token_budget()
        notes = [*plan.notes, *([cap_note] if cap_note else [])]
        bucket = s.bucket_size or max(1, plan.max_len // DEFAULT_BUCKETS)
        self.emit(f"{self.opened.run_dir}: rope={_rope_label(self.base_rope)}, scaling {plan.scaling.description}, "
                  f"{s.device}, {tokens} val tokens at lengths {', '.join(map(str, plan.lengths))} "
                  f"(RoPE cache {plan.max_len}) -> {OUT_DIR}/{plan.label}.json")
        for note in notes:
            self.emit(f"  note: {note}")
        autocast = runtime.autocast_context(s.dtype, s.device)
        val = self.val_tokens()
        per_length = []
        for L in plan.lengths:
            model = self.model_for(plan.rope_cfgs[L])
            try:
                with runtime.attention_backend(s.attention):
                    m = evaluate_length(model, val, L, tokens, plan.batches[L], self.enc.n_vocab, s.device, autocast,
                                        self.train_len, bucket)
            except torch.cuda.OutOfMemoryError:  # the estimate is a lower bound; say what to change
                fix = (f"lower batch_tokens (now {s.batch_tokens}) or drop it" if plan.batches[L] > 1
                       else "drop it")
                raise ConfigError(f"lengths: {L} ran out of memory on {s.device} with {plan.batches[L]} window(s) per "
                                  f"batch; {fix} from lengths") from None
            scaling = plan.rope_cfgs[L]["scaling"]
            m = {"length": L, "factor": scaling.get("factor"), "scaling": scaling, **m}
            per_length.append(m)
            self.emit(_progress_line(m, self.train_len))
        return self._record(plan, per_length, tokens, bucket, notes)

    def _record(self, plan: EvalPlan, per_length: list[dict], tokens: int, bucket: int, notes: list[str]) -> dict:
        cfg, s, r = self.run_cfg, self.settings, self.base_rope
        return {
            "label": plan.label, "run_dir": str(self.opened.run_dir), "checkpoint": str(self.checkpoint),
            "step": self.step, "seed": cfg.get("seed"), "rope": r["name"],
            "variant": None if r["name"] == "none" else r.get("variant", "partial"),
            "compute_dtype": r.get("compute_dtype"), "rope_label": _rope_label(r),
            "run_rope_label": _rope_label(self.run_rope), "train_seq_len": self.train_len,
            "scaling": plan.scaling.record(), "scaling_label": plan.scaling.description,
            "tokens": tokens, "val_stream_tokens": int(len(self.val_tokens())), "bucket_size": bucket, "notes": notes,
            "lengths": per_length,
            "config": {
                "run": str(self.opened.run_dir), "checkpoint": str(self.checkpoint), "lengths": list(plan.lengths),
                "tokens": tokens, "batch_tokens": s.batch_tokens, "bucket_size": bucket, "device": str(s.device),
                "dtype": s.dtype, "attention": s.attention,
                "rope": {str(L): plan.rope_cfgs[L] for L in plan.lengths},
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                "data": OmegaConf.to_container(cfg.data, resolve=True), "tokenizer": cfg.tokenizer.name,
            },
            "created_at": time.time(),
        }


def _progress_line(m: dict, train_len: int) -> str:
    beyond = "" if m["loss_beyond_train"] is None else f"  beyond {train_len}: {m['loss_beyond_train']:.4f}"
    factor = "" if m["factor"] is None else f"  factor {m['factor']:g}"
    return (f"  L={m['length']:>6}{factor}  {m['windows']} window(s), batch {m['batch_size']}: "
            f"val_loss {m['val_loss']:.4f} ± {m['val_loss_se']:.4f}  acc {m['val_acc']:.4f}  "
            f"ppl {m['val_ppl']:.2f}{beyond}  {m['seconds']:.1f}s")


@torch.no_grad()
def token_losses(model: GPT, x: torch.Tensor, y: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cross-entropy (float32) and argmax correctness, both (B, T), with the head run on a bounded
    number of positions at a time: the (B·T × vocab) logits of a long window never exist at once."""
    h = model.hidden(x)
    flat_h, flat_y = h.flatten(0, 1), y.flatten()
    losses = torch.empty(flat_y.shape, dtype=torch.float32, device=h.device)
    correct = torch.empty(flat_y.shape, dtype=torch.bool, device=h.device)
    step = logits_chunk(model.cfg.padded_vocab)
    for a in range(0, flat_y.numel(), step):
        logits = model.head(flat_h[a:a + step])
        losses[a:a + step] = F.cross_entropy(logits.float(), flat_y[a:a + step], reduction="none")
        correct[a:a + step] = logits[:, :vocab_size].argmax(dim=-1) == flat_y[a:a + step]
    return losses.view_as(y), correct.view_as(y)


def length_windows(val: np.ndarray, length: int, tokens: int, batch: int):
    """The windows of ``length`` covering the first ``tokens`` val tokens, ``batch`` at a time (the last
    batch smaller): :func:`llm.data.val_batches`'s windows, starting at multiples of ``length``."""
    n = tokens // length
    full = n // batch
    if full:
        yield from val_batches(val, batch, length, full)
    if n % batch:
        yield from val_batches(val[full * batch * length:], n % batch, length, 1)


@torch.no_grad()
def evaluate_length(model: GPT, val: np.ndarray, length: int, tokens: int, batch: int, vocab_size: int,
                    device: torch.device, autocast, train_len: int, bucket: int) -> dict[str, Any]:
    """Loss (with its SE over windows), accuracy, perplexity, the loss within and beyond ``train_len``
    and the mean loss per ``bucket`` positions, over the ``tokens // length`` windows of ``length``."""
    t0 = time.perf_counter()
    model.eval()
    pos_sum = torch.zeros(length, dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.float64, device=device)
    w_sum = torch.zeros((), dtype=torch.float64, device=device)
    w_sq = torch.zeros((), dtype=torch.float64, device=device)
    windows = 0
    for x, y in length_windows(val, length, tokens, batch):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            loss, right = token_losses(model, x, y, vocab_size)
        loss = loss.double()
        pos_sum += loss.sum(dim=0)
        correct += right.sum()
        window = loss.mean(dim=1)
        w_sum += window.sum()
        w_sq += (window**2).sum()
        windows += len(window)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    per_pos = (pos_sum / windows).tolist()
    w_sum_f, w_sq_f = w_sum.item(), w_sq.item()
    mean = float(np.mean(per_pos))
    var = max(0.0, (w_sq_f - w_sum_f**2 / windows) / (windows - 1)) if windows > 1 else float("nan")
    within, beyond = per_pos[:train_len], per_pos[train_len:]
    buckets = [{"start": a, "end": min(a + bucket, length), "loss": float(np.mean(per_pos[a:a + bucket]))}
               for a in range(0, length, bucket)]
    seconds = time.perf_counter() - t0
    return {
        "val_loss": mean, "val_loss_se": math.sqrt(var / windows), "val_acc": correct.item() / (windows * length),
        "val_ppl": math.exp(mean) if mean < 700 else float("inf"), "val_tokens": windows * length,
        "windows": windows, "batch_size": min(batch, windows), "loss_within_train": float(np.mean(within)),
        "loss_beyond_train": float(np.mean(beyond)) if beyond else None, "seconds": seconds,
        "tokens_per_s": windows * length / seconds if seconds > 0 else None, "buckets": buckets,
    }


# -- outputs ----------------------------------------------------------------------------------------------
def write_result(result: Mapping, out_dir: Path) -> tuple[Path, Path]:
    """``<out_dir>/<label>.json`` and ``.csv`` (one row per length), each written whole or not at all."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / f"{result['label']}.json", out_dir / f"{result['label']}.csv"
    write_json_atomic(json_path, result)
    with atomic_open(csv_path) as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for m in result["lengths"]:
            w.writerow([result["label"] if c == "label" else ("" if m.get(c) is None else repr(m[c]))
                        for c in CSV_COLUMNS])
    return json_path, csv_path


def open_for_eval(run: str | None, checkpoint: str | None = None) -> OpenedRun:
    """The run dir checked (a config and a checkpoint present); raises :class:`ConfigError` naming ``run=``."""
    if run in (None, ""):
        raise ConfigError("run= is required: the run dir to evaluate (e.g. run=outputs/runs/<date>/<time>_torch_s0)")
    return open_run(str(run), checkpoint)


def eval_lengths_from_config(cfg: Mapping, emit: Emit = print) -> tuple[dict, Path]:
    """``python -m llm.eval_lengths``: check everything, evaluate, write; returns the record and its JSON path."""
    settings = read_settings(cfg)
    opened = open_for_eval(cfg.get("run"), cfg.get("checkpoint"))
    evaluator = LengthEvaluator(opened, settings, rope_override(cfg), emit)
    plan = evaluator.plan(scaling_request(cfg))
    result = evaluator.evaluate(plan)
    json_path, csv_path = write_result(result, opened.run_dir / OUT_DIR)
    emit(f"wrote {json_path} and {csv_path.name}")
    return result, json_path


def evaluate_scalings(run_dir: Path, requests: Sequence[Mapping | None], settings: EvalSettings,
                      emit: Emit = print) -> list[Path]:
    """Evaluate one run with several scaling requests (one weights load), writing each; returns the JSONs.
    Every request is checked before the first evaluation."""
    evaluator = LengthEvaluator(open_for_eval(str(run_dir)), settings, None, emit)
    plans = [evaluator.plan(r) for r in requests]
    return [write_result(evaluator.evaluate(plan), Path(run_dir) / OUT_DIR)[0] for plan in plans]
