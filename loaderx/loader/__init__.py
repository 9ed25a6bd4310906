"""The loader layer: the endless, step-based DataLoader and what it runs on.

The loader (``dataloader``) and its options, the worker threads and
recycled buffers (``_pipeline``), the worker processes and their
shared-memory slots (``_procpool``), a loader's saved state (``_state``),
the measurement behind ``workers="auto"`` (``_autoworkers``), a ragged
stream's gather and padding (``_ragged``) and index generation
(``sampler``). Users import the public modules from the top level
(``loaderx.dataloader``, ``loaderx.sampler``); this module imports nothing.
"""
