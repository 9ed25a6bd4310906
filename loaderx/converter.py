"""Write NumPy data into a loaderx store: :func:`from_numpy` (a dense store)
and :func:`from_iterator` (a ragged store), with :func:`train_dict` for a
zstd dictionary trained on sample records.

:func:`from_numpy` turns an array into a *dense* store, one record per slice
along axis 0. :func:`from_iterator` turns a stream of arrays whose first axis
varies into a *ragged* store. Both stream the input in bounded pieces, so an
array opened with ``np.load(..., mmap_mode='r')`` is never materialised, and
both record a ``schema.msgpack`` (kind, dtype, item shape) next to the data.

A conversion interrupted with Ctrl-C stops at the next piece boundary (or,
while a ``zstd_dict`` dictionary trains, within a few milliseconds) and
leaves a valid store holding every record written so far (or no store, if
the interrupt came before the store was created), closed and unlocked, then
re-raises :class:`KeyboardInterrupt`.

A conversion killed outright (SIGKILL, a crash, the machine stopping)
leaves at ``path`` either what was there before or a valid store holding a
prefix of the records, never a directory that is neither: the store is
built in a hidden directory beside ``path`` (in ``.NAME.zrecord-stage``)
and renamed onto ``path`` whole, with its schema, before the first record
is written. A kill before that rename leaves only the hidden directory,
which the next conversion to ``path`` removes (while no other process is
still writing it). With ``overwrite=True`` the previous store stays
readable at ``path`` until the new one takes its place in one step; on
systems without an atomic exchange of two directories (other than Linux)
the swap is two renames, and a kill between them leaves no store at
``path``.

The code lives in :mod:`loaderx.store.converter`; import the names from here.
"""

from __future__ import annotations

from loaderx.store.converter import DICT_TIERS, MAX_RECORD_BYTES, from_iterator, from_numpy, train_dict

__all__ = ["DICT_TIERS", "MAX_RECORD_BYTES", "from_iterator", "from_numpy", "train_dict"]
