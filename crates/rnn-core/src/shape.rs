//! Shapes, dimension arguments (negative dims count from the end) and broadcasting rules.

use crate::{Error, Result};

#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Shape {
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements. Never overflows: a shape too large to exist counts `usize::MAX`
    /// (creation and view ops reject such shapes through `checked_elem_count`).
    pub fn elem_count(&self) -> usize {
        self.checked_count().unwrap_or(usize::MAX)
    }
    /// The number of elements, or an error naming `op` when it does not fit in a `usize`.
    pub fn checked_elem_count(&self, op: &'static str) -> Result<usize> {
        self.checked_count()
            .ok_or_else(|| Error::invalid(op, format!("shape {self:?} has more elements than a usize can count")))
    }
    fn checked_count(&self) -> Option<usize> {
        if self.0.contains(&0) {
            return Some(0);
        }
        self.0.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }
    pub fn into_dims(self) -> Vec<usize> {
        self.0
    }
    /// Row-major strides of a contiguous tensor of this shape.
    pub fn stride_contiguous(&self) -> Vec<usize> {
        let mut strides = vec![1usize; self.rank()];
        for i in (0..self.rank().saturating_sub(1)).rev() {
            // Saturating: only an empty shape can be this large, and its strides are never used.
            strides[i] = strides[i + 1].saturating_mul(self.0[i + 1]);
        }
        strides
    }

    /// The shape both inputs broadcast to, numpy rules: align right, 1 stretches.
    pub fn broadcast_with(&self, rhs: &Shape, op: &'static str) -> Result<Shape> {
        let rank = self.rank().max(rhs.rank());
        let mut dims = vec![0; rank];
        for (i, d) in dims.iter_mut().enumerate() {
            let l = self.dim_from_right(rank - 1 - i);
            let r = rhs.dim_from_right(rank - 1 - i);
            *d = match (l, r) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => return Err(Error::BroadcastIncompatible { op, lhs: self.clone(), rhs: rhs.clone() }),
            };
        }
        Ok(Shape(dims))
    }

    /// Size of the dim `k` places from the right, 1 past the rank.
    fn dim_from_right(&self, k: usize) -> usize {
        if k < self.rank() {
            self.0[self.rank() - 1 - k]
        } else {
            1
        }
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(vec![])
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(vec![d])
    }
}
macro_rules! shape_from_tuple {
    ($($name:ident),+) => {
        impl From<($(shape_from_tuple!(@usize $name),)+)> for Shape {
            #[allow(non_snake_case)]
            fn from(($($name,)+): ($(shape_from_tuple!(@usize $name),)+)) -> Self {
                Shape(vec![$($name),+])
            }
        }
    };
    (@usize $name:ident) => { usize };
}
shape_from_tuple!(A);
shape_from_tuple!(A, B);
shape_from_tuple!(A, B, C);
shape_from_tuple!(A, B, C, D);
shape_from_tuple!(A, B, C, D, E);
shape_from_tuple!(A, B, C, D, E, F);

/// One dimension argument: `usize`, or a signed integer where -1 is the last dim.
pub trait Dim: Copy + std::fmt::Debug {
    fn to_index(self, shape: &Shape, op: &'static str) -> Result<usize>;
    /// Like `to_index`, but allows `rank` itself (for unsqueeze / stack).
    fn to_index_plus_one(self, shape: &Shape, op: &'static str) -> Result<usize>;
}

fn resolve(d: i64, rank: usize, shape: &Shape, op: &'static str) -> Result<usize> {
    let idx = if d < 0 { d + rank as i64 } else { d };
    if idx < 0 || idx >= rank as i64 {
        return Err(Error::DimOutOfRange { op, dim: d, shape: shape.clone() });
    }
    Ok(idx as usize)
}

/// A dim as i64; a usize above `i64::MAX` must stay out of range, not wrap to a negative dim.
fn as_i64(d: impl TryInto<i64>) -> i64 {
    d.try_into().unwrap_or(i64::MAX)
}

macro_rules! impl_dim {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn to_index(self, shape: &Shape, op: &'static str) -> Result<usize> {
                resolve(as_i64(self), shape.rank(), shape, op)
            }
            fn to_index_plus_one(self, shape: &Shape, op: &'static str) -> Result<usize> {
                resolve(as_i64(self), shape.rank() + 1, shape, op)
            }
        }
    )*};
}
impl_dim!(usize, i32, i64, isize, u32);

/// A set of dims for reductions: one dim, an array, a slice or a Vec of dims.
pub trait Dims {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>>;
}

fn unique_dims<D: Dim>(ds: &[D], shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(ds.len());
    for d in ds {
        let i = d.to_index(shape, op)?;
        if out.contains(&i) {
            return Err(Error::DuplicateDim { op, dim: i });
        }
        out.push(i);
    }
    out.sort_unstable();
    Ok(out)
}

impl<D: Dim> Dims for D {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        Ok(vec![self.to_index(shape, op)?])
    }
}
impl<D: Dim, const N: usize> Dims for [D; N] {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        unique_dims(self, shape, op)
    }
}
impl<D: Dim> Dims for &[D] {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        unique_dims(self, shape, op)
    }
}
impl<D: Dim> Dims for Vec<D> {
    fn to_indexes(&self, shape: &Shape, op: &'static str) -> Result<Vec<usize>> {
        unique_dims(self, shape, op)
    }
}

/// All dims of the tensor.
#[derive(Clone, Copy, Debug)]
pub struct AllDims;
impl Dims for AllDims {
    fn to_indexes(&self, shape: &Shape, _: &'static str) -> Result<Vec<usize>> {
        Ok((0..shape.rank()).collect())
    }
}
