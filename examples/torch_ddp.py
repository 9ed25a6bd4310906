"""Two-rank data-parallel training with torchrun (gloo, CPU): each rank reads
its own part of every global batch from the same loaderx stores.

    torchrun --nproc_per_node=2 examples/torch_ddp.py --steps 100

Rank 0 converts the stores (once), the others wait at a barrier. Each rank's
loader has ``shard=(rank, world)``: at every step the ranks draw disjoint
records of one global batch, which the script checks, and DDP keeps their
models equal, which it checks at the end.
"""

from __future__ import annotations

import argparse
import gc
import hashlib

import numpy as np
import torch
import torch.distributed as dist
from digits_data import add_workdir, digits_stores, open_workdir
from torch.nn.parallel import DistributedDataParallel

from loaderx import DataLoader, DenseDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workdir(p, "digits")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--limit", type=int, default=None, help="use only the first LIMIT records")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        open_workdir(a.workdir)
        digits_stores(a.workdir, a.limit)
    dist.barrier()
    train_x, train_y, _, _ = digits_stores(a.workdir, a.limit)
    torch.manual_seed(0)  # the same initial weights on every rank
    torch.set_num_threads(1)

    # -- the glue: shard=(rank, world) splits each global batch between the ranks
    loader = DataLoader({"x": DenseDataset(train_x), "y": DenseDataset(train_y), "i": _record_ids(train_y)},
                        batch_size=16, seed=0, shard=(rank, world), steps=a.steps, num_workers=1)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with loader:
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(batch["x"])), torch.from_numpy(batch["y"]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            ids: list[list[int]] = [[] for _ in range(world)]
            dist.all_gather_object(ids, batch["i"].tolist())
            assert len({i for part in ids for i in part}) == 16 * world, f"ranks overlap at step {loader.step - 1}"
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.parameters())).hexdigest()
    digests: list[str] = [""] * world
    dist.all_gather_object(digests, digest)
    assert len(set(digests)) == 1, digests
    if rank == 0:
        print(f"{world} ranks, {a.steps} steps, disjoint batches, equal weights {digest[:16]}, loss {loss.item():.4f}")
    dist.barrier()  # no rank tears the group down while another still uses it
    # DDP holds the process group: drop it first, so the group's gloo threads
    # are joined here and not during interpreter shutdown, where an unjoined
    # C++ thread aborts the process.
    del model, opt
    gc.collect()
    dist.destroy_process_group()


def _record_ids(labels_path: str) -> np.ndarray:
    """0..n-1 as a NumPy stream next to the stores, to show which records each rank drew."""
    return np.arange(len(DenseDataset(labels_path)), dtype=np.int64)


if __name__ == "__main__":
    main()
