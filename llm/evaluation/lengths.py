"""Evaluate a finished run at other context lengths: per length, the loss of the whole window, the loss beyond the
training length on its own, a sliding-window baseline on the same targets and the degradation against the
run's own level, with any RoPE scaling and any implementation of the run's rotation.

Why these choices:

* **Windows from whole documents** (:mod:`llm.evaluation.documents`): a window of length L is the start (or a
  later L-token piece) of one val document at least L tokens long, never a splice of unrelated files. Per
  length, the number of such documents and the tokens they hold are reported; a split without enough of them
  gives a smaller evaluation with a note, a length none reaches is skipped with a warning.
* **The same targets for every run and scaling at a length**: the windows depend only on the val split, the
  length and the token budget (``tokens``, per length), so runs, scalings and implementations are compared
  on identical targets. Different lengths draw on different documents (the long ones are fewer), so
  compare lengths through the within-length numbers (beyond-T loss against its baseline), not the raw loss.
* **Beyond the training length on its own**: T is the run's ``model.seq_len`` (``reference_len`` sets it,
  e.g. to the original length for a fine-tuned run); positions >= T are ``loss_beyond_train``, and two
  baselines predict those same targets from the last T tokens only (:mod:`llm.evaluation.losses`,
  :mod:`llm.evaluation.metrics`): the evaluated model itself (``sliding_*``; ``gain_beyond_train`` < 0:
  it uses the longer context) and the run as trained (``baseline_*``; ``degradation``: the cost of length L
  with this scaling against the run's own level, which removes the seed's level from comparisons).
* **Memory.** Long windows shrink the batch (``batch_tokens`` tokens per forward, at least one window);
  attention is SDPA (flash / memory-efficient kernels on a GPU under the training's bfloat16 autocast, a fused
  flash-style kernel on the CPU: neither holds the L x L scores, ``attention=math`` does);
  the vocabulary head runs on a few hundred positions at a time, so the (tokens x vocab) logits are never
  held at once. A length whose single window cannot fit the device is refused before any work, naming
  ``lengths``.
* **The RoPE cache** is sized to the longest length (``rope.max_seq_len``); positions beyond the training
  length are exactly what is being measured.
* **Loss against position**: the mean of each loss per bucket of ``bucket_size`` positions, so a plot shows
  where a model stops generalizing (typically at the training length) and where it crosses its baseline.

Outputs (run dir): ``eval_lengths/<label>.json`` (per-length metrics and document counts, per-bucket losses,
skipped lengths, the exact config used) and ``eval_lengths/<label>.csv`` (one row per evaluated length).
"""

from __future__ import annotations

import csv
import json
import logging
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

import rope
from llm.checks import is_positive_int, positive_int
from llm.config_check import device_memory_bytes
from llm.data import TokenData, prepare_data
from llm.errors import ConfigError
from llm.evaluation.documents import DOCUMENT_ORDER_SEED, Segments, WindowSelection, document_segments, select_windows
from llm.evaluation.losses import logits_chunk, sliding_losses, sliding_plan, window_losses
from llm.evaluation.metrics import length_metrics
from llm.evaluation.scaling import ScalingPlan, resolve_scaling
from llm.fileio import atomic_open, write_json_atomic
from llm.generation.load import (
    OpenedRun,
    command_line_rope_keys,
    command_line_rope_preset,
    load_run_model,
    open_run,
    refuse_rope_keys_without_a_kernel,
    rope_for_generation,
    run_tokenizer,
    with_checkpoint,
)
from llm.model import GPT, GPTConfig, build_model
from llm.training import runtime
from llm.training.run_dir import unfinished_run

OUT_DIR = "eval_lengths"
#: Default evaluation lengths, as multiples of the run's training ``model.seq_len``.
DEFAULT_MULTIPLES = (1, 2, 4, 8, 16)
#: Default token budget per length: 2^20 target tokens, where the val split's documents hold them.
DEFAULT_TOKENS = 2**20
#: Default bucket count of the loss-vs-position curve at the longest length.
DEFAULT_BUCKETS = 64
DTYPES = ("auto", "float32", "bfloat16")
CSV_COLUMNS = ("label", "length", "factor", "val_loss", "val_loss_se", "val_acc", "val_ppl", "val_tokens", "windows",
               "documents", "eligible_documents", "eligible_tokens", "batch_size", "loss_within_train",
               "loss_beyond_train", "sliding_loss", "sliding_beyond_train", "gain_beyond_train",
               "gain_beyond_train_se", "baseline_loss", "baseline_beyond_train", "degradation", "degradation_se",
               "seconds")

