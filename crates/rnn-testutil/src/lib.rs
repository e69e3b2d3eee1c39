//! Test helpers shared by the rnn crates (a dev-dependency only, never published).
//!
//! - [`test_device!`] runs one test body on every device: always the CPU, plus CUDA and wgpu
//!   arms ([`on_gpu`]). Bodies ask the device what it holds ([`supports`], [`dtypes`],
//!   [`floats`], [`widest_float`], ...) instead of naming devices: wgpu has no f64 / bf16,
//!   f16 only with `shader-f16`, and stores i64 in 32 bits.
//! - [`tolerance`]: the per-dtype tolerances, in one table ([`TOLERANCES`]), and [`tol_on`]
//!   to relax them to a GPU's f32 math.
//! - Comparing values: [`values`], [`max_rel_err`], [`assert_close`], [`diff_summary`], ...
//! - Random inputs drawn on the host from a seed, so every device sees the same values:
//!   [`rand64`], [`uniform`], [`random`].
//! - Gradient checks of layers and losses on every device: [`check_gradients`] (finite
//!   differences with `rnn_core::gradcheck` on the CPU, the CPU's f64 gradients elsewhere).
//! - PyTorch golden fixtures ([`golden`]), naive reference ops ([`reference`]), temporary
//!   folders and the MNIST folder ([`TempDir`], [`mnist_dir`]).
//!
//! # `test_device!` in a crate
//!
//! Add `rnn-testutil.workspace = true` to the crate's `[dev-dependencies]`, then in a test file
//! `use rnn_testutil::*;` and `test_device!(name_test, name)` after `fn name(device: Device) ->
//! Result<()>`. The macro needs no `cfg` and no feature of the calling crate: its `cuda` and
//! `wgpu` arms always exist and ask rnn-core at run time whether the backend was compiled in
//! and has a device. An arm without one prints `SKIPPED on <device>: <why>` and passes, unless
//! `RNN_REQUIRE_GPU` names the backend (CI sets `wgpu`): then it fails. The backends come
//! with rnn-core's features, which every crate using the macro forwards (both are on by
//! default, so the `cuda` arms run where an NVIDIA GPU and driver are).
#![warn(missing_docs)]

mod compare;
mod device;
mod fs;
pub mod golden;
mod grad;
mod random;
pub mod reference;
mod tol;

pub use compare::*;
pub use device::*;
pub use fs::*;
pub use grad::*;
pub use random::*;
pub use tol::*;

/// What `test_device!` expands to refers to, whatever the calling crate imports.
#[doc(hidden)]
pub mod __private {
    pub use rnn_core::{Device, Result};
}
