"""One rank of tests/test_torchrun_nodes.py, started by torchrun on each of
two nodes: it reads a sharded dataset through ``DataLoader(...,
shard=(rank, world))``, checks over gloo that the ranks' batches of every
step are disjoint, saves the loader's state at ``--save-at`` and writes the
record ids it drew per step to ``--out``.

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank R --master-addr A \\
        --master-port P tests/torchrun_rank.py --data D --out O --steps 12
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

import numpy as np
import torch.distributed as dist

from loaderx import DataLoader, DenseDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="the sharded dataset")
    p.add_argument("--out", required=True, help="directory for the ids drawn and the saved states")
    p.add_argument("--phase", default="run", help="names the ids file of this launch")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch", type=int, default=8, help="records per rank and step")
    p.add_argument("--save-at", type=int, default=None, help="save the state once this many steps are drawn")
    p.add_argument("--resume", action="store_true", help="start from the saved state")
    a = p.parse_args()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    state_file = os.path.join(a.out, f"state-rank{rank}.json")
    loader = DataLoader({"x": DenseDataset(a.data)}, batch_size=a.batch, seed=0, shard=(rank, world),
                        steps=a.steps, num_workers=1)
    if a.resume:
        with open(state_file) as f:
            loader.load_state_dict(json.load(f))
    drawn: dict[int, list[int]] = {}
    with loader:
        for batch in loader:
            step = loader.step - 1
            x = batch["x"]
            ids = x[:, 0]
            # row i of the dataset is i, i+1, ...: the values came from the right records
            assert (x == ids[:, None] + np.arange(x.shape[1])).all(), f"rank {rank} step {step}: wrong rows"
            parts: list[list[int]] = [[] for _ in range(world)]
            dist.all_gather_object(parts, ids.tolist())
            every = [i for part in parts for i in part]
            assert len(set(every)) == len(every), f"step {step}: the ranks' batches overlap: {parts}"
            drawn[step] = ids.tolist()
            if a.save_at is not None and loader.step == a.save_at:
                with open(state_file, "w") as f:
                    json.dump(loader.state_dict(), f)
    with open(os.path.join(a.out, f"{a.phase}-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "drawn": drawn}, f)
    dist.barrier()  # no rank tears the group down while another still uses it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
