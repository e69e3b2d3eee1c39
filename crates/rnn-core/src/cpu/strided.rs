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

/// The layout as runs of `block_len` contiguous elements; `starts` gives each run's offset.
pub struct Blocks {
    pub block_len: usize,
    /// Layout of the run starts (the leading dims that are not merged into a run).
    pub outer: Layout,
}

/// Merges the trailing dims whose strides are row-major into one contiguous run.
pub fn blocks(layout: &Layout) -> Blocks {
    let (dims, strides) = (layout.dims(), layout.strides());
    let mut block_len = 1;
    let mut split = dims.len();
    while split > 0 {
        let d = split - 1;
        if dims[d] != 1 && strides[d] != block_len {
            break;
        }
        block_len *= dims[d];
        split = d;
    }
    let outer = Layout::new(dims[..split].to_vec().into(), strides[..split].to_vec(), layout.start_offset());
    Blocks { block_len, outer }
}
