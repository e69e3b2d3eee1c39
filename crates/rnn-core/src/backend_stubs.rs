//! The GPU backends' storage types when their feature is off: an empty type whose every
//! entry point returns `Error::NotCompiledWith`, so `Storage` matches all three variants in
//! every build. A stub is a `GpuStorage` like the real runtimes, so it gets its
//! `BackendStorage` methods from the same blanket impl (`gpu/mod.rs`).

#[allow(unused_macros)]
macro_rules! unavailable_backend {
    ($name:ident, $feature:literal, $variant:ident) => {
        use crate::cpu::CpuStorage;
        use crate::gpu::plan::KernelPlan;
        use crate::gpu::target::Target;
        use crate::gpu::GpuStorage;
        use crate::storage::Storage;
        use crate::{DType, Device, Error, Result};

        /// No value of this type can exist: the backend is not part of this build.
        #[derive(Clone, Debug)]
        pub enum $name {}

        impl $name {
            /// Whether device `ordinal` can be used, with the reason when it cannot.
            pub fn check_device(_ordinal: usize) -> Result<()> {
                Err(Error::NotCompiledWith($feature))
            }
        }

        impl GpuStorage for $name {
            fn elem_dtype(&self) -> DType {
                match *self {}
            }
            fn len(&self) -> usize {
                match *self {}
            }
            fn ordinal(&self) -> usize {
                match *self {}
            }
            fn device_of(ordinal: usize) -> Device {
                Device::$variant(ordinal)
            }
            fn target_of(_: usize) -> Result<Target> {
                Err(Error::NotCompiledWith($feature))
            }
            fn alloc(_: usize, _: DType, _: usize) -> Result<Self> {
                Err(Error::NotCompiledWith($feature))
            }
            fn upload(_: &CpuStorage, _: usize) -> Result<Self> {
                Err(Error::NotCompiledWith($feature))
            }
            fn download(&self) -> Result<CpuStorage> {
                match *self {}
            }
            fn launch(_: &KernelPlan, args: &[&Self]) -> Result<()> {
                match args.first() {
                    Some(s) => match **s {},
                    None => Err(Error::NotCompiledWith($feature)),
                }
            }
            fn deferred() -> &'static std::thread::LocalKey<crate::gpu::deferred::Deferred<Self>> {
                thread_local!(static PENDING: crate::gpu::deferred::Deferred<$name> = Default::default());
                &PENDING
            }
            fn of(s: &Storage) -> Option<&Self> {
                match s {
                    Storage::$variant(s) => Some(s),
                    _ => None,
                }
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
