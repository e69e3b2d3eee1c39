//! rnn-core: tensors with autograd over CPU, CUDA and wgpu storage.
//!
//! ```
//! use rnn_core::{Device, DType, Tensor};
//! # fn main() -> rnn_core::Result<()> {
//! let x = Tensor::randn(0.0, 1.0, (4, 3), DType::F32, Device::Cpu)?.requires_grad();
//! let w = Tensor::ones((3, 2), DType::F32, Device::Cpu)?.requires_grad();
//! let loss = x.matmul(&w)?.relu()?.sum_all()?;
//! let grads = loss.backward()?;
//! assert_eq!(grads.get(&w).unwrap().dims(), &[3, 2]);
//! # Ok(()) }
//! ```

#[macro_use]
pub mod cpu;

mod adapter_info;
pub mod autocast;
pub mod backend_stubs;
mod backprop;
mod cpu_workers;
#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
mod display;
mod dtype;
#[cfg(all(test, feature = "cuda-emu", target_os = "linux"))]
mod emu;
mod error;
mod fused;
pub mod fused_update;
mod gpu;
pub mod gpu_memory;
#[cfg(any(feature = "wgpu", feature = "cuda", feature = "cuda-emu"))]
mod gpu_pool;
mod grad_fns;
pub mod gradcheck;
mod host_pool;
mod kernel_arg;
mod layout;
mod ndarray_interop;
pub mod num;
pub mod op_table;
mod random;
mod settings;
mod shape;
mod std_ops;
pub(crate) mod storage;
mod tensor;
mod tensor_ops;
mod view;
#[cfg(feature = "wgpu")]
pub mod wgpu;
mod window;

pub use adapter_info::{wgpu_adapters, WgpuAdapterInfo};
pub use autocast::{autocast, autocast_dtype, AutocastGuard, AutocastOp, CastPolicy};
pub use backprop::{grad_enabled, no_grad, GradStore, NoGradGuard};
pub use cpu::f32_gemm_is_packed as cpu_f32_gemm_is_packed;
pub use cpu_workers::on_cpu_workers;
pub use device::Device;
pub use dtype::{DType, WithDType};
pub use error::{try_vec, Error, Result};
pub use fused::attention::{scaled_dot_product_attention, AttentionMask};
pub use host_pool::{cpu_empty_cache, cpu_memory_stats, HostMemoryStats};
pub use kernel_arg::KernelArg;
pub use layout::Layout;
pub use op_table::Epilogue;
pub use random::manual_seed;
pub use settings::{allow_tf32, attention_atomic_dq, set_allow_tf32, set_attention_atomic_dq};
pub use shape::{AllDims, Dim, Dims, Shape};
pub use tensor::{Tensor, TensorId};
pub use window::Window2d;
