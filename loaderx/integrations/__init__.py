"""Fitting loaderx into frameworks: ``torch`` (an ``IterableDataset`` split
across torch's workers), ``jax`` (batches put onto devices with a sharding,
prefetched), ``dlpack`` (ml_dtypes arrays such as bfloat16 handed over by
DLPack) and ``ray`` (Ray Data's datasink and datasource). Users import
``loaderx.torch``, ``loaderx.jax``, ``loaderx.dlpack`` and ``loaderx.ray``;
this module imports nothing, and no framework is imported until its module
is.
"""
