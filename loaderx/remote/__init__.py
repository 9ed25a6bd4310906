"""Datasets in object storage: the S3 client (``_s3``), the local cache's
options, directory, eviction and page state (``_cache``), the guard that
keeps a handle's reads inside the pages its process holds (``_guard``), the
mirror of one dataset root and its fetches (``_tree``), and uploading
(``upload``: ``push``, ``verify`` and ``publish``, whose public face is
``loaderx.io.remote``). Every step of a
read from ``s3://`` lives here, one layer above the store layer it reads
through; this module imports nothing, so importing a submodule costs only
that submodule.
"""
