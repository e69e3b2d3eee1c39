//! The CPU backend: rayon for parallel loops, contiguous fast paths the compiler
//! vectorizes, the `gemm` crate for matmul. It is the reference for every GPU kernel.

use half::{bf16, f16};

use crate::{DType, Error, Result, WithDType};

/// Elements of one dtype in host memory. Buffers come from and go back to the host buffer
/// cache (`host_pool`): dropping a storage hands its vector back for reuse.
#[derive(Debug, PartialEq)]
pub enum CpuStorage {
    U8(Vec<u8>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the typed vector, whatever the dtype.
#[macro_export]
#[doc(hidden)]
macro_rules! cpu_each {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::cpu::CpuStorage::U8($v) => $body,
            $crate::cpu::CpuStorage::U32($v) => $body,
            $crate::cpu::CpuStorage::I64($v) => $body,
            $crate::cpu::CpuStorage::F16($v) => $body,
            $crate::cpu::CpuStorage::BF16($v) => $body,
            $crate::cpu::CpuStorage::F32($v) => $body,
            $crate::cpu::CpuStorage::F64($v) => $body,
        }
    };
}

/// Like `cpu_each!`, but `$body` yields a `Vec` of the same dtype, wrapped back up.
#[macro_export]
#[doc(hidden)]
macro_rules! cpu_map_same {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::cpu::CpuStorage::U8($v) => $crate::cpu::CpuStorage::U8($body),
            $crate::cpu::CpuStorage::U32($v) => $crate::cpu::CpuStorage::U32($body),
            $crate::cpu::CpuStorage::I64($v) => $crate::cpu::CpuStorage::I64($body),
            $crate::cpu::CpuStorage::F16($v) => $crate::cpu::CpuStorage::F16($body),
            $crate::cpu::CpuStorage::BF16($v) => $crate::cpu::CpuStorage::BF16($body),
            $crate::cpu::CpuStorage::F32($v) => $crate::cpu::CpuStorage::F32($body),
            $crate::cpu::CpuStorage::F64($v) => $crate::cpu::CpuStorage::F64($body),
        }
    };
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        cpu_each!(self, v => crate::host_pool::release(std::mem::take(v)))
    }
}

impl Clone for CpuStorage {
    /// A copy in a buffer from the host cache. Panics like `Vec::clone` when the machine
    /// cannot hold it (`Clone` cannot fail).
    fn clone(&self) -> Self {
        cpu_map_same!(self, v => {
            let mut copy = crate::host_pool::with_capacity(v.len())
                .unwrap_or_else(|e| panic!("CpuStorage::clone: {e}"));
            copy.extend_from_slice(v);
            copy
        })
    }
}

mod binary;
pub(crate) mod conv;
mod conv_bcast_fwd;
mod conv_direct;
mod conv_wgrad;
mod copy;
mod index;
mod matmul;
pub(crate) mod matmul_half;
mod matmul_half_kernels;
#[cfg(test)]
mod matmul_half_tests;
mod pack_pairs;
mod packed_gemm;
#[cfg(test)]
mod packed_gemm_tests;
mod padded_columns;
pub(crate) mod transpose;
pub use matmul::f32_gemm_is_packed;
pub(crate) use matmul::{gemm_into, half_gemm_into, prefers_transposed_product};
pub mod parallel;
pub(crate) mod pool;
mod reduce;
pub(crate) mod simd;
pub mod strided;
pub(crate) mod unary;
mod window;

/// Whether the AVX-512 kernels run here: this build has them (rustc 1.89 or later on
/// x86-64) and the CPU offers the AVX-512 tier.
pub(crate) fn runs_avx512_kernels() -> bool {
    matmul_half_kernels::HAS_AVX512_KERNELS && simd::has_avx512()
}

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        cpu_each!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` copies of `value` converted to `dtype`; an allocation the machine cannot make is
    /// `Error::OutOfMemory` rather than an abort (the size comes from the user).
    pub fn full(value: f64, n: usize, dtype: DType) -> Result<CpuStorage> {
        fn fill<T: WithDType>(value: f64, n: usize) -> Result<CpuStorage> {
            // Zeroed pages come for free from the allocator; only other values (-0.0 too) are written.
            let mut v = parallel::zeroed_vec(n)?;
            if value.to_bits() != 0 {
                v.fill(T::from_f64(value));
            }
            Ok(T::into_storage(v))
        }
        match dtype {
            DType::U8 => fill::<u8>(value, n),
            DType::U32 => fill::<u32>(value, n),
            DType::I64 => fill::<i64>(value, n),
            DType::F16 => fill::<f16>(value, n),
            DType::BF16 => fill::<bf16>(value, n),
            DType::F32 => fill::<f32>(value, n),
            DType::F64 => fill::<f64>(value, n),
        }
    }

    /// The elements' bytes (native endianness), as a device copies them.
    pub fn as_bytes(&self) -> &[u8] {
        cpu_each!(self, v => bytemuck::cast_slice(v))
    }

    /// Elements of `dtype` from their bytes (native endianness), as a device hands them back.
    pub fn from_bytes(bytes: &[u8], dtype: DType) -> CpuStorage {
        use bytemuck::pod_collect_to_vec as typed;
        match dtype {
            DType::U8 => CpuStorage::U8(bytes.to_vec()),
            DType::U32 => CpuStorage::U32(typed(bytes)),
            DType::I64 => CpuStorage::I64(typed(bytes)),
            DType::F16 => CpuStorage::F16(typed(bytes)),
            DType::BF16 => CpuStorage::BF16(typed(bytes)),
            DType::F32 => CpuStorage::F32(typed(bytes)),
            DType::F64 => CpuStorage::F64(typed(bytes)),
        }
    }

    pub fn as_slice<T: WithDType>(&self) -> Result<&[T]> {
        T::slice_of(self).ok_or(Error::DTypeMismatch { op: "as_slice", lhs: self.dtype(), rhs: T::DTYPE })
    }

    /// Index values (any integer dtype) as usize, with negative values reported.
    pub(crate) fn indices_at(&self, op: &'static str, offsets: impl Iterator<Item = usize>) -> Result<Vec<i64>> {
        match self {
            CpuStorage::U8(v) => Ok(offsets.map(|o| v[o] as i64).collect()),
            CpuStorage::U32(v) => Ok(offsets.map(|o| v[o] as i64).collect()),
            CpuStorage::I64(v) => Ok(offsets.map(|o| v[o]).collect()),
            s => Err(Error::UnsupportedDType { op, dtype: s.dtype(), hint: ": indices must be u8, u32 or i64" }),
        }
    }
}
