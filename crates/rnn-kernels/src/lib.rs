//! Kernel sources only: CUDA C under `cuda/` and WGSL under `wgsl/`, exposed as string
//! constants and compiled at run time by the backends (NVRTC, wgpu). No build script.
//!
//! The GPU backends are not implemented yet, so there are no kernels here yet.
