//! Arithmetic operators on tensors, as in candle: `&a + &b`, `a - &b`, `&a * b`, `a / b`,
//! `&a + 2.0`, `-&a`, ... Each is the named method (`add`, `sub_scalar`, `neg`, ...), so it
//! broadcasts and fails the same way, and returns a `Result<Tensor>`:
//!
//! ```
//! use rnn_core::{Device, Tensor};
//! # fn main() -> rnn_core::Result<()> {
//! let a = Tensor::from_vec(vec![1f32, 2., 3.], 3, Device::Cpu)?;
//! let b = ((&a * &a)? - 1.0)?;
//! assert_eq!(b.to_vec1::<f32>()?, [0., 3., 8.]);
//! # Ok(()) }
//! ```

use std::borrow::Borrow;
use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::{Result, Tensor};

/// `impl_ops!(binary Trait, method, scalar_method)` implements `Trait` for `Tensor` and
/// `&Tensor` with a tensor (owned or borrowed) or an `f64` on the right;
/// `impl_ops!(unary Trait, method)` implements `Trait` for `Tensor` and `&Tensor`.
/// (`Tensor::method` names the inherent method: inherent items win over trait items.)
macro_rules! impl_ops {
    ($kind:ident $trait:ident, $($args:ident),+) => {
        impl_ops!(@$kind $trait, Tensor, $($args),+);
        impl_ops!(@$kind $trait, &Tensor, $($args),+);
    };
    (@binary $trait:ident, $lhs:ty, $method:ident, $scalar:ident) => {
        impl<B: Borrow<Tensor>> $trait<B> for $lhs {
            type Output = Result<Tensor>;
            fn $method(self, rhs: B) -> Result<Tensor> {
                Tensor::$method(&self, rhs.borrow())
            }
        }
        impl $trait<f64> for $lhs {
            type Output = Result<Tensor>;
            fn $method(self, rhs: f64) -> Result<Tensor> {
                Tensor::$scalar(&self, rhs)
            }
        }
    };
    (@unary $trait:ident, $lhs:ty, $method:ident) => {
        impl $trait for $lhs {
            type Output = Result<Tensor>;
            fn $method(self) -> Result<Tensor> {
                Tensor::$method(&self)
            }
        }
    };
}

impl_ops!(binary Add, add, add_scalar);
impl_ops!(binary Sub, sub, sub_scalar);
impl_ops!(binary Mul, mul, mul_scalar);
impl_ops!(binary Div, div, div_scalar);
impl_ops!(unary Neg, neg);
