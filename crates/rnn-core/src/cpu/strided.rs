//! Strided index math for the CPU, the only place it lives. A layout is walked either
//! element by element (`StridedIndex`) or as runs of contiguous elements (`blocks`).

use crate::Layout;

/// Storage offsets of a layout's elements in row-major order, from any starting element.
#[derive(Clone)]
pub struct StridedIndex<'a> {
    next: Option<usize>,
    multi_index: Vec<usize>,
    dims: &'a [usize],
    strides: &'a [usize],
}

impl<'a> StridedIndex<'a> {
    pub fn new(layout: &'a Layout) -> Self {
        Self::starting_at(layout, 0)
    }

    /// Starts at the element with row-major position `linear`.
    pub fn starting_at(layout: &'a Layout, linear: usize) -> Self {
        let (dims, strides) = (layout.dims(), layout.strides());
        let mut multi_index = vec![0; dims.len()];
        let mut rem = linear;
        let mut offset = layout.start_offset();
        for i in (0..dims.len()).rev() {
            multi_index[i] = rem % dims[i].max(1);
            rem /= dims[i].max(1);
            offset += multi_index[i] * strides[i];
        }
        let empty = layout.shape().elem_count() <= linear;
        StridedIndex { next: (!empty).then_some(offset), multi_index, dims, strides }
    }
}

impl Iterator for StridedIndex<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        let mut offset = current;
        let mut done = true;
        for i in (0..self.dims.len()).rev() {
            if self.multi_index[i] + 1 < self.dims[i] {
                self.multi_index[i] += 1;
                offset += self.strides[i];
                done = false;
                break;
            }
            offset -= self.multi_index[i] * self.strides[i];
            self.multi_index[i] = 0;
        }
        self.next = (!done).then_some(offset);
        Some(current)
    }
}

/// A layout seen as rows along its last dim: `outer` walks the row starts, and a row holds
/// `len` elements `stride` apart. Kernels loop over a row with a plain (often contiguous,
/// so vectorized) inner loop instead of updating a multi-index per element.
pub struct Rows {
    pub outer: Layout,
    pub len: usize,
    pub stride: usize,
}

pub fn rows(layout: &Layout) -> Rows {
    let (dims, strides) = (layout.dims(), layout.strides());
    let Some((&len, outer_dims)) = dims.split_last() else {
        return Rows { outer: Layout::new(vec![].into(), vec![], layout.start_offset()), len: 1, stride: 1 };
    };
    let outer = Layout::new(outer_dims.to_vec().into(), strides[..dims.len() - 1].to_vec(), layout.start_offset());
    Rows { outer, len, stride: strides[dims.len() - 1] }
}

/// Walks `N` same-shape layouts split into rows, over the row-major positions
/// `first..first + count`: calls `f(k, starts, col, take)` for each piece of a row, where
/// `starts[i]` is the storage offset of the row in layout `i`, the piece begins at column
/// `col`, and it fills output positions `k..k + take` (counted from `first`).
pub fn for_each_row_piece<const N: usize>(
    rows: [&Rows; N],
    first: usize,
    count: usize,
    mut f: impl FnMut(usize, [usize; N], usize, usize),
) {
    let len = rows.first().map_or(1, |r| r.len);
    if len == 0 {
        return;
    }
    let mut starts = rows.map(|r| StridedIndex::starting_at(&r.outer, first / len));
    let (mut col, mut k) = (first % len, 0);
    while k < count {
        let mut row = [0; N];
        for (slot, it) in row.iter_mut().zip(starts.iter_mut()) {
            let Some(start) = it.next() else { return };
            *slot = start;
        }
        let take = (len - col).min(count - k);
        f(k, row, col, take);
        k += take;
        col = 0;
    }
}
