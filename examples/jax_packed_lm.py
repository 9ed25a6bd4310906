"""Train a small JAX causal language model on a token-weighted mixture of
three ragged token stores, packed into rows with segment ids, on the local
devices; a checkpoint (parameters and the loader's JSON state) resumes it
exactly.

    python examples/jax_packed_lm.py --steps 60
    python examples/jax_packed_lm.py --steps 60 --stop-after 30
    python examples/jax_packed_lm.py --steps 60   # resumes at 30

Each source's documents follow a rule of its own (the next token is the last
plus 1, 2 or 3, modulo the vocabulary), so the loss falls as the model learns
the rules. The batch's ``segment_ids`` keep attention inside each document
and ``positions`` restart at each document; both live on the devices with the
tokens, while ``cu_seqlens`` stays on the host (``DeviceLoader`` docs).
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
from digits_data import add_workdir, open_workdir
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import loaderx
from loaderx import DataLoader, Mixture, Pack, RaggedDataset
from loaderx.jax import DeviceLoader

VOCAB, DIM, LENGTH, ROWS = 64, 32, 64, 8
#: source name -> (documents, the step of its rule, its share of the tokens)
SOURCES = {"web": (600, 1, 0.5), "code": (400, 2, 0.3), "books": (100, 3, 0.2)}


def stores(workdir: str) -> dict[str, str]:
    """One ragged store of int32 documents per source (made once)."""
    paths = {}
    for k, (name, (n, step, _)) in enumerate(SOURCES.items()):
        path = paths[name] = os.path.join(workdir, name)
        if not os.path.exists(path):
            rng = np.random.default_rng(k)
            docs = ((rng.integers(0, VOCAB) + step * np.arange(m)) % VOCAB for m in rng.integers(4, 200, n))
            loaderx.from_iterator(path, (d.astype(np.int32) for d in docs), progress=False)
    return paths


def init(key: jax.Array) -> dict[str, jax.Array]:
    ks = jax.random.split(key, 6)
    s = DIM**-0.5
    return {"emb": jax.random.normal(ks[0], (VOCAB, DIM)) * 0.1, "pos": jax.random.normal(ks[1], (LENGTH, DIM)) * 0.1,
            "q": jax.random.normal(ks[2], (DIM, DIM)) * s, "k": jax.random.normal(ks[3], (DIM, DIM)) * s,
            "v": jax.random.normal(ks[4], (DIM, DIM)) * s, "out": jax.random.normal(ks[5], (DIM, VOCAB)) * s}


def forward(p: dict[str, jax.Array], tokens: jax.Array, seg: jax.Array, pos: jax.Array) -> jax.Array:
    """Logits of the next token: one attention layer, causal within each segment."""
    x = p["emb"][tokens] + p["pos"][pos]
    q, k, v = x @ p["q"], x @ p["k"], x @ p["v"]
    att = jnp.einsum("bid,bjd->bij", q, k) * DIM**-0.5
    n = tokens.shape[1]
    causal = jnp.tril(jnp.ones((n, n), bool))
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
    att = jnp.where(causal[None] & same, att, -1e9)
    h = x + jax.nn.softmax(att, axis=-1) @ v
    return h @ p["out"]


def train_step(p: dict[str, jax.Array], tokens: jax.Array, seg: jax.Array,
               pos: jax.Array) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        logits = forward(p, tokens, seg, pos)[:, :-1]
        target = tokens[:, 1:]
        keep = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)  # predict only within a document
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), target[..., None], axis=-1)[..., 0]
        return jnp.sum(nll * keep) / jnp.maximum(jnp.sum(keep), 1)

    loss, grads = jax.value_and_grad(loss_fn)(p)
    return jax.tree_util.tree_map(lambda a, g: a - 0.5 * g, p, grads), loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workdir(ap, "packed-lm")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--stop-after", type=int, default=None, help="save a checkpoint after this step and exit")
    a = ap.parse_args()
    open_workdir(a.workdir)
    paths = stores(a.workdir)

    # -- the glue: a token-weighted mixture packed into rows, on the devices
    mix = Mixture({name: {"tokens": RaggedDataset(path)} for name, path in paths.items()},
                  {name: share for name, (_, _, share) in SOURCES.items()}, by="tokens")
    loader = DataLoader(mix, batch_size=ROWS, seed=0, num_workers=1, pack={"tokens": Pack(LENGTH)})
    mesh = Mesh(np.array(jax.local_devices()), ("data",))
    sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    batches = DeviceLoader(loader, sharding, prefetch=2)
    step_fn = jax.jit(train_step, in_shardings=(replicated, sharding, sharding, sharding), out_shardings=replicated)
    params = jax.device_put(init(jax.random.PRNGKey(0)), replicated)
    ckpt = os.path.join(a.workdir, "jax_lm_ckpt.npz")
    if os.path.exists(ckpt):
        saved = np.load(ckpt)
        params = jax.device_put({k: saved[k] for k in params}, replicated)
        batches.load_state_dict(str(saved["loader"]))
        print(f"resumed at step {batches.state_dict()['step']}")
    losses = []
    with batches:
        for step in range(batches.state_dict()["step"], a.steps):
            rows = next(batches)["tokens"]  # a PackedRows: values, segment_ids, positions on the devices
            params, loss = step_fn(params, rows.values, rows.segment_ids, rows.positions)
            losses.append(float(loss))
            print(f"step {step} loss {losses[-1]:.6f}")
            if a.stop_after is not None and step + 1 == a.stop_after:
                np.savez(ckpt, loader=json.dumps(batches.state_dict()), **{k: np.asarray(v) for k, v in params.items()})
                print(f"checkpoint at step {step + 1}")
                return
    digest = hashlib.sha256(b"".join(np.asarray(params[k]).tobytes() for k in sorted(params))).hexdigest()
    print(f"steps {a.steps} first loss {losses[0]:.4f} last loss {losses[-1]:.4f} weights {digest[:16]}")


if __name__ == "__main__":
    main()
