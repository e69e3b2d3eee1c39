//! Tensors from Python values (numpy arrays, scalars, nested lists, tensors) and to numpy.
//!
//! Each direction makes one copy of the elements (numpy -> tensor: into the tensor's
//! storage; contiguous CPU tensor -> numpy: into the new array): the core owns its storage
//! (it may live on a GPU), so a tensor cannot borrow numpy's memory, and an array made from a
//! tensor owns its buffer, so a later in-place update of the tensor (an optimizer step)
//! never changes an array handed out earlier. A strided or GPU tensor is first gathered
//! into a contiguous host buffer by the core.
//!
//! dtypes: numpy's float32, float64, float16, uint8, uint32 and int64 map to the tensor
//! dtypes of the same name; bool becomes u8 and the other signed/small integer types i64.
//! numpy has no bfloat16: the `ml_dtypes` package adds one. Arrays of `ml_dtypes.bfloat16`
//! are read as bf16, and a bf16 tensor converts to such an array when `ml_dtypes` is
//! installed, otherwise to float32 (every bf16 value is exactly a float32).
//! Python floats (and lists of them) become f32 and Python ints i64, as in PyTorch.

use half::{bf16, f16};
use numpy::{Element, PyArray, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use rnn_core::{DType, Device, Tensor, WithDType};

use crate::errors::without_gil;
use crate::tensor::PyTensor;

/// A tensor (on the CPU) from a `Tensor`, a numpy array, a Python scalar or a nested list.
/// A `Tensor` is returned as is (sharing its storage).
pub fn tensor_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.borrow().inner.clone());
    }
    if let Ok(array) = obj.cast::<PyUntypedArray>() {
        return array_to_tensor(array);
    }
    let py = obj.py();
    let np = py.import("numpy")?;
    let array = np.call_method1("asarray", (obj,))?;
    let array = array.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "cannot make a tensor from {}",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    // Python floats are f64 to numpy; a tensor made from them is f32, as in PyTorch.
    if array.dtype().kind() == b'f' {
        return array_to_tensor(array.call_method1("astype", ("float32",))?.cast::<PyUntypedArray>()?);
    }
    if array.dtype().kind() == b'O' || array.dtype().kind() == b'U' {
        let name = obj.get_type().name()?.to_string();
        return Err(PyTypeError::new_err(format!("cannot make a tensor from this {name} (not numbers)")));
    }
    array_to_tensor(array)
}

/// One copy of a numpy array's elements into a CPU tensor of the matching dtype.
fn array_to_tensor(array: &Bound<'_, PyUntypedArray>) -> PyResult<Tensor> {
    let dtype = array.dtype();
    let (kind, size) = (dtype.kind(), dtype.itemsize());
    match (kind, size) {
        (b'f', 4) => typed_array_to_tensor::<f32, f32>(array, |x| x),
        (b'f', 8) => typed_array_to_tensor::<f64, f64>(array, |x| x),
        (b'f', 2) => typed_array_to_tensor::<f16, f16>(array, |x| x),
        (b'u', 1) => typed_array_to_tensor::<u8, u8>(array, |x| x),
        (b'u', 4) => typed_array_to_tensor::<u32, u32>(array, |x| x),
        (b'i', 8) => typed_array_to_tensor::<i64, i64>(array, |x| x),
        (b'b', 1) => {
            let as_u8 = array.call_method1("view", ("uint8",))?;
            typed_array_to_tensor::<u8, u8>(as_u8.cast()?, |x| x)
        }
        (b'i', _) | (b'u', 2) => {
            let widened = array.call_method1("astype", ("int64",))?;
            typed_array_to_tensor::<i64, i64>(widened.cast()?, |x| x)
        }
        _ if is_bfloat16(array)? => {
            let bits = array.call_method1("view", ("uint16",))?;
            typed_array_to_tensor::<u16, bf16>(bits.cast()?, bf16::from_bits)
        }
        _ => Err(PyTypeError::new_err(format!(
            "numpy dtype {} has no tensor dtype (use float32, float64, float16, bfloat16, uint8, uint32 or int64)",
            dtype.str()?
        ))),
    }
}

fn is_bfloat16(array: &Bound<'_, PyUntypedArray>) -> PyResult<bool> {
    let dtype = array.dtype();
    Ok(dtype.itemsize() == 2 && dtype.getattr("name")?.extract::<String>()? == "bfloat16")
}

