"""Fitting loaderx into frameworks: ``torch`` (an ``IterableDataset`` split
across torch's workers), ``jax`` (batches put onto devices with a sharding,
prefetched) and ``dlpack`` (ml_dtypes arrays such as bfloat16 handed over by
DLPack). Users import ``loaderx.torch``, ``loaderx.jax`` and
``loaderx.dlpack``; this module imports nothing, and no framework is imported
until its module is.
"""
