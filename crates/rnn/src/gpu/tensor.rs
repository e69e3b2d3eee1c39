//! `GpuTensor`: an f32 tensor on a GPU, made from and read back into `ndarray` arrays.

use ndarray::{ArrayBase, ArrayD, Data, Dimension};
use rnn_core::{DType, Device, Error, Result, Tensor};

use super::GpuContext;

/// Host element types a [`GpuTensor`] can be made from (stored on the GPU as f32, the type
/// every GPU backend computes in).
pub trait HostElement: Copy + 'static {
    fn to_f32(self) -> f32;
}

impl HostElement for f32 {
    fn to_f32(self) -> f32 {
        self
    }
}

impl HostElement for f64 {
    fn to_f32(self) -> f32 {
        self as f32
    }
}

/// A tensor on a GPU: a thin wrapper over [`Tensor`] that keeps the seed API's transfer
/// methods. Every tensor op works on [`GpuTensor::tensor`] and stays on the GPU; only
/// [`GpuTensor::to_cpu`] copies back (waiting for the queued kernels).
#[derive(Clone, Debug)]
pub struct GpuTensor {
    tensor: Tensor,
}

impl GpuTensor {
    /// Copies an array (any dimension and memory order, f32 or f64) to the context's GPU,
    /// as f32.
    pub fn from_cpu<S, D>(array: &ArrayBase<S, D>, context: &GpuContext) -> Result<GpuTensor>
    where
        S: Data,
        S::Elem: HostElement,
        D: Dimension,
    {
        let data: Vec<f32> = array.iter().map(|x| x.to_f32()).collect();
        let tensor = Tensor::from_vec(data, array.shape().to_vec(), context.device())?;
        Ok(GpuTensor { tensor })
    }

    /// An f32 tensor of zeros on the context's GPU (e.g. the output of a custom kernel).
    pub fn zeros(shape: &[usize], context: &GpuContext) -> Result<GpuTensor> {
        Ok(GpuTensor { tensor: Tensor::zeros(shape.to_vec(), DType::F32, context.device())? })
    }

    /// Wraps a tensor that is on a GPU (an error for a CPU tensor).
    pub fn from_tensor(tensor: Tensor) -> Result<GpuTensor> {
        if tensor.device().is_cpu() {
            let msg = "the tensor is on the CPU; move it with `to_device` first";
            return Err(Error::invalid("GpuTensor::from_tensor", msg));
        }
        Ok(GpuTensor { tensor })
    }

    /// Wraps a tensor on any device, the CPU included (for APIs that fall back to the CPU
    /// when there is no GPU, such as `GpuOptimizer`).
    pub(crate) fn on_device(tensor: Tensor) -> GpuTensor {
        GpuTensor { tensor }
    }

    /// The elements as an f32 array of the tensor's shape (converted if the tensor holds
    /// another dtype). Waits for the kernels that produce it.
    pub fn to_cpu(&self) -> Result<ArrayD<f32>> {
        if self.tensor.dtype() == DType::F32 {
            self.tensor.to_ndarray::<f32>()
        } else {
            self.tensor.to_dtype(DType::F32)?.to_ndarray::<f32>()
        }
    }

    pub fn shape(&self) -> &[usize] {
        self.tensor.dims()
    }

    pub fn dtype(&self) -> DType {
        self.tensor.dtype()
    }

    pub fn device(&self) -> Device {
        self.tensor.device()
    }

    pub fn elem_count(&self) -> usize {
        self.tensor.elem_count()
    }

    /// The tensor, for tensor ops and custom kernels.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }

    pub fn into_tensor(self) -> Tensor {
        self.tensor
    }
}

impl AsRef<Tensor> for GpuTensor {
    fn as_ref(&self) -> &Tensor {
        &self.tensor
    }
}

impl From<GpuTensor> for Tensor {
    fn from(t: GpuTensor) -> Tensor {
        t.tensor
    }
}
