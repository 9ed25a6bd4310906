"""``python -m loaderx``: the command line (see :mod:`loaderx.cli`)."""

from __future__ import annotations

from loaderx.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
