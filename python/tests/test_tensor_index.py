"""rnn.Tensor indexing and slicing against numpy."""

import numpy as np
import pytest

import rnn

A = np.arange(2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6)

KEYS = [
    0,
    -1,
    (1, 2),
    (1, 2, 3),
    slice(1, 4),
    (slice(None), slice(1, 4)),
    (slice(None), slice(None, None, 2)),
    (slice(None), slice(1, None, 3), slice(-4, -1)),
    (Ellipsis, 0),
    (0, Ellipsis),
    (Ellipsis, slice(2, 5, 2)),
    None,
    (slice(None), None, 1),
    (None, Ellipsis, None),
    (slice(None), [0, 2, 4]),
    (1, slice(10, 20)),
    (slice(None), slice(3, 1)),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_indexing_matches_numpy(key):
    out = rnn.Tensor(A)[key]
    expected = A[tuple(np.array(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else key]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


def test_tensor_positions_select_rows():
    ids = rnn.Tensor([3, 0])
    np.testing.assert_array_equal(rnn.Tensor(A)[0][ids].numpy(), A[0][[3, 0]])


def test_out_of_range_index_is_an_index_error():
    t = rnn.Tensor(A)
    with pytest.raises(IndexError, match="out of range"):
        t[2]
    with pytest.raises(IndexError):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError):
        t[:, 0][:, -7]


def test_bad_keys():
    t = rnn.Tensor(A)
    with pytest.raises(ValueError, match="step"):
        t[::-1]
    with pytest.raises(TypeError):
        t["a"]
    with pytest.raises(TypeError):
        t[rnn.Tensor([0.5])]
