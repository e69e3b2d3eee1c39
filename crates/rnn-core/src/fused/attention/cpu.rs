//! Attention on the CPU. (Tiled kernels to come; `None` composes from primitives.)

use super::{Attention, AttentionBackward};
use crate::cpu::CpuStorage;
use crate::{Layout, Result};

pub(crate) fn forward(_: &Attention, _: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    Ok(None)
}

pub(crate) fn backward(_: &AttentionBackward, _: &[(&CpuStorage, &Layout)]) -> Result<Option<Vec<CpuStorage>>> {
    Ok(None)
}
