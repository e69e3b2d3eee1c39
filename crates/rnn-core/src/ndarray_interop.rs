//! Conversion from and to `ndarray` arrays (the seed examples pass `Array2`).

use ndarray::{Array, ArrayD, Dimension, IxDyn};

use crate::{Device, Error, Result, Tensor, WithDType};

impl Tensor {
    /// A tensor with the array's shape and elements (any memory order).
    pub fn from_ndarray<T: WithDType, D: Dimension>(array: &Array<T, D>, device: Device) -> Result<Tensor> {
        let shape = array.shape().to_vec();
        let data: Vec<T> = array.iter().copied().collect();
        Tensor::from_vec(data, shape, device)
    }

    pub fn to_ndarray<T: WithDType>(&self) -> Result<ArrayD<T>> {
        let data = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(self.dims()), data).map_err(|e| Error::Msg(format!("to_ndarray: {e}")))
    }

    /// An array of fixed rank `D` (e.g. `Ix2`); an error when the rank differs.
    pub fn to_ndarray_dim<T: WithDType, D: Dimension>(&self) -> Result<Array<T, D>> {
        let dyn_array = self.to_ndarray::<T>()?;
        dyn_array.into_dimensionality::<D>().map_err(|_| Error::RankMismatch {
            op: "to_ndarray_dim",
            expected: D::NDIM.unwrap_or(0),
            got: self.rank(),
            shape: self.shape().clone(),
        })
    }
}
