"""Train a JAX MLP on scikit-learn's digits from loaderx stores: batches laid
out over the local devices by a sharding and prefetched, and a checkpoint
that resumes exactly (parameters and the loader's JSON state together).

    python examples/jax_digits.py --steps 300
    python examples/jax_digits.py --steps 300 --stop-after 150
    python examples/jax_digits.py --steps 300   # resumes at 150

(XLA_FLAGS=--xla_force_host_platform_device_count=2 gives two CPU devices.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from digits_data import add_workdir, digits_stores, open_workdir
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from loaderx import DataLoader, DenseDataset
from loaderx.jax import DeviceLoader


def init(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, 64)) * 0.1, "b1": jnp.zeros(64),
            "w2": jax.random.normal(k2, (64, 10)) * 0.1, "b2": jnp.zeros(10)}


def logits(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def train_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits(p, x)), y[:, None], axis=1))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.2 * g, params, grads), loss


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workdir(p, "digits")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--stop-after", type=int, default=None, help="save a checkpoint after this step and exit")
    p.add_argument("--limit", type=int, default=None, help="use only the first LIMIT records")
    a = p.parse_args()
    open_workdir(a.workdir)
    train_x, train_y, test_x, test_y = digits_stores(a.workdir, a.limit)

    # -- the glue: a loader, its batches on the devices, its state in the checkpoint
    mesh = Mesh(np.array(jax.local_devices()), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())  # the parameters: a copy on every device
    loader = DataLoader({"x": DenseDataset(train_x), "y": DenseDataset(train_y)},
                        batch_size=32, seed=0, num_workers=1)
    batches = DeviceLoader(loader, sharding, prefetch=2)
    # fixed layouts in and out, so a resumed run compiles the same program
    step_fn = jax.jit(train_step, in_shardings=(replicated, sharding, sharding), out_shardings=replicated)
    params = jax.device_put(init(jax.random.PRNGKey(0)), replicated)
    ckpt = os.path.join(a.workdir, "jax_ckpt.npz")
    if os.path.exists(ckpt):
        saved = np.load(ckpt)
        params = jax.device_put({k: saved[k] for k in params}, replicated)
        batches.load_state_dict(str(saved["loader"]))
        print(f"resumed at step {batches.state_dict()['step']}")
    with batches:
        for step in range(batches.state_dict()["step"], a.steps):
            batch = next(batches)
            params, loss = step_fn(params, batch["x"], batch["y"])
            if a.stop_after is not None and step + 1 == a.stop_after:
                np.savez(ckpt, loader=json.dumps(batches.state_dict()), **{k: np.asarray(v) for k, v in params.items()})
                print(f"checkpoint at step {step + 1}, loss {float(loss):.4f}")
                return
    # -- evaluation: one sequential pass over the test records
    correct = total = 0
    with DataLoader({"x": DenseDataset(test_x), "y": DenseDataset(test_y)},
                    batch_size=100, sampler="sequential", epoch=True) as test:
        for batch in test:
            correct += int((np.asarray(logits(params, batch["x"])).argmax(1) == batch["y"]).sum())
            total += len(batch["y"])
    digest = hashlib.sha256(b"".join(np.asarray(params[k]).tobytes() for k in sorted(params))).hexdigest()
    print(f"steps {a.steps} loss {float(loss):.4f} test accuracy {correct / total:.3f} weights {digest[:16]}")


if __name__ == "__main__":
    main()
