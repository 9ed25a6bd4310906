"""Batches of a loaderx loader put onto JAX devices, prefetched:
:class:`DeviceLoader`. Importing this module imports jax.

Import it only where JAX is installed (``import loaderx`` never imports
jax)::

    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from loaderx.jax import DeviceLoader

    mesh = Mesh(np.array(jax.local_devices()), ("data",))
    batches = DeviceLoader(loader, NamedSharding(mesh, P("data")), prefetch=2)
    for batch in batches:                 # dicts of jax.Array, split over the devices
        state = train_step(state, batch)
    checkpoint = {"params": ..., "loader": batches.state_dict()}   # JSON-ready

One process feeds its local devices: the loader's batch (this process's part
of the global batch, ``shard=(jax.process_index(), jax.process_count())``
when there are several processes) is laid out by ``sharding``, each device
getting its slice. Device transfers are asynchronous, so keeping
``prefetch`` batches on their way overlaps the copy with the training step.

The code lives in :mod:`loaderx.integrations.jax`; import the names from here.
"""

from __future__ import annotations

from loaderx.integrations.jax import DeviceLoader

__all__ = ["DeviceLoader"]