Emit = Callable[[str], None]


# -- settings ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalSettings:
    """The checked settings of one evaluation (conf/eval_lengths.yaml)."""

    lengths: tuple[int, ...] | None  # None: DEFAULT_MULTIPLES x the run's seq_len
    tokens: int | None  # per length; None: DEFAULT_TOKENS (at least one window of the longest length)
    batch_tokens: int
    bucket_size: int | None  # None: the longest length / DEFAULT_BUCKETS
    device: torch.device
    dtype: str = "auto"
    attention: str = "auto"
    cache_dir: str = "~/.cache/ropelab"
    label: str | None = None
    reference_len: int | None = None  # T; None: the run's model.seq_len
    baseline_window: int | None = None  # None: T
    baseline_stride: int | None = None  # None: half the window


def _optional_positive(cfg: Mapping, key: str) -> int | None:
    return positive_int(cfg.get(key), key, allow_none=True, must_be="a positive integer (or null for the default)")


def read_lengths(value: object) -> tuple[int, ...] | None:
    """``lengths=[512,1024]`` (or one int) as sorted distinct positive ints; None for the default."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) or OmegaConf.is_list(value) else [value]
    if not items or not all(is_positive_int(v) for v in items):
        shown = OmegaConf.to_container(value) if OmegaConf.is_list(value) else value
        raise ConfigError(f"lengths={shown!r} must be a list of positive integers, e.g. lengths=[512,1024,2048]")
    return tuple(sorted(set(items)))


def read_settings(cfg: Mapping) -> EvalSettings:
    """Every setting checked before the run is opened; each problem is one line naming the key."""
    batch_tokens = positive_int(cfg.get("batch_tokens", 65536), "batch_tokens",
                                must_be="a positive integer (tokens per forward batch)")
    dtype = cfg.get("dtype", "auto")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}; allowed: {', '.join(DTYPES)}")
    attention = cfg.get("attention", "auto")
    if attention not in runtime.ATTENTION_BACKENDS:
        raise ConfigError(f"attention={attention!r}; allowed: {', '.join(runtime.ATTENTION_BACKENDS)}")
    label = cfg.get("label")
    if label is not None and (not str(label) or "/" in str(label) or str(label).startswith(".")):
        raise ConfigError(f"label={label!r} must be a file name (no '/', not starting with '.')")
    window, stride = _optional_positive(cfg, "baseline_window"), _optional_positive(cfg, "baseline_stride")
    if window is not None and stride is not None and stride > window:
        raise ConfigError(f"baseline_stride={stride} must be at most baseline_window={window} (the baseline scores "
                          "the last stride positions of each window)")
    return EvalSettings(read_lengths(cfg.get("lengths")), _optional_positive(cfg, "tokens"), batch_tokens,
                        _optional_positive(cfg, "bucket_size"), runtime.resolve_device(str(cfg.get("device", "auto"))),
                        dtype, attention, str(cfg.get("cache_dir") or "~/.cache/ropelab"),
                        None if label is None else str(label), _optional_positive(cfg, "reference_len"), window,
                        stride)


# -- memory -----------------------------------------------------------------------------------------------
def eval_memory_bytes(cfg: GPTConfig, batch: int, length: int, dense_attention: bool) -> int:
    """An estimate of what one evaluation batch allocates, so that a length that cannot fit is refused before any
    work: float32 weights, one layer's activations (nothing is kept for backward), the T x T scores only when
    attention is not a fused kernel (``attention=math``; SDPA's causal kernels, the CPU's included, never hold
    them), and one chunk of float32 logits with its softmax."""
    d, ff = cfg.n_embd, cfg.d_ff or 4 * cfg.n_embd
    qkv = (cfg.n_head + 2 * (cfg.n_kv_head or cfg.n_head)) * cfg.head_dim
    weights = 4 * cfg.param_count()
    activations = 4 * batch * length * (6 * d + qkv + 2 * ff)
    scores = 8 * batch * cfg.n_head * length * length if dense_attention else 0
    logits = 8 * min(batch * length, logits_chunk(cfg.padded_vocab)) * cfg.padded_vocab
    return weights + activations + scores + logits


def batch_for_length(cfg: GPTConfig, length: int, batch_tokens: int, device: torch.device, attention: str) -> int:
    """Windows per forward at ``length``: ``batch_tokens // length`` (at least 1), halved until the batch fits
    the device. Raises :class:`ConfigError` naming ``lengths`` when one window does not fit: better refused at
    once than killed for memory after the lengths before it ran."""
    # only attention=math holds the (heads x L x L) scores: SDPA with is_causal and no mask runs a fused kernel on
    # the CPU too, so counting the scores there refused lengths that fit
    dense = attention == "math"
    have = device_memory_bytes(device)
    batch = max(1, batch_tokens // length)
    while batch > 1 and eval_memory_bytes(cfg, batch, length, dense) > have:
        batch //= 2
    need = eval_memory_bytes(cfg, batch, length, dense)
    if need > have:
        raise ConfigError(f"lengths: {length} needs at least {need / 2**30:.1f} GiB for one window, more than the "
                          f"{have / 2**30:.1f} GiB of {device}; drop it from lengths"
                          + (" (attention=math holds the scores; attention=auto runs a fused kernel: far less)"
                             if dense else ""))
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
    r.pop("scaling", None)  # the command's own keys (scaling_request)
    refuse_rope_keys_without_a_kernel(r, "eval_lengths")
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


def _key(rope_cfg: Mapping) -> str:
    return json.dumps(rope_cfg, sort_keys=True, default=str)


class _EmitHandler(logging.Handler):
    def __init__(self, out: Emit) -> None:
        super().__init__(logging.INFO)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out(record.getMessage())


@contextmanager
def data_log_shown(emit: Emit) -> Iterator[None]:
    """The data cache's log lines through ``emit`` where no handler would show them (the command runs without
    Hydra's logging): building the val split's cache can take minutes, and long work must show its progress."""
    logger = logging.getLogger("llm.data")
    if logger.hasHandlers():
        yield
        return
    handler, level = _EmitHandler(emit), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


class LengthEvaluator:
    """One run opened for evaluation at other lengths: checked at once, weights and val tokens loaded on
    first use and then kept, so several scalings of one run cost one load (and one run's own baseline)."""

    def __init__(self, opened: OpenedRun, settings: EvalSettings, override: Mapping | None = None,
                 emit: Emit = print, explicit: Collection[str] = (), preset: str | None = None) -> None:
        self.opened, self.settings, self.emit = opened, settings, emit
        self.run_cfg = opened.config
        self.train_len = int(self.run_cfg.model.seq_len)
        self.reference_len = settings.reference_len or self.train_len
        self.window = settings.baseline_window or self.reference_len
        self.stride = settings.baseline_stride or max(1, self.window // 2)
        if self.stride > self.window:
            raise ConfigError(f"baseline_stride={self.stride} must be at most the baseline window {self.window} "
                              "(baseline_window, default reference_len)")
        run_rope = OmegaConf.to_container(self.run_cfg.rope, resolve=True)
        self.run_rope = dict(run_rope)
        # explicit: the rope keys the command line set (rope_for_generation refuses another rotation asked for);
        # rope.scaling.* is this command's own request, resolved by plan()
        self.base_rope = rope_for_generation(run_rope, override, settings.device, opened.context_len,
                                             frozenset(explicit) - {"scaling"}, preset)
        self.enc = run_tokenizer(opened)
        fields = GPTConfig.__dataclass_fields__
        model_kw = {k: v for k, v in OmegaConf.to_container(self.run_cfg.model, resolve=True).items() if k in fields}
        self.model_cfg = GPTConfig(vocab_size=self.enc.n_vocab, **model_kw)
        self.lengths = settings.lengths or tuple(m * self.train_len for m in DEFAULT_MULTIPLES)
        self.max_len = max(self.lengths)
        self.batches = {L: batch_for_length(self.model_cfg, L, settings.batch_tokens, settings.device,
                                            settings.attention) for L in self.lengths}
        self.budget = settings.tokens or max(DEFAULT_TOKENS, self.max_len)
        if self.budget < self.max_len:
            raise ConfigError(f"tokens={self.budget} must be at least the longest length {self.max_len} "
                              "(one window of it)")
        self.window_batch = batch_for_length(self.model_cfg, min(self.window, self.max_len), settings.batch_tokens,
                                             settings.device, settings.attention)
        own = resolve_scaling(None, self.run_rope, self.train_len)
        self.own_rope = {**self.base_rope, "max_seq_len": self.max_len, "scaling": own.for_length(self.train_len)}
        self._data: TokenData | None = None
        self._segments: Segments | None = None
        self._selections: dict[int, WindowSelection] = {}
        self._sliding_losses: dict[tuple[str, int], np.ndarray] = {}  # (rope group, length) -> sliding-window losses
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
    def data(self) -> TokenData:
        if self._data is None:
            cfg = self.run_cfg
            with data_log_shown(self.emit):
                self._data = prepare_data(cfg.data, cfg.tokenizer.name, self.settings.cache_dir)
        return self._data

    def val_tokens(self) -> np.ndarray:
        return self.data().val

    def selection(self, length: int) -> WindowSelection:
        """The windows of ``length`` (whole documents of the val split), chosen once per length."""
        if length not in self._selections:
            if self._segments is None:
                self._segments = document_segments(self.val_tokens(), self.data().eot)
            self._selections[length] = select_windows(self._segments, length, self.budget)
        return self._selections[length]

    def selections(self, lengths: Sequence[int]) -> list[WindowSelection]:
        """The selection of every length; a :class:`ConfigError` naming ``lengths`` when no length has a window."""
        chosen = [self.selection(L) for L in lengths]
        if all(s.skipped for s in chosen):
            longest = chosen[0].longest_document
            raise ConfigError(f"lengths: no val document has {min(lengths)} tokens (the longest has {longest}); "
                              "evaluation windows come from whole documents: shorter lengths, or a corpus with "
                              "longer documents")
        return chosen

    def model_for(self, rope_cfg: dict) -> GPT:
        """The run's weights in a model with ``rope_cfg`` (built once per distinct RoPE group)."""
        key = _key(rope_cfg)
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
    def sliding_for(self, rope_cfg: dict, selection: WindowSelection,
                    autocast: AbstractContextManager) -> np.ndarray:
        """The sliding-window losses of ``selection``'s windows under ``rope_cfg`` (computed once per pair)."""
        key = (_key(rope_cfg), selection.length)
        if key not in self._sliding_losses:
            model = self.model_for(rope_cfg)
            plan = sliding_plan(selection.length, self.window, self.stride)
            with runtime.attention_backend(self.settings.attention):
                self._sliding_losses[key] = sliding_losses(model, self.val_tokens(), selection.starts, plan,
                                                    self.window_batch, self.enc.n_vocab, self.settings.device,
                                                    autocast)
        return self._sliding_losses[key]

    def evaluate(self, plan: EvalPlan, save: Callable[[dict], object] | None = None) -> dict[str, Any]:
        """Evaluate every length of ``plan`` (one progress line each, one per baseline before); returns the output
        record. ``save`` takes the record so far after every length: a run cut short keeps what it finished."""
        s = self.settings
        # the checkpoint read before the data: one that cannot load is said before the val split is tokenized
        self.opened = with_checkpoint(self.opened)
        selections = self.selections(plan.lengths)
        kept = [sel for sel in selections if not sel.skipped]
        notes = [*plan.notes, *(n for sel in selections if not sel.skipped and (n := sel.note()))]
        skipped = [{"length": sel.length, "reason": sel.note()} for sel in selections if sel.skipped]
        self.emit(f"{self.opened.run_dir}: rope={_rope_label(self.base_rope)}, scaling {plan.scaling.description}, "
                  f"{s.device}, up to {self.budget} target tokens per length from whole val documents, lengths "
                  f"{', '.join(map(str, plan.lengths))} (T={self.reference_len}, baseline window {self.window} "
                  f"stride {self.stride}; RoPE cache {plan.max_len}) -> {OUT_DIR}/{plan.label}.json")
        for note in notes:
            self.emit(f"  note: {note}")
        for skip in skipped:
            self.emit(f"  warning: {skip['reason']}")
        autocast = runtime.autocast_context(s.dtype, s.device)
        for sel in kept:  # the run's own baselines first: one model for all of them, shared by every scaling
            t0 = time.perf_counter()
            self.sliding_for(self.own_rope, sel, autocast)
            self.emit(f"  baseline L={sel.length}: the run's own {self.window}-token windows, "
                      f"{time.perf_counter() - t0:.1f} s")
        # once the weights are loaded (an earlier record's checkpoint is compared), on the longest length evaluated
        bucket = self._bucket(plan, max(sel.length for sel in kept))
        per_length = []
        for sel in kept:
            L = sel.length
            t0 = time.perf_counter()
            model = self.model_for(plan.rope_cfgs[L])
            try:
                with runtime.attention_backend(s.attention):
                    loss, correct = window_losses(model, self.val_tokens(), sel.starts, L, plan.batches[L],
                                                  self.enc.n_vocab, s.device, autocast)
                sliding = self.sliding_for(plan.rope_cfgs[L], sel, autocast)
            except torch.cuda.OutOfMemoryError:  # the estimate is a lower bound; say what to change
                fix = (f"lower batch_tokens (now {s.batch_tokens}) or drop it" if plan.batches[L] > 1
                       else "drop it")
                raise ConfigError(f"lengths: {L} ran out of memory on {s.device} with {plan.batches[L]} window(s) per "
                                  f"batch; {fix} from lengths") from None
            baseline = self.sliding_for(self.own_rope, sel, autocast)
            if s.device.type == "cuda":
                torch.cuda.synchronize(s.device)
            seconds = time.perf_counter() - t0
            scaling = plan.rope_cfgs[L]["scaling"]
            m = {"length": L, "factor": scaling.get("factor"), "scaling": scaling,
                 **length_metrics(loss, correct, sliding, baseline, self.reference_len, bucket),
                 **sel.record(), "batch_size": min(plan.batches[L], sel.windows), "seconds": seconds,
                 "tokens_per_s": sel.tokens / seconds if seconds > 0 else None}
            per_length.append(m)
            self.emit(_progress_line(m, self.reference_len))
            if save is not None:
                save(self._record(plan, per_length, skipped, bucket, notes))
        return self._record(plan, per_length, skipped, bucket, notes)

    def _bucket(self, plan: EvalPlan, longest: int) -> int:
        """``bucket_size=``, else the bucket of the file's earlier record of this evaluation (more lengths join it
        on its buckets), else ``longest`` (the longest length evaluated) / DEFAULT_BUCKETS. Why not the longest
        length asked: one that no val document reaches is skipped, and its buckets (of 781 positions for a
        skipped 50000) left the lengths evaluated a loss-vs-position curve of one bucket."""
        default = max(1, longest // DEFAULT_BUCKETS)
        if self.settings.bucket_size:
            return self.settings.bucket_size
        earlier = read_earlier(self.opened.run_dir / OUT_DIR, plan.label)
        if earlier is None or not isinstance(earlier.get("bucket_size"), int):
            return default
        mine = {**self._record(plan, [], [], default, []), "bucket_size": earlier["bucket_size"]}
        return default if _conflict(earlier, mine) else earlier["bucket_size"]

    def _record(self, plan: EvalPlan, per_length: list[dict], skipped: list[dict], bucket: int,
                notes: list[str]) -> dict:
        cfg, s, r = self.run_cfg, self.settings, self.base_rope
        return {
            # the file itself (last.pt is a link to the newest step_*.pt; a relative path depends on the cwd)
            "label": plan.label, "run_dir": str(self.opened.run_dir), "checkpoint": _checkpoint_file(self.checkpoint),
            "step": self.step, "seed": cfg.get("seed"), "rope": r["name"],
            "variant": None if r["name"] == "none" else r.get("variant", "partial"),
            "compute_dtype": r.get("compute_dtype"), "rope_label": _rope_label(r),
            "run_rope_label": _rope_label(self.run_rope), "train_seq_len": self.train_len,
            "reference_len": self.reference_len, "init_from": cfg.train.get("init_from"),
            "packing": cfg.data.get("packing", "random"),
            "scaling": plan.scaling.record(), "scaling_label": plan.scaling.description,
            "tokens": self.budget, "val_stream_tokens": int(len(self.val_tokens())), "bucket_size": bucket,
            "autocast_dtype": runtime.autocast_name(s.dtype, s.device),
            "baseline": {"window": self.window, "stride": self.stride, "rope": self.own_rope},
            "document_order_seed": DOCUMENT_ORDER_SEED, "notes": notes, "skipped": skipped,
            "lengths": per_length,
            "config": {
                "run": str(self.opened.run_dir), "checkpoint": str(self.checkpoint), "lengths": list(plan.lengths),
                "tokens": self.budget, "batch_tokens": s.batch_tokens, "bucket_size": bucket, "device": str(s.device),
                "dtype": s.dtype, "attention": s.attention, "reference_len": self.reference_len,
                "baseline_window": self.window, "baseline_stride": self.stride,
                "rope": {str(L): plan.rope_cfgs[L] for L in plan.lengths},
                "model": OmegaConf.to_container(cfg.model, resolve=True),
                "data": OmegaConf.to_container(cfg.data, resolve=True), "tokenizer": cfg.tokenizer.name,
            },
            "created_at": time.time(),
        }


def _fmt_opt(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.4f}" if signed else f"{v:.4f}")


def _progress_line(m: dict, split: int) -> str:
    factor = "" if m["factor"] is None else f"  factor {m['factor']:g}"
    se = "" if m["val_loss_se"] is None else f" ± {m['val_loss_se']:.4f}"  # one window: no spread to show
    beyond = "" if m["loss_beyond_train"] is None else (
        f"  beyond {split}: {m['loss_beyond_train']:.4f} (gain over sliding {_fmt_opt(m['gain_beyond_train'], True)},"
        f" degradation {_fmt_opt(m['degradation'], True)})")
    return (f"  L={m['length']:>6}{factor}  {m['windows']} window(s) from {m['documents']} document(s), batch "
            f"{m['batch_size']}: val_loss {m['val_loss']:.4f}{se}  acc {m['val_acc']:.4f}  "
            f"ppl {m['val_ppl']:.2f}{beyond}  {m['seconds']:.1f}s")


# -- outputs ----------------------------------------------------------------------------------------------
#: What makes two evaluations of a run one evaluation, whose lengths may share a file.
SAME_EVALUATION = ("checkpoint", "step", "rope_label", "scaling_label", "tokens", "reference_len", "baseline",
                   "bucket_size", "document_order_seed", "autocast_dtype")  # (the baseline's RoPE cache size
# aside: _comparable). autocast_dtype: a length evaluated under bfloat16 autocast differs from a float32 one by more
# than the scalings being compared (a bfloat16 baseline too), so lengths of the two never share a file.


def read_earlier(out_dir: Path, label: str) -> dict | None:
    """The record already at ``<out_dir>/<label>.json`` (None when there is none or it cannot be read)."""
    try:
        earlier = json.loads((out_dir / f"{label}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(earlier, dict) or not isinstance(earlier.get("lengths"), list):
        return None
    readable = all(isinstance(m, dict) and isinstance(m.get("length"), int) for m in earlier["lengths"])
    return earlier if readable else None


def _conflict(earlier: Mapping | None, record: Mapping) -> str | None:
    """How ``earlier`` differs from ``record`` in :data:`SAME_EVALUATION` (``key=old`` against ``new``, each key that
    differs), or None. The bucket size is named only where nothing else differs: another evaluation takes its own
    default bucket (:meth:`LengthEvaluator._bucket`), so naming it would hide the difference that made it another."""
    if earlier is None:
        return None
    differ = [f"{key}={old!r} (this one: {new!r})" for key in SAME_EVALUATION
              if _comparable(key, old := _value(earlier, key)) != _comparable(key, new := _value(record, key))]
    if len(differ) > 1:
        differ = [d for d in differ if not d.startswith("bucket_size=")]
    return ", ".join(differ) or None


def _value(record: Mapping, key: str) -> Any:
    """``record[key]``; a record written before ``autocast_dtype`` was recorded gets it from its config's ``dtype``
    and ``device``, as the evaluation resolved them (so its lengths still join a float32 evaluation of today)."""
    if key != "autocast_dtype" or key in record:
        return record.get(key)
    config = record.get("config")
    if not isinstance(config, Mapping) or not isinstance(config.get("dtype"), str):
        return None
    try:
        device = torch.device(str(config.get("device", "cpu")))
    except (RuntimeError, ValueError):
        return None
    return runtime.autocast_name(config["dtype"], device)


def _comparable(key: str, value: Any) -> Any:
    """A :data:`SAME_EVALUATION` value as evaluations compare it: the baseline's RoPE cache size follows the
    longest length asked, and changes no loss (a position's cos/sin do not depend on the table's length); a
    checkpoint is the file a path names (``checkpoint=<run>/checkpoints/last.pt`` is the newest step_*.pt that the
    default evaluates: the same evaluation, whose lengths were moved to superseded/ as another's)."""
    if key == "baseline" and isinstance(value, Mapping) and isinstance(value.get("rope"), Mapping):
        return {**value, "rope": {k: v for k, v in value["rope"].items() if k != "max_seq_len"}}
    if key == "checkpoint" and isinstance(value, str) and value != "None":
        return _checkpoint_file(value)
    return value


def _checkpoint_file(path: Path | str | None) -> str:
    """``path`` as the absolute path of the file it names (links resolved); as given where it cannot be resolved."""
    if path is None:
        return str(path)
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return str(path)


#: Where an earlier record of another evaluation under the same label is moved (the reports read only OUT_DIR/*.json).
SUPERSEDED_DIR = "superseded"


def _merged(result: Mapping, out_dir: Path, emit: Emit) -> Mapping:
    """``result`` with the lengths an earlier record of the same evaluation holds and this one does not: evaluating
    more lengths adds to a run's file, and evaluating one again replaces only that one. An earlier record of another
    evaluation (another checkpoint, budget, T, baseline or scaling) is moved to ``superseded/``, never overwritten."""
    earlier = read_earlier(out_dir, result["label"])
    if earlier is None and not (out_dir / f"{result['label']}.json").exists():
        return result
    # a file there that does not read as a record may still be someone's results: moved aside, never overwritten
    conflict = "a file that does not read as an evaluation record" if earlier is None else _conflict(earlier, result)
    if conflict:
        keep = out_dir / SUPERSEDED_DIR
        keep.mkdir(exist_ok=True)
        created = (earlier or {}).get("created_at")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(created if isinstance(created, (int, float)) else None))
        for ext in ("json", "csv"):
            old = out_dir / f"{result['label']}.{ext}"
            if old.exists():
                old.replace(keep / f"{result['label']}-{stamp}.{ext}")
        emit(f"  note: {OUT_DIR}/{result['label']}.json held another evaluation ({conflict}): moved to "
             f"{OUT_DIR}/{SUPERSEDED_DIR}/{result['label']}-{stamp}.json")
        return result
    mine = {m["length"] for m in result["lengths"]}
    kept = [m for m in earlier["lengths"] if m.get("length") not in mine]
    if not kept:
        return result
    lengths = sorted([*kept, *result["lengths"]], key=lambda m: m["length"])
    config = {**result.get("config", {}), "lengths": [m["length"] for m in lengths]}
    # the rope group each kept length was evaluated with stays in the file: "the exact config used" of every length
    earlier_ropes, ropes = (earlier.get("config") or {}).get("rope"), config.get("rope")
    if isinstance(earlier_ropes, Mapping) and isinstance(ropes, Mapping):
        kept_ropes = {str(m["length"]): earlier_ropes[str(m["length"])] for m in kept
                      if str(m["length"]) in earlier_ropes}
        config["rope"] = dict(sorted({**kept_ropes, **ropes}.items(), key=lambda item: int(item[0])))
    return {**result, "lengths": lengths, "config": config}


def write_result(result: Mapping, out_dir: Path, emit: Emit = print) -> tuple[Path, Path]:
    """``<out_dir>/<label>.json`` and ``.csv`` (one row per length), each written whole or not at all; lengths of an
    earlier record of the same evaluation that this one did not evaluate are kept (:func:`_merged`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result = _merged(result, out_dir, emit)
    json_path, csv_path = out_dir / f"{result['label']}.json", out_dir / f"{result['label']}.csv"
    write_json_atomic(json_path, result)
    with atomic_open(csv_path) as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for m in result["lengths"]:
            w.writerow([result["label"] if c == "label" else ("" if m.get(c) is None else repr(m[c]))
                        for c in CSV_COLUMNS])
    return json_path, csv_path


def unfinished_run_warning(run_dir: Path) -> str | None:
    """One line when the run is still training (a live process holds its dir: it has no ``summary.json`` yet, or
    a resumed run's stale one) or its ``summary.json`` says it did not complete (interrupted, nonfinite, ...),
    naming the status and step; None for a completed run, or one without a summary (a checkpoint-only dir).

    Why a warning, not a refusal: an interrupted run's checkpoint is a model worth measuring, but its numbers are
    of a shorter training than the run asked for, and the length report leaves the run out until it completes.
    A run still training has no summary to say so: without the lock's check its checkpoint so far was evaluated
    as if it were the finished model."""
    if (why := unfinished_run(run_dir)) is None:
        return None
    pid, summary = why
    if pid is not None:
        return (f"warning: {run_dir} is still training (pid {pid}): its newest checkpoint so far is evaluated, not "
                "the finished model; evaluate it again once the run completes (another checkpoint: the file of "
                "this evaluation is then moved to superseded/)")
    status = summary["status"]
    of = f" of {summary['max_steps']}" if summary.get("max_steps") is not None else ""
    return (f"warning: {run_dir} did not complete: status {status} at step {summary.get('step', '?')}{of}; its "
            "checkpoint is evaluated, and python -m scripts.length_report leaves the run out until it "
            "completes (train.resume=auto)")


def open_for_eval(run: str | None, checkpoint: str | None = None) -> OpenedRun:
    """The run dir checked (a config and a checkpoint present); raises :class:`ConfigError` naming ``run=``."""
    return open_run(run, checkpoint, purpose="evaluate")


def eval_lengths_from_config(cfg: Mapping, emit: Emit = print) -> tuple[dict, Path]:
    """``python -m llm.eval_lengths``: check everything, evaluate, write; returns the record and its JSON path."""
    settings = read_settings(cfg)
    opened = open_for_eval(cfg.get("run"), cfg.get("checkpoint"))
    evaluator = LengthEvaluator(opened, settings, rope_override(cfg), emit, command_line_rope_keys(cfg),
                                command_line_rope_preset(cfg))
    plan = evaluator.plan(scaling_request(cfg))
    if warning := unfinished_run_warning(opened.run_dir):  # said once, before the work it concerns
        emit(warning)
    result, json_path, csv_path = evaluate_and_write(evaluator, plan, opened.run_dir / OUT_DIR, emit)
    emit(f"wrote {json_path} and {csv_path.name}")
    return result, json_path


def check_writable(out_dir: Path) -> None:
    """Refuse an output dir that cannot be written before any work: else the first length's work is lost to a
    traceback at its first write."""
    try:
        if out_dir.exists() and not out_dir.is_dir():
            raise NotADirectoryError(0, "a file, not a directory")
        # probed where the results go, or where their dir will be made: a refusal leaves no empty dir behind
        with tempfile.NamedTemporaryFile(dir=out_dir if out_dir.is_dir() else out_dir.parent, prefix=".write-check-"):
            pass
    except OSError as e:
        why = e.strerror or str(e)
        raise ConfigError(f"run={out_dir.parent}: its results cannot be written to {out_dir} ({why}); "
                          "evaluate a copy of the run dir that this user can write") from None


class LengthsInterrupted(KeyboardInterrupt):
    """Ctrl-C during an evaluation: ``json_path`` holds the lengths it finished, None where none had finished
    (nothing written), so the command says which."""

    def __init__(self, json_path: Path | None) -> None:
        super().__init__()
        self.json_path = json_path


def evaluate_and_write(evaluator: LengthEvaluator, plan: EvalPlan, out_dir: Path,
                       emit: Emit = print) -> tuple[dict, Path, Path]:
    """Evaluate ``plan`` and write its record after every length (:func:`write_result`), so an evaluation cut
    short (Ctrl-C, a crash at a long length) keeps the lengths it finished; returns the record and its files."""
    paths: list[Path] = []
    check_writable(out_dir)

    def save(record: dict) -> None:
        paths[:] = write_result(record, out_dir, emit)

    try:
        result = evaluator.evaluate(plan, save)
    except KeyboardInterrupt as e:
        raise LengthsInterrupted(paths[0] if paths else None) from e
    if not paths:  # no length evaluated (every one skipped): the record still says why
        save(result)
    return result, *paths


def evaluate_scalings(run_dir: Path, requests: Sequence[Mapping | None], settings: EvalSettings,
                      emit: Emit = print) -> list[Path]:
    """Evaluate one run with several scaling requests (one weights load), writing each; returns the JSONs.
    Every request is checked before the first evaluation."""
    evaluator = LengthEvaluator(open_for_eval(str(run_dir)), settings, None, emit)
    plans = [evaluator.plan(r) for r in requests]
    return [evaluate_and_write(evaluator, plan, Path(run_dir) / OUT_DIR, emit)[1] for plan in plans]
