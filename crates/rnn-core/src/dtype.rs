//! Element types. Floats compute natively (f32, f64) or through f32 (f16, bf16).

use half::{bf16, f16};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 7] = [DType::U8, DType::U32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64];

    pub fn as_str(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        !self.is_float()
    }

    /// The dtype of an arithmetic op between a tensor of this dtype and the number `value`:
    /// f32 for an integer dtype and a value that is not an integer (a fraction, an infinity or
    /// NaN), so the value is not truncated, as PyTorch promotes (`7 // 2.5` is 2.0); this dtype
    /// otherwise.
    pub fn with_scalar(self, value: f64) -> DType {
        let integral = value.fract() == 0.0; // false for the infinities and NaN
        if self.is_int() && !integral {
            DType::F32
        } else {
            self
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DType {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        DType::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| crate::Error::invalid("dtype", format!("unknown dtype '{s}'")))
    }
}

/// A Rust type that can be stored in a tensor.
pub trait WithDType:
    Copy + Send + Sync + PartialOrd + PartialEq + std::fmt::Debug + std::fmt::Display + bytemuck::Zeroable + 'static
{
    const DTYPE: DType;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn into_storage(data: Vec<Self>) -> crate::cpu::CpuStorage;
    /// Not equal to itself: NaN for floats, never for integers.
    fn is_nan(self) -> bool {
        self.partial_cmp(&self).is_none()
    }
    fn slice_of(s: &crate::cpu::CpuStorage) -> Option<&[Self]>;
    /// The elements of `s` for writing in place, if it holds this type.
    fn slice_of_mut(s: &mut crate::cpu::CpuStorage) -> Option<&mut [Self]> {
        Self::vec_of_mut(s).map(|v| v.as_mut_slice())
    }
    /// The vector of `s`, if it holds this type.
    fn vec_of_mut(s: &mut crate::cpu::CpuStorage) -> Option<&mut Vec<Self>>;
}

macro_rules! with_dtype {
    ($ty:ty, $variant:ident, $from:expr, $to:expr) => {
        impl WithDType for $ty {
            const DTYPE: DType = DType::$variant;
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn into_storage(data: Vec<Self>) -> crate::cpu::CpuStorage {
                crate::cpu::CpuStorage::$variant(data)
            }
            fn slice_of(s: &crate::cpu::CpuStorage) -> Option<&[Self]> {
                match s {
                    crate::cpu::CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn vec_of_mut(s: &mut crate::cpu::CpuStorage) -> Option<&mut Vec<Self>> {
                match s {
                    crate::cpu::CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

with_dtype!(u8, U8, |v: f64| v as u8, |v: u8| v as f64);
with_dtype!(u32, U32, |v: f64| v as u32, |v: u32| v as f64);
with_dtype!(i64, I64, |v: f64| v as i64, |v: i64| v as f64);
with_dtype!(f16, F16, f16::from_f64, f16::to_f64);
with_dtype!(bf16, BF16, bf16::from_f64, |v: bf16| crate::num::bf16_to_f32(v) as f64);
with_dtype!(f32, F32, |v: f64| v as f32, |v: f32| v as f64);
with_dtype!(f64, F64, |v: f64| v, |v: f64| v);

#[cfg(test)]
mod tests {
    use super::DType;

    #[test]
    fn a_number_promotes_an_integer_dtype_only_when_it_is_not_an_integer() {
        for int in [DType::U8, DType::U32, DType::I64] {
            assert_eq!(int.with_scalar(3.0), int);
            assert_eq!(int.with_scalar(-0.0), int);
            for v in [2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
                assert_eq!(int.with_scalar(v), DType::F32, "{int} with {v}");
            }
        }
        for float in [DType::F16, DType::BF16, DType::F32, DType::F64] {
            assert_eq!(float.with_scalar(2.5), float);
            assert_eq!(float.with_scalar(f64::NAN), float);
        }
    }
}
