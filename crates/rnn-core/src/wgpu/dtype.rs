//! How each dtype is stored in a wgpu buffer, and the host-side conversions to and from it
//! (the kernel side is `gpu/target.rs`).

use half::f16;

use crate::cpu::CpuStorage;
use crate::{DType, Error, Result};

const HINT: &str = ": the wgpu backend stores f32, f16 (with shader-f16), u32, u8 and i64 (in i32 range)";

/// Bytes per stored element.
pub(crate) fn stored_size(dtype: DType) -> usize {
    if dtype == DType::F16 {
        2
    } else {
        4
    }
}

/// `n` elements' worth of bytes, rounded up to the 4-byte copy granularity.
pub(crate) fn stored_bytes(dtype: DType, n: usize) -> u64 {
    ((n * stored_size(dtype)) as u64).next_multiple_of(4)
}

/// The stored bytes of a host tensor (padded to 4 bytes).
pub(crate) fn to_stored_bytes(cpu: &CpuStorage) -> Result<Vec<u8>> {
    let mut bytes: Vec<u8> = match cpu {
        CpuStorage::F32(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::F16(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::U32(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::U8(v) => v.iter().flat_map(|&x| u32::from(x).to_ne_bytes()).collect(),
        CpuStorage::I64(v) => {
            let mut words = Vec::with_capacity(v.len());
            for &x in v {
                let w = i32::try_from(x).map_err(|_| {
                    let msg = format!("i64 value {x} does not fit the wgpu backend's 32-bit integers");
                    Error::invalid("to_device", msg)
                })?;
                words.push(w);
            }
            bytemuck::cast_slice(&words).to_vec()
        }
        s => return Err(Error::UnsupportedDType { op: "to_device", dtype: s.dtype(), hint: HINT }),
    };
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    Ok(bytes)
}

/// A host tensor of `n` elements of `dtype` from stored bytes.
pub(crate) fn from_stored_bytes(bytes: &[u8], dtype: DType, n: usize) -> Result<CpuStorage> {
    let words = || bytes[..n * 4].chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]);
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(words().map(f32::from_ne_bytes).collect()),
        DType::U32 => CpuStorage::U32(words().map(u32::from_ne_bytes).collect()),
        DType::U8 => CpuStorage::U8(words().map(|w| u32::from_ne_bytes(w) as u8).collect()),
        DType::I64 => CpuStorage::I64(words().map(|w| i64::from(i32::from_ne_bytes(w))).collect()),
        DType::F16 => {
            CpuStorage::F16(bytes[..n * 2].chunks_exact(2).map(|c| f16::from_ne_bytes([c[0], c[1]])).collect())
        }
        d => return Err(Error::UnsupportedDType { op: "to_cpu", dtype: d, hint: HINT }),
    })
}
