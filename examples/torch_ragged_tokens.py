"""Classify variable-length token sequences with PyTorch, fed packed batches
by loaderx: no padding anywhere.

    python examples/torch_ragged_tokens.py --steps 300

The data is synthetic: each sequence (16 to 128 int32 tokens out of 512) is
drawn from one of four topics, each topic favouring its own slice of the
vocabulary, and the label is the topic. A ragged store keeps each sequence at
its own length; the loader hands every batch over packed, the tokens of all
its sequences back to back plus their offsets (``cu_seqlens``), which is the
form ``torch.nn.EmbeddingBag`` takes as it is. Evaluation is one
``epoch=True`` pass over held-out sequences.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
from digits_data import add_workdir, open_workdir

import loaderx
from loaderx import DataLoader, DenseDataset, RaggedDataset

VOCAB, TOPICS = 512, 4


def token_stores(workdir: str, n: int) -> tuple[str, str, str, str]:
    """Paths of the train and test stores (tokens, labels, tokens, labels),
    written on the first call: ``n`` sequences, the last fifth held out."""
    paths = tuple(os.path.join(workdir, k) for k in ("train_tok", "train_y", "test_tok", "test_y"))
    if not all(os.path.isdir(p) for p in paths):
        rng = np.random.default_rng(0)
        labels = rng.integers(0, TOPICS, n)
        seqs = []
        for topic in labels:
            length = int(rng.integers(16, 129))
            own = rng.integers(topic * VOCAB // TOPICS, (topic + 1) * VOCAB // TOPICS, length)
            noise = rng.integers(0, VOCAB, length)  # a third of the tokens from anywhere
            seqs.append(np.where(rng.random(length) < 1 / 3, noise, own).astype(np.int32))
        cut = n * 4 // 5
        loaderx.from_iterator(paths[0], seqs[:cut], overwrite=True)
        loaderx.from_numpy(paths[1], labels[:cut], overwrite=True)
        loaderx.from_iterator(paths[2], seqs[cut:], overwrite=True)
        loaderx.from_numpy(paths[3], labels[cut:], overwrite=True)
    return paths  # type: ignore[return-value]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workdir(p, "tokens")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--records", type=int, default=4000)
    a = p.parse_args()
    open_workdir(a.workdir)
    train_tok, train_y, test_tok, test_y = token_stores(a.workdir, a.records)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    bag = torch.nn.EmbeddingBag(VOCAB, 32, mode="mean")
    head = torch.nn.Linear(32, TOPICS)
    opt = torch.optim.Adam([*bag.parameters(), *head.parameters()], lr=0.01)

    def logits(packed: loaderx.dataloader.PackedBatch) -> torch.Tensor:
        # EmbeddingBag takes the packed form directly: the tokens and where
        # each sequence starts (the offsets without their final entry)
        values = torch.from_numpy(packed.values).long()
        return head(bag(values, torch.from_numpy(packed.offsets[:-1])))

    # -- the glue: a ragged stream next to a dense one, packed batches
    train = DataLoader({"tok": RaggedDataset(train_tok), "y": DenseDataset(train_y)},
                       batch_size=64, seed=0, steps=a.steps, num_workers=1)
    with train:
        for batch in train:
            loss = torch.nn.functional.cross_entropy(logits(batch["tok"]), torch.from_numpy(batch["y"]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    test = DataLoader({"tok": RaggedDataset(test_tok), "y": DenseDataset(test_y)},
                      batch_size=256, sampler="sequential", epoch=True, num_workers=1)
    right = seen = 0
    with test, torch.no_grad():
        for batch in test:
            right += int((logits(batch["tok"]).argmax(1) == torch.from_numpy(batch["y"])).sum())
            seen += len(batch["y"])
    print(f"{a.steps} steps, loss {loss.item():.4f}, test accuracy {right / seen:.3f} on {seen} sequences")


if __name__ == "__main__":
    main()
