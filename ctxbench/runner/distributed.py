"""Many processes, one grid: ``accelerate launch -m ctxbench ...`` or ``torchrun -m ctxbench ...``.

Each rank runs the cell groups whose index is its rank modulo the world size (deterministic:
groups come from the whole grid) and writes its cells straight into the one results file, which
is locked around each cell's write (``ctxbench.results.store``), so no part files or merge step exist.
All ranks of one launch share rank 0's ``run_id``. A killed multi-process run resumes per cell.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.size > 1


def world() -> World:
    """Rank and world size from the launcher's environment (torchrun and accelerate set them)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return World(rank=int(os.environ.get("RANK", "0")), size=size, local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def init(w: World) -> None:
    """Join the process group (gloo on CPU, nccl on GPUs) for the run id and the final barrier."""
    if not w.active:
        return
    import torch  # start-up: torch only where it runs
    import torch.distributed as dist  # start-up: torch only where it runs

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


def shared(w: World, value: T) -> T:
    """Rank 0's ``value`` on every rank (e.g. the run id)."""
    if not w.active:
        return value
    import torch.distributed as dist  # start-up: torch only where it runs

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(w: World) -> None:
    if w.active:
        import torch.distributed as dist  # start-up: torch only where it runs

        if dist.is_initialized():
            dist.barrier()


def finish(w: World) -> None:
    if w.active:
        import torch.distributed as dist  # start-up: torch only where it runs

        if dist.is_initialized():
            dist.destroy_process_group()


def rank_device(device: str, w: World) -> str:
    """``auto`` on a multi-GPU node: one GPU per local rank."""
    if w.active and device == "auto":
        import torch  # start-up: torch only where it runs

        if torch.cuda.is_available():
            return f"cuda:{w.local_rank % torch.cuda.device_count()}"
    return device
