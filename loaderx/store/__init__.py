"""The store layer: everything that owns, writes or reads a record store.

The binding (``_native``, the only module that knows the C ABI), the one
owner of a native handle (``_store``), the element types (``_dtypes``),
releasing pages of a memory-mapped source (``_pages``), the codec choice of
``codec="auto"`` (``_autocodec``), writing stores (``converter``), writing a sharded dataset's
shards in worker processes (``_parallel``), reading
dense and ragged stores (``dataset``) and raw byte records (``zrecord``).
Users import the public modules from the top level (``loaderx.converter``,
``loaderx.dataset``, ``loaderx.zrecord``); this module imports nothing, so
importing a submodule costs only that submodule.
"""
