//! What `Network::train`, `evaluate` and `predict` accept: rnn tensors, or ndarray arrays
//! and vectors of the usual element types (usize / i32 labels included).

use ndarray::{Array, Dimension};
use rnn_core::{Device, Result, Tensor};

/// Data convertible into a (CPU) tensor.
pub trait IntoTensor {
    fn to_tensor(&self) -> Result<Tensor>;
}

impl IntoTensor for Tensor {
    fn to_tensor(&self) -> Result<Tensor> {
        Ok(self.clone())
    }
}

macro_rules! native_elements {
    ($($t:ty),*) => {$(
        impl<D: Dimension> IntoTensor for Array<$t, D> {
            fn to_tensor(&self) -> Result<Tensor> {
                Tensor::from_ndarray(self, Device::Cpu)
            }
        }
        impl IntoTensor for Vec<$t> {
            fn to_tensor(&self) -> Result<Tensor> {
                Tensor::from_slice(self, self.len(), Device::Cpu)
            }
        }
    )*};
}
native_elements!(f32, f64, u8, u32, i64);

/// Element types that are converted on the way in (class ids as usize or i32).
macro_rules! converted_elements {
    ($($t:ty => $to:ty),*) => {$(
        impl<D: Dimension> IntoTensor for Array<$t, D> {
            fn to_tensor(&self) -> Result<Tensor> {
                let values: Vec<$to> = self.iter().map(|&v| v as $to).collect();
                Tensor::from_vec(values, self.shape(), Device::Cpu)
            }
        }
        impl IntoTensor for Vec<$t> {
            fn to_tensor(&self) -> Result<Tensor> {
                let values: Vec<$to> = self.iter().map(|&v| v as $to).collect();
                Tensor::from_vec(values, self.len(), Device::Cpu)
            }
        }
    )*};
}
converted_elements!(usize => i64, i32 => i64);
