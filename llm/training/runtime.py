"""Process-wide set-up for one run: device, determinism, attention kernel, MFU peak, git commit, signals.

Why one module: these are global switches of the process (torch flags, signal handlers, RNG seeds).
Keeping them together, each set explicitly for every run, is what stops one job of a Hydra multirun
(one process) from leaking its mode into the next.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import socket
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from llm.errors import ConfigError, one_line
from llm.training.distributed import DistInfo

# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' datasheets, for the MFU estimate, keyed by the words of
# the GPU's name they need: whole words, so an L40 is not taken for an L4, and a PCIe or NVL board (lower clocks and
# power) not for the SXM one.
PEAK_BF16_TFLOPS = {("H100", "PCIe"): 756.0, ("H100", "NVL"): 835.0, ("H200", "NVL"): 835.0, ("H100",): 989.0,
                    ("H200",): 989.0, ("A100",): 312.0, ("L40S",): 362.0, ("L4",): 121.0, ("A10G",): 125.0,
                    ("4090",): 165.0, ("3090",): 71.0}

#: train.attention values: "auto" lets PyTorch pick the scaled-dot-product-attention kernel.
ATTENTION_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


#: What ``device=`` takes (train, generate, eval_lengths).
DEVICES_ALLOWED = "auto, cpu, cuda, cuda:N"


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The device ``device=`` names (``auto``: CUDA when visible); checks it exists, does not select it."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r}; allowed: {DEVICES_ALLOWED}") from None
    if device.type not in ("cpu", "cuda"):  # torch parses mps, xpu, meta: the model would fail there, after the data
        raise ConfigError(f"device={name}: runs on a CPU or a CUDA GPU, not {device.type}; allowed: {DEVICES_ALLOWED}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name} but no CUDA GPU is visible; use device=cpu or device=auto")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device


def pick_device(name: str, dist_info: DistInfo) -> torch.device:
    """Resolve ``device=`` for this rank and make it the current CUDA device."""
    device = resolve_device(name, dist_info.local_rank if dist_info.enabled else 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def configure_torch(device: torch.device, deterministic: bool) -> None:
    """Set the process's numeric flags for this run, every run (they are global)."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # strict: an op with no deterministic kernel raises instead of silently varying between runs
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    if device.type == "cuda":  # TF32 for the few float32 matmuls left outside bf16 autocast
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int, step: int = 0) -> int:
    """The torch seed of torchrun's rank ``rank`` > 0 from ``step`` on: each rank draws its own dropout masks (seeded
    alike, every rank masked its rows the same way), and rank 0 keeps the run's own stream, so that a one-process
    run's draws do not change. ``step``: where a resume on another process count starts the rank's stream again."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1, np.uint64)[0] >> 1)


def attention_backend(name: str) -> AbstractContextManager:
    """Context restricting scaled_dot_product_attention to one kernel (``train.attention``); auto: no limit."""
    if name == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([backends[name]])


def check_attention_backend(name: str, device: torch.device, dtype_setting: str, dropout: float, n_head: int,
                            n_kv_head: int, head_dim: int) -> None:
    """Refuse ``train.attention=<kernel>`` where that SDPA kernel cannot run this run's attention (forward and
    backward, in its dtype, with its dropout and grouped-query heads) on ``device``, before the data loads: PyTorch
    finds out only at the first step, with a traceback ("No available kernel"). Its dropout draws no random numbers
    of the run's: call it before the seeds are set."""
    if name == "auto":
        return
    dtype = autocast_dtype(dtype_setting, device) or torch.float32
    q = torch.zeros(1, n_head, 8, head_dim, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.zeros(1, n_kv_head, 8, head_dim, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    try:  # PyTorch warns of each kernel it could not use: the refusal below says it in its one line
        with attention_backend(name), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout,
                                           enable_gqa=n_kv_head != n_head).sum().backward()
    except RuntimeError as e:
        gqa = f", {n_head} query / {n_kv_head} key-value heads" if n_kv_head != n_head else ""
        raise ConfigError(f"train.attention={name}: PyTorch has no {name} kernel for this run's attention on "
                          f"{device.type} ({str(dtype).removeprefix('torch.')}, head dim {head_dim}, model.dropout="
                          f"{dropout}{gqa}): {one_line(e)}; use train.attention=auto or math") from None


def autocast_dtype(dtype_setting: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype ``train.dtype`` gives on ``device`` (``auto``: bfloat16 on CUDA), or None: float32."""
    use_bf16 = dtype_setting == "bfloat16" or (dtype_setting == "auto" and device.type == "cuda")
    return torch.bfloat16 if use_bf16 else None


def autocast_name(dtype_setting: str, device: torch.device) -> str:
    """The autocast ``dtype_setting`` runs under on ``device`` as records name it: ``bfloat16``, or ``none``."""
    return str(autocast_dtype(dtype_setting, device) or "none").removeprefix("torch.")


def autocast_context(dtype_setting: str, device: torch.device) -> AbstractContextManager:
    """bfloat16 autocast when ``train.dtype`` asks for it (``auto``: on CUDA), else nothing."""
    dtype = autocast_dtype(dtype_setting, device)
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()


#: The ``train.peak_tflops`` values that mean "look the peak up from the GPU's name".
PEAK_LOOKUP = (None, "auto")


def check_peak_tflops(setting: object) -> None:
    """Refuse a ``train.peak_tflops`` that is neither a positive number nor auto/null: :func:`peak_tflops` reads it
    only after the data and the model are built (a traceback), and a negative or zero peak gives a wrong MFU."""
    if setting in PEAK_LOOKUP:
        return
    number = not isinstance(setting, bool) and isinstance(setting, (int, float))
    if not number or not math.isfinite(setting) or setting <= 0:
        shown = list(setting) if isinstance(setting, Sequence) and not isinstance(setting, str) else setting
        raise ConfigError(f"train.peak_tflops={shown!r} must be a positive number (the device's dense bf16 "
                          "TFLOP/s) or auto (looked up from the GPU's name)")


def peak_tflops(setting: str | float | None, device: torch.device) -> float | None:
    """The dense bf16 peak MFU is measured against: ``train.peak_tflops``, or looked up from the GPU name."""
    if setting not in PEAK_LOOKUP:
        return float(setting)
    if device.type != "cuda":
        return None
    return known_peak(torch.cuda.get_device_name(device))


def known_peak(gpu: str) -> float | None:
    """The datasheet peak of the GPU named ``gpu`` (the most specific entry whose words all occur in the name), None
    for a GPU not listed: its MFU is left out rather than measured against another GPU's peak."""
    words = set(re.findall(r"[A-Za-z0-9]+", gpu))
    found = [(len(key), peak) for key, peak in PEAK_BF16_TFLOPS.items() if words.issuperset(key)]
    return max(found)[1] if found else None


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def device_identity(device: torch.device) -> dict[str, str | None]:
    """Which physical device a run used: the host and, on CUDA, the GPU's UUID (a job pinned with
    CUDA_VISIBLE_DEVICES sees its GPU as cuda:0 whichever it is). The run comparison uses it to tell
    runs that shared a GPU, whose times are not speeds of their implementation."""
    uuid = None
    if device.type == "cuda":
        uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "") or None
    return {"host": socket.gethostname(), "device_uuid": uuid}


class GracefulStop:
    """First Ctrl-C/SIGTERM asks the loop to checkpoint and stop; a second Ctrl-C aborts at once.

    ``announce``: whether to say so on the console; under torchrun only rank 0 does (torchrun passes the signal
    on to every process, and each would print the same line)."""

    def __init__(self, announce: bool = True) -> None:
        self.signum: int | None = None
        self.aborting = False
        self.announce = announce
        self._old: dict = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            if self.aborting:  # a sweep's job gets a Ctrl-C from the terminal and from its sweep: abort once
                return
            self.aborting = True
            raise KeyboardInterrupt
        self.signum = signum
        if self.announce:
            tqdm.write(f"\n{signal.Signals(signum).name} received: finishing this step, then checkpointing "
                       "(press Ctrl-C again to abort without a checkpoint)")

    def __enter__(self) -> GracefulStop:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
