//! Concatenation: copies each input's rows into their slot of the output.

use std::borrow::Cow;

use super::CpuStorage;
use crate::{Error, Layout, Result, WithDType};

fn cat_typed<T: WithDType>(parts: &[(Cow<'_, [T]>, usize)], outer: usize, out_block: usize) -> Result<Vec<T>> {
    let mut out = super::parallel::zeroed_vec(outer * out_block)?;
    let mut col = 0;
    for (src, block) in parts {
        for (o, row) in src.chunks(*block.max(&1)).enumerate().take(outer) {
            out[o * out_block + col..][..*block].copy_from_slice(row);
        }
        col += block;
    }
    Ok(out)
}

impl CpuStorage {
    /// Concatenates along `dim`; the inputs' shapes agree everywhere else (checked by the caller).
    pub fn cat(parts: &[(&CpuStorage, &Layout)], dim: usize) -> Result<CpuStorage> {
        let first = parts.first().ok_or_else(|| Error::invalid("cat", "no tensors given"))?;
        let dims = first.1.dims();
        let outer: usize = dims[..dim].iter().product();
        let inner: usize = dims[dim + 1..].iter().product();
        let out_block: usize = parts.iter().map(|(_, l)| l.dims()[dim] * inner).sum();
        macro_rules! arm {
            ($($v:ident),*) => {
                match first.0 {
                    $(CpuStorage::$v(_) => {
                        let mut typed = Vec::with_capacity(parts.len());
                        for (s, l) in parts {
                            let CpuStorage::$v(v) = s else {
                                return Err(Error::DTypeMismatch { op: "cat", lhs: first.0.dtype(), rhs: s.dtype() });
                            };
                            typed.push((super::unary::contiguous_slice(v, l)?, l.dims()[dim] * inner));
                        }
                        CpuStorage::$v(cat_typed(&typed, outer, out_block)?)
                    })*
                }
            };
        }
        Ok(arm!(U8, U32, I64, F16, BF16, F32, F64))
    }
}
