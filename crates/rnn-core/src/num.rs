//! Scalar arithmetic the CPU kernels are generic over. Integers wrap and divide by zero to
//! zero instead of panicking: a tensor op must never abort the process.

use half::{bf16, f16};

/// Arithmetic every dtype supports (the binary ops of the op table).
pub trait Elem: crate::WithDType {
    fn add(self, b: Self) -> Self;
    fn sub(self, b: Self) -> Self;
    fn mul(self, b: Self) -> Self;
    fn div(self, b: Self) -> Self;
    fn pow(self, b: Self) -> Self;
    /// The larger value; NaN if either is NaN (as `torch.maximum`).
    #[allow(clippy::eq_op)]
    fn maximum(self, b: Self) -> Self {
        if self != self || self >= b { self } else { b }
    }
    #[allow(clippy::eq_op)]
    fn minimum(self, b: Self) -> Self {
        if self != self || self <= b { self } else { b }
    }
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            fn div(self, b: Self) -> Self { self.checked_div(b).unwrap_or(0) }
            fn pow(self, b: Self) -> Self { (self as f64).powf(b as f64) as $t }
        }
    )*};
}
int_elem!(u8, u32, i64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn add(self, b: Self) -> Self { self + b }
            fn sub(self, b: Self) -> Self { self - b }
            fn mul(self, b: Self) -> Self { self * b }
            fn div(self, b: Self) -> Self { self / b }
            fn pow(self, b: Self) -> Self { num_traits::Float::powf(self, b) }
        }
    )*};
}
float_elem!(f16, bf16, f32, f64);

/// Math for the unary ops. Implemented for f32 and f64; f16 and bf16 compute through f32.
pub trait Float: num_traits::Float + Elem {
    fn erf(self) -> Self;
    /// A constant of this type.
    fn c(v: f64) -> Self {
        <Self as crate::WithDType>::from_f64(v)
    }
}

impl Float for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }
}
impl Float for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }
}
