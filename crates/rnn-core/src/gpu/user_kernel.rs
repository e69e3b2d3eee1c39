//! Binding tensors to user-written kernels (`cuda::launch_user_kernel`,
//! `wgpu::launch_user_kernel`), the same way on both runtimes.

use super::GpuStorage;
use crate::storage::BackendStorage;
use crate::{Device, Error, Result, Tensor};

const USER_KERNEL: &str = "user kernel";

/// The storage a user kernel's tensor argument binds on `device`: the tensor's own for
/// outputs and for inputs that cover their storage from its start, else a contiguous copy.
pub(crate) fn bound_storage<S: GpuStorage>(t: &Tensor, output: bool, device: Device) -> Result<S> {
    let mismatch = |rhs| Error::DeviceMismatch { op: USER_KERNEL, lhs: device, rhs };
    if t.device() != device {
        return Err(mismatch(t.device()));
    }
    let n = t.elem_count();
    if n == 0 {
        return Err(Error::EmptyTensor { op: USER_KERNEL, shape: t.shape().clone() });
    }
    let storage = t.storage();
    let s = S::of(&storage).ok_or_else(|| mismatch(storage.device()))?;
    let whole = t.layout().contiguous_offsets() == Some((0, n));
    if output {
        if !whole || s.len() != n {
            let msg = "an output must be a whole contiguous tensor (e.g. from Tensor::zeros), not a view";
            return Err(Error::invalid(USER_KERNEL, msg));
        }
        if t.op().is_some() {
            let msg = "an output must not be the result of an op recorded for gradients (write a fresh tensor)";
            return Err(Error::invalid(USER_KERNEL, msg));
        }
        return Ok(s.clone());
    }
    if whole {
        return Ok(s.clone());
    }
    s.copy_strided(t.layout())
}
