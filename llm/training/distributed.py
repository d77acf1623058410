"""torch.distributed set-up for ``torchrun``: one process per GPU (or CPU processes on gloo)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from llm.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group torchrun describes in the environment; a plain run is world size 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":  # before any collective: NCCL uses the current device of each rank
        _check_a_gpu_per_process(local_rank)
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank)


def _check_a_gpu_per_process(local_rank: int) -> None:
    """Each process of a node takes the GPU of its local rank. Checked by every rank against the node's process
    count, so all refuse alike and rank 0 says it once; else the ranks past the last GPU failed with CUDA's
    "invalid device ordinal" traceback while rank 0 waited for them in the process group."""
    per_node = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), local_rank + 1)
    gpus = torch.cuda.device_count()
    if per_node > gpus:
        raise ConfigError(f"device: torchrun started {per_node} processes on this node, a GPU each, and it has "
                          f"{gpus} GPU{'s' if gpus != 1 else ''}: run torchrun --nproc_per_node={gpus} or fewer, or "
                          "device=cpu (processes on the CPU, gloo)")


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def all_reduce_mean(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        t /= info.world_size
    return t


def any_rank(flag: bool, info: DistInfo, device: torch.device) -> bool:
    """True on every rank when it is true on any (so all ranks stop at the same step)."""
    if not info.enabled:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def cleanup(info: DistInfo, together: bool = False) -> None:
    """Leave the process group. ``together`` (every rank ended its run normally): after a barrier, so no rank
    tears its connections down while another still writes its outputs and may yet send; a rank that failed skips
    it (its peers may never arrive, and torchrun ends them once it exits)."""
    if info.enabled and dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()
