//! The names of optirs-gpu's error types, for code written against that API. There is one
//! error type, [`rnn_core::Error`]; its variants carry what the seed's `GpuError` cases
//! only named:
//!
//! | optirs-gpu                         | rnn                                                       |
//! |------------------------------------|-----------------------------------------------------------|
//! | `GpuError::OutOfMemory`            | `Error::OutOfMemory { requested, free, total }` (bytes)   |
//! | `GpuError::DeviceNotAvailable`     | `Error::DeviceNotAvailable(why)`; `Error::NotCompiledWith("cuda")` when the build lacks the backend |
//! | shape / dtype / device mismatches  | `Error::ShapeMismatch`, `DTypeMismatch`, `DeviceMismatch` (each naming the op) |
//! | bad settings (negative lr, ...)    | `Error::InvalidArgument { op, msg }`                      |
//! | kernel compile errors              | `Error::Msg` / `InvalidArgument` with the compiler's log   |
//!
//! The seed's match, with the variants' fields:
//!
//! ```
//! use rnn::gpu::error::{GpuError, GpuResult};
//! use rnn::gpu::{GpuOptimizer, GpuTensor};
//!
//! fn update(optimizer: &mut GpuOptimizer, params: &mut GpuTensor, grads: &GpuTensor) -> GpuResult<()> {
//!     match optimizer.step(params, grads) {
//!         Ok(()) => println!("Optimization successful"),
//!         Err(GpuError::OutOfMemory { requested, .. }) => {
//!             eprintln!("out of device memory ({requested} bytes asked): freeing the cache, retrying");
//!             optimizer.clear_cache()?;
//!             optimizer.step(params, grads)?;
//!         }
//!         Err(GpuError::DeviceNotAvailable(why)) => {
//!             eprintln!("GPU gone ({why}): continue on the CPU with GpuOptimizer::new(Device::Cpu)");
//!         }
//!         Err(e) => return Err(e),
//!     }
//!     Ok(())
//! }
//! # fn main() -> rnn::Result<()> {
//! # let mut optimizer = GpuOptimizer::new(rnn::Device::Cpu).build()?;
//! # let mut params = optimizer.create_tensor(&[4])?;
//! # let grads = optimizer.create_tensor_from_slice(&[1.0f32; 4])?;
//! # update(&mut optimizer, &mut params, &grads)
//! # }
//! ```

/// optirs-gpu's `GpuError`: the library's one error type.
pub type GpuError = rnn_core::Error;

/// optirs-gpu's `GpuResult`.
pub type GpuResult<T> = rnn_core::Result<T>;
