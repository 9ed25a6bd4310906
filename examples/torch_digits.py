"""Train a PyTorch MLP on scikit-learn's digits from loaderx stores, with a
checkpoint that resumes exactly (model, optimiser and loader together).

    python examples/torch_digits.py --steps 300
    python examples/torch_digits.py --steps 300 --stop-after 150
    python examples/torch_digits.py --steps 300   # resumes at 150

A run that stops and resumes ends with the same weights, bit for bit, as one
that never stopped: the loader's batches depend only on its settings and the
step, and its state_dict is saved with the model's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch
from digits_data import add_workdir, digits_stores, open_workdir

from loaderx import DataLoader, DenseDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workdir(p, "digits")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--stop-after", type=int, default=None, help="save a checkpoint after this step and exit")
    p.add_argument("--limit", type=int, default=None, help="use only the first LIMIT records")
    a = p.parse_args()
    open_workdir(a.workdir)
    train_x, train_y, test_x, test_y = digits_stores(a.workdir, a.limit)
    torch.manual_seed(0)
    torch.set_num_threads(1)

    # -- the glue: a loader, its batches as tensors, its state in the checkpoint
    loader = DataLoader({"x": DenseDataset(train_x), "y": DenseDataset(train_y)},
                        batch_size=32, seed=0, num_workers=1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ckpt = os.path.join(a.workdir, "torch_ckpt.pt")
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        loader.load_state_dict(json.loads(state["loader"]))
        print(f"resumed at step {loader.step}")
    with loader:
        while loader.step < a.steps:
            batch = next(loader)
            x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if a.stop_after is not None and loader.step == a.stop_after:
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                            "loader": json.dumps(loader.state_dict())}, ckpt)
                print(f"checkpoint at step {loader.step}, loss {loss.item():.4f}")
                return
    # -- evaluation: one sequential pass over the test records
    correct = total = 0
    with torch.no_grad(), DataLoader({"x": DenseDataset(test_x), "y": DenseDataset(test_y)},
                                     batch_size=100, sampler="sequential", epoch=True) as test:
        for batch in test:
            pred = model(torch.from_numpy(batch["x"])).argmax(1)
            correct += int((pred == torch.from_numpy(batch["y"])).sum())
            total += len(batch["y"])
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.parameters())).hexdigest()
    print(f"steps {a.steps} loss {loss.item():.4f} test accuracy {correct / total:.3f} weights {digest[:16]}")


if __name__ == "__main__":
    main()
