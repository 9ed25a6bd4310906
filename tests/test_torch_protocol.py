"""DenseDataset in torch's map-style protocol: __getitems__ for batched fetching."""

from __future__ import annotations

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

N = 53


@pytest.fixture
def data(tmp_path):
    arr = (np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)) / 7
    labels = np.arange(N, dtype=np.int64) * 3
    from_numpy(tmp_path / "x", arr)
    from_numpy(tmp_path / "y", labels)
    x, y = DenseDataset(tmp_path / "x"), DenseDataset(tmp_path / "y")
    yield arr, labels, x, y
    x.close()
    y.close()


def test_getitems_reads_a_batch_as_a_list_of_records(data):
    arr, _, x, _ = data
    got = x.__getitems__([5, 0, 52, -1, 5])
    assert isinstance(got, list) and len(got) == 5
    for record, i in zip(got, [5, 0, 52, -1, 5]):
        assert record.shape == (2, 3) and record.dtype == np.float32
        np.testing.assert_array_equal(record, arr[i])
    assert x.__getitems__([]) == []
    np.testing.assert_array_equal(np.stack(x.__getitems__(np.array([3, 4]))), arr[[3, 4]])
    with pytest.raises(IndexError, match="index 53 is out of range"):
        x.__getitems__([1, 53])
    with pytest.raises(TypeError, match="indices must be integers"):
        x.__getitems__([1.5])


@pytest.mark.parametrize("shuffle", [False, True])
def test_torch_dataloader_over_dense_datasets(data, shuffle):
    torch = pytest.importorskip("torch")
    arr, labels, x, y = data
    calls = []

    class Counting(DenseDataset):
        def __getitems__(self, indices):
            calls.append(list(indices))
            return super().__getitems__(indices)

    counted = Counting(x.path)
    g = torch.Generator().manual_seed(0)
    loader = torch.utils.data.DataLoader(counted, batch_size=8, shuffle=shuffle, num_workers=0, generator=g)
    order = []
    seen = []
    for batch in loader:
        assert isinstance(batch, torch.Tensor) and batch.dtype == torch.float32
        assert batch.shape[1:] == (2, 3) and batch.shape[0] <= 8
        seen.append(batch.numpy())
    for idx in calls:
        order.extend(idx)
    assert len(calls) == 7  # one batched fetch per batch: ceil(53 / 8)
    assert sorted(order) == list(range(N))
    np.testing.assert_array_equal(np.concatenate(seen), arr[order])
    counted.close()
    # labels: 0-d records collate into a 1-D int64 tensor
    labs = torch.cat(list(torch.utils.data.DataLoader(y, batch_size=10, num_workers=0)))
    assert labs.dtype == torch.int64
    np.testing.assert_array_equal(labs.numpy(), labels)
