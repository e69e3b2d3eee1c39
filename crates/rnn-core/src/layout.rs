//! Where a tensor's elements live in its storage: shape, strides (in elements) and the
//! offset of the first element. Every view op is a pure function from layout to layout.

use crate::{Error, Result, Shape};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Shape,
    strides: Vec<usize>,
    start_offset: usize,
}

impl Layout {
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        Self::contiguous_with_offset(shape, 0)
    }

    pub fn contiguous_with_offset(shape: impl Into<Shape>, start_offset: usize) -> Self {
        let shape = shape.into();
        let strides = shape.stride_contiguous();
        Layout { shape, strides, start_offset }
    }

    pub fn new(shape: Shape, strides: Vec<usize>, start_offset: usize) -> Self {
        Layout { shape, strides, start_offset }
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn start_offset(&self) -> usize {
        self.start_offset
    }

    /// Row-major contiguous (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&d, &s) in self.dims().iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }

    /// The storage range `[start, end)` when the layout is contiguous.
    pub fn contiguous_offsets(&self) -> Option<(usize, usize)> {
        self.is_contiguous().then(|| (self.start_offset, self.start_offset + self.shape.elem_count()))
    }

    /// One past the largest storage index this layout can touch (0 when empty).
    pub fn storage_extent(&self) -> usize {
        if self.shape.elem_count() == 0 {
            return 0;
        }
        let last: usize = self.dims().iter().zip(&self.strides).map(|(d, s)| (d - 1) * s).sum();
        self.start_offset + last + 1
    }

    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Self> {
        self.check_dim("narrow", dim)?;
        let dims = self.dims();
        if start.checked_add(len).is_none_or(|end| end > dims[dim]) {
            return Err(Error::NarrowOutOfRange {
                op: "narrow",
                what: format!("start {start} + len {len} on dim {dim}"),
                shape: self.shape.clone(),
            });
        }
        let mut new_dims = dims.to_vec();
        new_dims[dim] = len;
        let start_offset = self.start_offset + if len > 0 { start * self.strides[dim] } else { 0 };
        Ok(Layout { shape: new_dims.into(), strides: self.strides.clone(), start_offset })
    }

    pub fn permute(&self, perm: &[usize]) -> Result<Self> {
        let rank = self.shape.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
            return Err(Error::invalid(
                "permute",
                format!("{perm:?} is not a permutation of the dims of shape {:?}", self.shape),
            ));
        }
        let dims: Vec<usize> = perm.iter().map(|&p| self.dims()[p]).collect();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(Layout { shape: dims.into(), strides, start_offset: self.start_offset })
    }

    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Self> {
        self.check_dim("transpose", d0)?;
        self.check_dim("transpose", d1)?;
        let mut perm: Vec<usize> = (0..self.shape.rank()).collect();
        perm.swap(d0, d1);
        self.permute(&perm)
    }

    fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.shape.rank() {
            let dim = i64::try_from(dim).unwrap_or(i64::MAX);
            return Err(Error::DimOutOfRange { op, dim, shape: self.shape.clone() });
        }
        Ok(())
    }

    /// View with a new shape: stretched dims (size 1 or missing on the left) get stride 0.
    pub fn broadcast_as(&self, shape: &Shape) -> Result<Self> {
        let err = || Error::BroadcastIncompatible { op: "broadcast_as", lhs: self.shape.clone(), rhs: shape.clone() };
        let (src, dst) = (self.dims(), shape.dims());
        if dst.len() < src.len() {
            return Err(err());
        }
        let extra = dst.len() - src.len();
        let mut strides = vec![0; dst.len()];
        for (i, &d) in dst.iter().enumerate().skip(extra) {
            let s = src[i - extra];
            strides[i] = match s {
                _ if s == d => self.strides[i - extra],
                1 => 0,
                _ => return Err(err()),
            };
        }
        Ok(Layout { shape: shape.clone(), strides, start_offset: self.start_offset })
    }

    /// A new shape over the same elements: only possible without a copy when contiguous.
    pub fn reshape(&self, shape: Shape) -> Option<Self> {
        self.is_contiguous().then(|| Layout::contiguous_with_offset(shape, self.start_offset))
    }
}
