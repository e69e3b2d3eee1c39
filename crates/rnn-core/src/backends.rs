//! The GPU backends' storage types. Each is a real backend when its feature is enabled and
//! implemented, otherwise an empty type whose every entry point returns
//! `Error::NotCompiledWith`, so `Storage` matches all three variants in every build.

#[allow(unused_macros)]
macro_rules! unavailable_backend {
    ($name:ident, $feature:literal, $device:ident) => {
        use crate::cpu::CpuStorage;
        use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
        use crate::storage::BackendStorage;
        use crate::window::Window2d;
        use crate::{DType, Device, Error, Layout, Result};

        /// No value of this type can exist: the backend is not part of this build.
        #[derive(Debug)]
        pub enum $name {}

        impl $name {
            /// Whether device `ordinal` can be used, with the reason when it cannot.
            pub fn check_device(_ordinal: usize) -> Result<()> {
                Err(Error::NotCompiledWith($feature))
            }
        }

        impl BackendStorage for $name {
            fn dtype(&self) -> DType {
                match *self {}
            }
            fn device(&self) -> Device {
                match *self {}
            }
            fn to_cpu(&self) -> Result<CpuStorage> {
                match *self {}
            }
            fn from_cpu(_: &CpuStorage, _: usize) -> Result<Self> {
                Err(Error::NotCompiledWith($feature))
            }
            fn full(_: f64, _: usize, _: DType, _: usize) -> Result<Self> {
                Err(Error::NotCompiledWith($feature))
            }
            fn unary(&self, _: &Layout, _: UnaryOp) -> Result<Self> {
                match *self {}
            }
            fn binary(&self, _: &Layout, _: &Self, _: &Layout, _: BinaryOp) -> Result<Self> {
                match *self {}
            }
            fn cmp(&self, _: &Layout, _: &Self, _: &Layout, _: CmpOp) -> Result<Self> {
                match *self {}
            }
            fn where_cond(&self, _: &Layout, _: &Self, _: &Layout, _: &Self, _: &Layout) -> Result<Self> {
                match *self {}
            }
            fn reduce(&self, _: &Layout, _: ReduceOp, _: &[usize]) -> Result<Self> {
                match *self {}
            }
            fn softmax_last_dim(&self, _: &Layout, _: bool) -> Result<Self> {
                match *self {}
            }
            fn matmul(&self, _: &Layout, _: &Self, _: &Layout) -> Result<Self> {
                match *self {}
            }
            fn to_dtype(&self, _: &Layout, _: DType) -> Result<Self> {
                match *self {}
            }
            fn copy_strided(&self, _: &Layout) -> Result<Self> {
                match *self {}
            }
            fn cat(parts: &[(&Self, &Layout)], _: usize) -> Result<Self> {
                match parts.first() {
                    Some((s, _)) => match **s {},
                    None => Err(Error::NotCompiledWith($feature)),
                }
            }
            fn index_select(&self, _: &Layout, _: &Self, _: &Layout, _: usize) -> Result<Self> {
                match *self {}
            }
            fn gather(&self, _: &Layout, _: &Self, _: &Layout, _: usize) -> Result<Self> {
                match *self {}
            }
            fn scatter_add(&self, _: &Layout, _: &Self, _: &Layout, _: &Self, _: &Layout, _: usize) -> Result<Self> {
                match *self {}
            }
            fn unfold2d(&self, _: &Layout, _: &Window2d, _: f64) -> Result<Self> {
                match *self {}
            }
            fn fold2d(&self, _: &Layout, _: (usize, usize), _: &Window2d) -> Result<Self> {
                match *self {}
            }
        }
    };
}

#[cfg(not(feature = "cuda"))]
mod cuda_stub {
    unavailable_backend!(CudaStorage, "cuda", Cuda);
}
#[cfg(feature = "cuda")]
pub use crate::cuda::CudaStorage;
#[cfg(not(feature = "cuda"))]
pub use cuda_stub::CudaStorage;
#[cfg(not(feature = "wgpu"))]
mod wgpu_stub {
    unavailable_backend!(WgpuStorage, "wgpu", Wgpu);
}
#[cfg(feature = "wgpu")]
pub use crate::wgpu::WgpuStorage;
#[cfg(not(feature = "wgpu"))]
pub use wgpu_stub::WgpuStorage;
