//! `rnn.Tensor` under more of PyTorch's spellings: dtype casts (``float()``, ``long()``,
//! ...), ``size()`` / ``dim()``, and ``clip``.

use pyo3::prelude::*;

use crate::tensor::PyTensor;

/// One cast method per dtype: `t.float()` is `t.to(dtype="f32")` (``self`` when it already is).
macro_rules! casts {
    ($($name:ident => $dtype:literal;)*) => {
        #[pymethods]
        impl PyTensor {$(
            #[doc = concat!("This tensor as ", $dtype, " (``self`` when it already is); gradients flow through.")]
            fn $name(slf: &Bound<'_, Self>) -> PyResult<Py<PyTensor>> {
                let dtype = $dtype.into_pyobject(slf.py())?.into_any();
                PyTensor::to(slf, None, Some(&dtype))
            }
        )*}
    };
}

casts! {
    float => "f32";
    double => "f64";
    half => "f16";
    bfloat16 => "bf16";
    long => "i64";
}

#[pymethods]
impl PyTensor {
    /// The shape as a tuple, or the size of ``dim`` (negative counts from the end).
    #[pyo3(signature = (dim = None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        let dims = self.inner.dims();
        match dim {
            None => Ok(pyo3::types::PyTuple::new(py, dims)?.into_any()),
            Some(d) => {
                let rank = dims.len() as i64;
                let i = if d < 0 { d + rank } else { d };
                if !(0..rank).contains(&i) {
                    return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                        "size: dim {d} is out of range for a tensor of rank {rank}"
                    )));
                }
                Ok(dims[i as usize].into_pyobject(py)?.into_any())
            }
        }
    }

    /// The number of dims (``ndim``).
    fn dim(&self) -> usize {
        self.inner.rank()
    }

    /// Same as ``clamp``.
    #[pyo3(signature = (min = None, max = None))]
    fn clip(&self, py: Python<'_>, min: Option<f64>, max: Option<f64>) -> PyResult<PyTensor> {
        self.clamp(py, min, max)
    }
}
