//! `GpuTensor`: an f32 tensor on a GPU, made from and read back into `ndarray` arrays.

use std::borrow::Borrow;

use ndarray::{ArrayBase, ArrayD, Data, Dimension};
use rnn_core::{DType, Device, Error, Result, Tensor};

use super::GpuContext;

/// How a [`GpuTensor`]'s elements are ordered in device memory. The tensor's shape and
/// values are the same in each; only the strides differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryLayout {
    /// C order: the last index varies fastest.
    RowMajor,
    /// Fortran order: the first index varies fastest (the tensor is a permuted view of a
    /// row-major buffer, as `Tensor::t` makes).
    ColumnMajor,
    /// The layout the GPU kernels are fastest on: row-major and contiguous, which every
    /// kernel plan reads without a gather (ops on a column-major tensor first copy it).
    #[default]
    GpuOptimized,
}

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
    /// Copies an f32 array (any dimension and memory order) to GPU `device_id` of
    /// `GpuManager::devices()`, which must be the context's GPU. The context may be passed by
    /// value (it is `Copy`) or by reference. (An f64 array converts with
    /// `array.mapv(|x| x as f32)`; a generic element type would leave `Array2::zeros(..)`'s
    /// type unknown.)
    pub fn from_cpu<S, D>(
        array: &ArrayBase<S, D>,
        device_id: usize,
        context: impl Borrow<GpuContext>,
    ) -> Result<GpuTensor>
    where
        S: Data<Elem = f32>,
        D: Dimension,
    {
        GpuTensor::from_cpu_with_layout(array, device_id, context, MemoryLayout::RowMajor)
    }

    /// [`GpuTensor::from_cpu`] storing the elements in `layout`'s order on the GPU.
    pub fn from_cpu_with_layout<S, D>(
        array: &ArrayBase<S, D>,
        device_id: usize,
        context: impl Borrow<GpuContext>,
        layout: MemoryLayout,
    ) -> Result<GpuTensor>
    where
        S: Data<Elem = f32>,
        D: Dimension,
    {
        let context = context.borrow();
        if device_id != context.id() {
            let msg = format!("device id {device_id} is not the context's GPU (id {})", context.id());
            return Err(Error::invalid("GpuTensor::from_cpu", msg));
        }
        let shape = array.shape().to_vec();
        let tensor = match layout {
            MemoryLayout::RowMajor | MemoryLayout::GpuOptimized => {
                Tensor::from_vec(array.iter().copied().collect(), shape, context.device())?
            }
            MemoryLayout::ColumnMajor => {
                // The reversed-axes view's logical order is the array's column-major order.
                let data: Vec<f32> = array.t().iter().copied().collect();
                let reversed: Vec<usize> = shape.iter().rev().copied().collect();
                let perm: Vec<usize> = (0..shape.len()).rev().collect();
                Tensor::from_vec(data, reversed, context.device())?.permute(perm.as_slice())?
            }
        };
        Ok(GpuTensor { tensor })
    }

    /// How the elements are ordered on the device: `RowMajor` for a contiguous tensor,
    /// `ColumnMajor` for a Fortran-ordered one, `None` for any other view.
    pub fn memory_layout(&self) -> Option<MemoryLayout> {
        if self.tensor.is_contiguous() {
            return Some(MemoryLayout::RowMajor);
        }
        let reversed: Vec<usize> = (0..self.tensor.rank()).rev().collect();
        let t = self.tensor.permute(reversed.as_slice()).ok()?;
        t.is_contiguous().then_some(MemoryLayout::ColumnMajor)
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
    /// another dtype), after checking that the tensor is on the context's GPU. Waits for the
    /// kernels that produce it.
    pub fn to_cpu(&self, context: impl Borrow<GpuContext>) -> Result<ArrayD<f32>> {
        let device = context.borrow().device();
        if self.device() != device {
            return Err(Error::DeviceMismatch { op: "GpuTensor::to_cpu", lhs: self.device(), rhs: device });
        }
        self.to_array()
    }

    /// The elements as an f32 array, from whatever device the tensor is on (the CPU
    /// included, for `GpuOptimizer`'s tensors).
    pub fn to_array(&self) -> Result<ArrayD<f32>> {
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