/// Reads an array of `N` (numpy's element type) into a tensor of `T`, converting each element
/// with `convert` (the identity except for bf16, which numpy holds as raw bits).
fn typed_array_to_tensor<N, T>(array: &Bound<'_, PyUntypedArray>, convert: fn(N) -> T) -> PyResult<Tensor>
where
    N: Element + Copy + Send + Sync,
    T: WithDType,
{
    let array = array.cast::<PyArrayDyn<N>>()?;
    let readonly = array.try_readonly()?;
    let shape = readonly.shape().to_vec();
    // `as_slice` also accepts Fortran order: only a C-order slice is in row-major order.
    if let (true, Ok(slice)) = (readonly.is_c_contiguous(), readonly.as_slice()) {
        return without_gil(array.py(), move || {
            Tensor::from_vec(slice.iter().map(|&x| convert(x)).collect(), shape, Device::Cpu)
        });
    }
    let data: Vec<T> = readonly.as_array().iter().map(|&x| convert(x)).collect();
    without_gil(array.py(), move || Tensor::from_vec(data, shape, Device::Cpu))
}

/// The tensor's elements as a new numpy array of the same shape (copied to the host).
pub fn tensor_to_numpy(py: Python<'_>, tensor: &Tensor) -> PyResult<Py<PyAny>> {
    match tensor.dtype() {
        DType::F32 => vec_to_numpy::<f32>(py, tensor),
        DType::F64 => vec_to_numpy::<f64>(py, tensor),
        DType::F16 => vec_to_numpy::<f16>(py, tensor),
        DType::U8 => vec_to_numpy::<u8>(py, tensor),
        DType::U32 => vec_to_numpy::<u32>(py, tensor),
        DType::I64 => vec_to_numpy::<i64>(py, tensor),
        DType::BF16 => bf16_to_numpy(py, tensor),
    }
}

/// A new array filled straight from the tensor's elements: from a contiguous CPU tensor
/// that is the only copy; otherwise the core copies the elements to the host first.
fn vec_to_numpy<T: WithDType + Element>(py: Python<'_>, tensor: &Tensor) -> PyResult<Py<PyAny>> {
    let array = PyArray::<T, _>::zeros(py, tensor.dims(), false);
    {
        let mut writable = array.try_readwrite()?;
        let out = writable.as_slice_mut()?;
        let t = tensor.clone();
        without_gil(py, move || t.with_host_slice(|values: &[T]| out.copy_from_slice(values)))?;
    }
    Ok(array.into_any().unbind())
}

/// `ml_dtypes.bfloat16` when that package is installed, else float32 (see the module docs).
fn bf16_to_numpy(py: Python<'_>, tensor: &Tensor) -> PyResult<Py<PyAny>> {
    let Ok(ml_dtypes) = py.import("ml_dtypes") else {
        let t = tensor.clone();
        let widened = without_gil(py, move || t.to_dtype(DType::F32))?;
        return tensor_to_numpy(py, &widened);
    };
    let t = tensor.clone();
    let bits: Vec<u16> = without_gil(py, move || Ok(t.to_vec::<bf16>()?.into_iter().map(bf16::to_bits).collect()))?;
    let flat = PyArray::from_vec(py, bits).reshape(tensor.dims())?;
    Ok(flat.call_method1("view", (ml_dtypes.getattr("bfloat16")?,))?.unbind())
}

/// The `dtype` argument, `default` when it is absent or None.
pub fn dtype_or(dtype: Option<&Bound<'_, PyAny>>, default: DType) -> PyResult<DType> {
    dtype.filter(|d| !d.is_none()).map_or(Ok(default), dtype_from_py)
}

/// A dtype from its name: the core's (`"f32"`, `"bf16"`, ...) or numpy's (`"float32"`,
/// `"bfloat16"`, ...), or a numpy dtype object.
pub fn dtype_from_py(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    // Anything else numpy understands as a dtype (np.float16, np.dtype("f4"), ...) by
    // numpy's name for it.
    let name: String = match obj.extract::<String>() {
        Ok(s) => s,
        Err(_) => obj.py().import("numpy")?.call_method1("dtype", (obj,))?.getattr("name")?.extract()?,
    };
    let core = match name.as_str() {
        "float32" | "float" => "f32",
        "float64" | "double" => "f64",
        "float16" | "half" => "f16",
        "bfloat16" => "bf16",
        "uint8" | "bool" => "u8",
        "uint32" => "u32",
        "int64" | "long" | "int" => "i64",
        other => other,
    };
    core.parse::<DType>().map_err(|_| {
        PyValueError::new_err(format!("unknown dtype '{name}' (expected one of f32, f64, f16, bf16, u8, u32, i64)"))
    })
}

/// `tensor` as `dtype` (the same tensor when it already is).
pub fn cast(py: Python<'_>, tensor: Tensor, dtype: DType) -> PyResult<Tensor> {
    if tensor.dtype() == dtype {
        return Ok(tensor);
    }
    without_gil(py, move || tensor.to_dtype(dtype))
}

/// `tensor` on `device` (the same tensor when it already is there).
pub fn move_to(py: Python<'_>, tensor: Tensor, device: Device) -> PyResult<Tensor> {
    if tensor.device() == device {
        return Ok(tensor);
    }
    without_gil(py, move || tensor.to_device(device))
}
