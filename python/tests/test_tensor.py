"""rnn.Tensor: construction, conversion to and from numpy, properties."""

import numpy as np
import pytest

import rnn


def test_numpy_round_trip_keeps_values_shape_and_dtype():
    a = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    t = rnn.Tensor(a)
    assert t.shape == (2, 3)
    assert t.dtype == rnn.float32
    assert str(t.device) == "cpu"
    np.testing.assert_array_equal(t.numpy(), a)


def test_python_numbers_become_f32_and_i64_as_in_pytorch():
    assert rnn.Tensor([1.5, 2.0]).dtype == "f32"
    assert rnn.Tensor([[1, 2], [3, 4]]).dtype == "i64"
    assert rnn.Tensor(3.0).item() == 3.0


def test_not_numbers_is_a_type_error():
    with pytest.raises(TypeError):
        rnn.Tensor(["a", "b"])
