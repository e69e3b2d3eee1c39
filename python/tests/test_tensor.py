"""rnn.Tensor: construction, numpy conversion for every dtype, properties, printing."""

import sys

import numpy as np
import pytest

import rnn

RNG = np.random.default_rng(0)

# numpy dtype -> tensor dtype, for the dtypes that map one to one.
NUMPY_DTYPES = {
    np.float32: "f32",
    np.float64: "f64",
    np.float16: "f16",
    np.uint8: "u8",
    np.uint32: "u32",
    np.int64: "i64",
}


def random_array(shape, np_dtype):
    if np.issubdtype(np_dtype, np.floating):
        return RNG.standard_normal(shape).astype(np_dtype)
    return RNG.integers(0, 200, size=shape).astype(np_dtype)


@pytest.mark.parametrize("np_dtype", list(NUMPY_DTYPES), ids=lambda d: d.__name__)
def test_numpy_round_trip_keeps_values_shape_and_dtype(np_dtype):
    a = random_array((2, 3, 4), np_dtype)
    t = rnn.Tensor(a)
    assert t.shape == (2, 3, 4)
    assert t.ndim == 3 and t.numel() == 24
    assert t.dtype == NUMPY_DTYPES[np_dtype]
    back = t.numpy()
    assert back.dtype == np_dtype
    np.testing.assert_array_equal(back, a)


def test_non_contiguous_arrays_are_read_in_logical_order():
    a = random_array((4, 6), np.float32)
    for view in (a.T, a[::2, 1::3], a[:, ::-1]):
        np.testing.assert_array_equal(rnn.Tensor(view).numpy(), view)


def test_arrays_do_not_share_memory_with_the_tensor():
    a = np.ones(3, dtype=np.float32)
    t = rnn.Tensor(a)
    a[0] = 5.0
    out = t.numpy()
    out[1] = 7.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 1.0, 1.0])


def test_bool_and_narrow_integer_arrays_are_converted():
    assert rnn.Tensor(np.array([True, False])).dtype == "u8"
    t = rnn.Tensor(np.array([-3, 4], dtype=np.int32))
    assert t.dtype == "i64"
    np.testing.assert_array_equal(t.numpy(), [-3, 4])


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), np.array([1], dtype=np.uint64), ["a", "b"]])
def test_values_without_a_tensor_dtype_are_a_type_error(bad):
    with pytest.raises(TypeError):
        rnn.Tensor(bad)


def test_python_numbers_become_f32_and_i64_as_in_pytorch():
    assert rnn.Tensor([1.5, 2.0]).dtype == "f32"
    assert rnn.Tensor([[1, 2], [3, 4]]).dtype == "i64"
    assert rnn.Tensor(3.0).item() == 3.0
    assert rnn.Tensor(3.0).shape == ()
    assert isinstance(rnn.Tensor(7).item(), int)


def test_dtype_argument_converts_and_accepts_numpy_names():
    a = np.array([1.25, -2.5], dtype=np.float64)
    for name in ("f16", "float16", np.float16, np.dtype("float16")):
        t = rnn.Tensor(a, dtype=name)
        assert t.dtype == "f16"
    with pytest.raises(ValueError, match="unknown dtype"):
        rnn.Tensor(a, dtype="complex64")


def test_bf16_converts_to_ml_dtypes_bfloat16_when_installed():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -0.25, 3.0e38], dtype=ml_dtypes.bfloat16)
    t = rnn.Tensor(a)
    assert t.dtype == "bf16"
    back = t.numpy()
    assert back.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back.astype(np.float32), a.astype(np.float32))


def test_bf16_converts_to_float32_without_ml_dtypes(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # `import ml_dtypes` now fails
    t = rnn.Tensor([1.0, 0.1], dtype="bf16")
    back = t.numpy()
    assert back.dtype == np.float32
    # 0.1 rounded to bf16's 8 significant bits, exactly representable in f32.
    np.testing.assert_array_equal(back, np.array([1.0, 0.10009765625], dtype=np.float32))


def test_numpy_protocol_tolist_and_scalars():
    t = rnn.Tensor([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(np.asarray(t), [[1.0, 2.0], [3.0, 4.0]])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert float(t[1, 1]) == 4.0 and int(t[0, 1]) == 2
    assert len(t) == 2
    assert [row.tolist() for row in t] == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(ValueError, match="not 1"):
        t.item()


def test_repr_shows_values_dtype_and_device():
    r = repr(rnn.Tensor([[1.0, -2.5], [3.0, 4.0]]))
    assert r.startswith("tensor([[ 1.0000, -2.5000],\n")
    assert r.endswith("dtype=f32, device=cpu)")
    assert "requires_grad=True" in repr(rnn.Tensor([1.0], requires_grad=True))
    assert repr(rnn.Tensor([float("nan"), float("inf")])).startswith("tensor([nan, inf]")


def test_creation_functions():
    assert rnn.zeros(2, 3).shape == (2, 3)
    assert rnn.ones((4,), dtype="f64").dtype == "f64"
    np.testing.assert_array_equal(rnn.full((2,), 7.5).numpy(), [7.5, 7.5])
    np.testing.assert_array_equal(rnn.arange(5).numpy(), np.arange(5))
    np.testing.assert_allclose(rnn.arange(0, 1, 0.25).numpy(), [0.0, 0.25, 0.5, 0.75])
    assert rnn.arange(3).dtype == "i64" and rnn.arange(0.5, 2).dtype == "f32"
    rnn.manual_seed(3)
    a = rnn.randn(100, 10).numpy()
    rnn.manual_seed(3)
    np.testing.assert_array_equal(rnn.randn(100, 10).numpy(), a)
    assert abs(a.mean()) < 0.1 and 0.9 < a.std() < 1.1
    u = rnn.rand(1000, low=2.0, high=3.0).numpy()
    assert u.min() >= 2.0 and u.max() < 3.0
    assert rnn.zeros(2, requires_grad=True).requires_grad


def test_cat_and_stack():
    a, b = random_array((2, 3), np.float32), random_array((1, 3), np.float32)
    np.testing.assert_array_equal(rnn.cat([rnn.Tensor(a), rnn.Tensor(b)]).numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(rnn.stack([rnn.Tensor(a), rnn.Tensor(a)], dim=1).numpy(), np.stack([a, a], axis=1))
