"""Object storage: ``s3://bucket/prefix`` URLs, the S3 client, and ``push``.

The public face of uploading: :func:`push` uploads a store, a multi-stream
directory or a sharded dataset, :func:`verify` checks the objects against
the local files, :func:`publish` writes a dataset into a staging directory
and pushes it, :func:`client` is the S3 client and :func:`parse_url` splits
a URL. The code lives in ``loaderx.remote.upload`` (and the client in
``loaderx.remote._s3``), with the rest of the object-storage path; this
module keeps ``loaderx.io.remote`` the name users import.
"""

from __future__ import annotations

from loaderx.remote.upload import PART_SIZE, PushedFile, client, parse_url, publish, push, verify

__all__ = ["parse_url", "client", "push", "verify", "publish", "PushedFile", "PART_SIZE"]
