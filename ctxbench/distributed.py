"""Many processes, one grid: ``accelerate launch -m ctxbench ...`` or ``torchrun -m ctxbench ...``.

Each rank runs the cell groups whose index is its rank modulo the world size (deterministic:
groups come from the whole grid), writes its own part file ``NAME.rankR.csv`` beside the output,
and after a barrier rank 0 merges the final CSV and every part file into the output (atomically)
and removes the parts. A killed multi-process run resumes per cell: each rank skips the cells in
the final file and in its own part file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .results import read_records, row_key, write_records


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
    """Join the process group (gloo on CPU, nccl on GPUs) for the barrier before merging."""
    import torch.distributed as dist

    if w.active and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)


def barrier(w: World) -> None:
    import torch.distributed as dist

    if w.active and dist.is_initialized():
        dist.barrier()


def finish(w: World) -> None:
    import torch.distributed as dist

    if w.active and dist.is_initialized():
        dist.destroy_process_group()


def rank_device(device: str, w: World) -> str:
    """``auto`` on a multi-GPU node: one GPU per local rank."""
    if w.active and device == "auto" and torch.cuda.is_available():
        return f"cuda:{w.local_rank % torch.cuda.device_count()}"
    return device


def part_path(out: str | os.PathLike, rank: int) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix or '.csv'}")


def parts(out: str | os.PathLike) -> list[Path]:
    out = Path(out)
    return sorted(out.parent.glob(f"{out.stem}.rank*{out.suffix or '.csv'}"))


def seed_part(out: str | os.PathLike, rank: int) -> Path:
    """The rank's part file, started from the final output's rows so finished cells are skipped."""
    part = part_path(out, rank)
    if not part.exists() and Path(out).exists():
        write_records(part, read_records(out))
    return part


def merge(out: str | os.PathLike, keep_existing: bool = True) -> int:
    """Rank 0: the output (unless starting afresh) plus every part file -> the output, one row per
    row key; the parts are removed."""
    out = Path(out)
    merged: dict[tuple, dict] = {}
    sources = ([out] if out.exists() and keep_existing else []) + parts(out)
    for path in sources:
        for record in read_records(path):
            merged[row_key(record)] = record
    records = sorted(merged.values(), key=lambda r: (r["task"], r["method"], _num(r["factor"]), _num(r["length"]),
                                                     _num(r["depth"]), _num(r["trial"]), r["doc"], r["metric"]))  # fmt: skip
    write_records(out, records)
    for path in parts(out):
        path.unlink()
    return len(records)


def _num(text: str) -> tuple:
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)
