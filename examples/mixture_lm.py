"""A small causal language model trained on a weighted mixture of two
tokenized sources, on two ranks under torchrun, checkpointed at a step and
resumed on one rank with the same global batch: the loss curve goes on as if
nothing had happened.

    torchrun --nproc_per_node=2 examples/mixture_lm.py --workdir /tmp/mix --steps 40 --stop-after 20
    python examples/mixture_lm.py --workdir /tmp/mix --steps 40 --resume

The two sources are token rows of two different Markov chains ("prose" and
"code"), stored as ragged stores; the loader mixes them 70/30 with exact
per-step counts and packs the records back to back into rows of a fixed
length (``pack=``, concat mode): no padding, a record may go on in the next
row. The model attends only within a record (causal and the same segment
id) and embeds each token's position within its record. Each rank takes its
rows of the global packed step (``shard=(rank, world)``, ``batch_size =
global / world``), so the one-rank resume packs exactly the rows the two
ranks would have. The gradient is always summed over the same two halves of the
global batch (one per rank, or both on one rank), so the resumed losses are
bit-identical to the uninterrupted run's, not just close.
"""

from __future__ import annotations

import argparse
import gc
import os

import numpy as np
import torch
import torch.distributed as dist

from loaderx import DataLoader, Mixture, RaggedDataset, from_iterator

VOCAB, LENGTH, GLOBAL_BATCH, HALVES, HEADS = 48, 24, 16, 2, 2
SOURCES = {"prose": (0.7, 600, 1), "code": (0.3, 200, 2)}  # weight, records, chain seed


def write_source(path: str, records: int, chain_seed: int) -> None:
    """Token rows of one Markov chain over 1..VOCAB-1 (0 pads)."""
    rng = np.random.default_rng(chain_seed)
    nxt = rng.integers(1, VOCAB, size=(VOCAB, 3))  # each token is followed by one of three
    rows = []
    for _ in range(records):
        row = [int(rng.integers(1, VOCAB))]
        for _ in range(int(rng.integers(8, LENGTH + 1)) - 1):
            row.append(int(nxt[row[-1], rng.integers(0, 3)]))
        rows.append(np.array(row, dtype=np.int32))
    from_iterator(path, iter(rows))


class TinyLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 32)
        self.pos = torch.nn.Parameter(torch.zeros(LENGTH, 32))
        self.block = torch.nn.TransformerEncoderLayer(32, HEADS, 64, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[positions]
        n = tokens.shape[1]
        # a token sees the earlier tokens of its own record only (True: masked out)
        later = torch.ones(n, n, dtype=torch.bool).triu(1)
        other = segments[:, :, None] != segments[:, None, :]
        mask = (later[None] | other).repeat_interleave(HEADS, dim=0)
        return self.head(self.block(h, src_mask=mask))


def pairs(segments: torch.Tensor) -> torch.Tensor:
    """Which next-token targets stay inside one record (a row may hold the
    end of one record and the start of the next)."""
    return (segments[:, 1:] == segments[:, :-1]) & (segments[:, 1:] > 0)


def loss_sum(model: torch.nn.Module, tokens: torch.Tensor, segments: torch.Tensor,
             positions: torch.Tensor) -> torch.Tensor:
    """Summed next-token loss over the targets inside a record."""
    logits = model(tokens[:, :-1], segments[:, :-1], positions[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1), reduction="none")
    return (loss * pairs(segments).reshape(-1)).sum()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--stop-after", type=int, default=None, help="checkpoint after this many steps and stop")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --workdir")
    a = p.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    assert HALVES % world == 0, f"world {world} must divide {HALVES}"
    ckpt = os.path.join(a.workdir, "mixture_lm.pt")
    if rank == 0:
        os.makedirs(a.workdir, exist_ok=True)
        for name, (_, records, chain) in SOURCES.items():
            if not os.path.exists(os.path.join(a.workdir, name)):
                write_source(os.path.join(a.workdir, name), records, chain)
    if distributed:
        dist.barrier()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    # -- the glue: a 70/30 mixture of the two stores packed into rows, this rank's rows of each step
    mix = Mixture({name: {"tokens": RaggedDataset(os.path.join(a.workdir, name))} for name in SOURCES},
                  {name: w for name, (w, _, _) in SOURCES.items()})
    loader = DataLoader(mix, batch_size=GLOBAL_BATCH // world, shard=(rank, world), seed=0, steps=a.steps,
                        pack={"tokens": LENGTH}, num_workers=1)
    if a.resume:
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        loader.load_state_dict(saved["loader"])  # saved on two ranks: the same global batch resumes on one
        print(f"resumed at step {loader.step} on {world} rank(s)")
    # -- end of the glue

    with loader:
        for batch in loader:
            step = loader.step - 1
            rows = batch["tokens"]  # a PackedRows: values, segment_ids, positions, ...
            tokens, segments, positions = (torch.from_numpy(x).long()
                                           for x in (rows.values, rows.segment_ids, rows.positions))
            halves = HALVES // world  # this rank's halves of the global batch
            parts = list(zip(tokens.chunk(halves), segments.chunk(halves), positions.chunk(halves)))
            count = torch.tensor(float(sum(int(pairs(g).sum()) for _, g, _ in parts)))
            if distributed:
                dist.all_reduce(count)
            opt.zero_grad()
            total = torch.zeros(())
            for t, g, q in parts:  # gradients add up half by half, as the ranks' all-reduce adds them
                s = loss_sum(model, t, g, q)
                (s / count).backward()
                total = total + s.detach()
            if distributed:
                for prm in model.parameters():
                    dist.all_reduce(prm.grad)
                dist.all_reduce(total)
            opt.step()
            if rank == 0:
                print(f"step {step} loss {(total / count).item()!r}")
            if a.stop_after is not None and step + 1 == a.stop_after:
                if rank == 0:
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                                "loader": loader.state_dict()}, ckpt)
                    print(f"checkpoint at step {step + 1}")
                break
    if distributed:
        dist.barrier()
        del model, opt
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
