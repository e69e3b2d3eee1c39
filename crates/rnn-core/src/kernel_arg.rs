//! The arguments of a user-written GPU kernel (`cuda::launch_user_kernel`,
//! `wgpu::launch_user_kernel`, and `KernelManager` in the facade): tensors and 32-bit scalars.

use crate::Tensor;

/// One argument of a user kernel. Each backend's `user_kernel` module says how it is passed.
#[derive(Clone, Copy, Debug)]
pub enum KernelArg<'a> {
    /// A tensor the kernel reads. A view that does not start at the beginning of its storage
    /// or is not contiguous is passed as a contiguous copy.
    Input(&'a Tensor),
    /// A tensor the kernel writes: a whole contiguous tensor created for the purpose (e.g.
    /// with `Tensor::zeros`), never a view or the result of an op recorded for gradients.
    /// Every tensor sharing its storage sees the writes.
    Output(&'a Tensor),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl<'a> KernelArg<'a> {
    /// An input from anything holding a tensor (a `GpuTensor`, say).
    pub fn input<T: AsRef<Tensor> + ?Sized>(t: &'a T) -> KernelArg<'a> {
        KernelArg::Input(t.as_ref())
    }

    /// An output from anything holding a tensor (a `GpuTensor`, say).
    pub fn output<T: AsRef<Tensor> + ?Sized>(t: &'a T) -> KernelArg<'a> {
        KernelArg::Output(t.as_ref())
    }
}
