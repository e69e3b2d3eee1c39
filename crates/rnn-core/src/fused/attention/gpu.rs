//! Attention programs for CUDA and WGSL. (Kernels to come; `None` composes from primitives.)

use super::{Attention, AttentionBackward};
use crate::gpu::plan::{KernelSource, Program};
use crate::gpu::target::Target;
use crate::{DType, Layout, Result};

pub(crate) fn forward(_: &Attention, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
    Ok(None)
}

pub(crate) fn backward(_: &AttentionBackward, _: &Target, _: &[(DType, &Layout, usize)]) -> Result<Option<Program>> {
    Ok(None)
}

pub(crate) fn variants(_: &Target) -> Vec<(String, KernelSource)> {
    Vec::new()
}
