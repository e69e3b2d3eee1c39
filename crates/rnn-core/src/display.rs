//! `Display` for tensors, laid out like PyTorch's printer: nested brackets following the
//! shape, aligned columns, floats with 4 decimals (scientific notation when the magnitudes
//! call for it), and a summary with `...` for tensors of more than 1000 elements. The
//! values are followed by the `Debug` header, e.g. for a `[2, 3]` f32 tensor:
//!
//! ```text
//! [[ 1.0000, -2.5000,  3.0000],
//!  [ 4.0000,  5.0000, -6.0000]]
//! Tensor[[2, 3], f32, cpu]
//! ```
//!
//! `{:.2}` sets the number of decimals. Printing never panics: when the values cannot be
//! read (a device error, say), the error text is printed in their place.

use std::fmt;

use crate::{DType, Result, Tensor};

/// Tensors with more elements than this are summarized (PyTorch's `threshold`).
const THRESHOLD: usize = 1000;
/// Entries kept at each end of a summarized dim (PyTorch's `edgeitems`).
const EDGE: usize = 3;
/// Vectors wrap to stay within this many columns (PyTorch's `linewidth`).
const LINE_WIDTH: usize = 80;
const DEFAULT_PRECISION: usize = 4;

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.values_str(f.precision().unwrap_or(DEFAULT_PRECISION)) {
            Ok(values) => f.write_str(&values)?,
            Err(e) => write!(f, "<error: {e}>")?,
        }
        write!(f, "\n{self:?}")
    }
}

impl Tensor {
    /// The values part of the display: everything but the header line.
    fn values_str(&self, precision: usize) -> Result<String> {
        if self.elem_count() == 0 {
            return Ok("[]".to_string());
        }
        let summarize = self.elem_count() > THRESHOLD;
        let elided: Vec<bool> = self.dims().iter().map(|&d| summarize && d > 2 * EDGE).collect();
        let data = edges(&self.detach(), &elided)?;
        let cells = format_cells(&data, precision)?;
        if cells.len() != data.elem_count() {
            let msg = format!("read {} values for shape {:?}", cells.len(), data.shape());
            return Err(crate::Error::invalid("display", msg));
        }
        let grid = Grid { dims: data.dims(), elided: &elided, cells: &cells };
        Ok(grid.block(0, 0, 0))
    }
}

/// Only the first and last `EDGE` entries of each elided dim: the elements to print.
/// The largest dims go first, so that each copy is as small as it can be.
fn edges(t: &Tensor, elided: &[bool]) -> Result<Tensor> {
    let mut order: Vec<usize> = (0..t.rank()).filter(|&d| elided[d]).collect();
    order.sort_by_key(|&d| std::cmp::Reverse(t.dims()[d]));
    let mut t = t.clone();
    for d in order {
        let n = t.dims()[d];
        t = Tensor::cat(&[t.narrow(d, 0, EDGE)?, t.narrow(d, n - EDGE, EDGE)?], d)?;
    }
    Ok(t)
}

/// Every element as text, in row-major order, right-aligned to one common width.
fn format_cells(t: &Tensor, precision: usize) -> Result<Vec<String>> {
    let cells: Vec<String> = if t.dtype().is_float() {
        let values = t.to_f64_vec()?;
        let sci = needs_scientific(&values);
        values.iter().map(|&v| format_float(v, precision, sci)).collect()
    } else {
        // Converted on the host: a GPU backend may keep i64 in 32 bits.
        let host = t.detach().to_device(crate::Device::Cpu)?;
        host.to_dtype(DType::I64)?.to_vec::<i64>()?.iter().map(i64::to_string).collect()
    };
    let width = cells.iter().map(String::len).max().unwrap_or(0);
    Ok(cells.into_iter().map(|c| format!("{c:>width$}")).collect())
}

/// PyTorch's rule: scientific notation when the non-zero finite magnitudes span more than
/// three orders, exceed 1e8, or go below 1e-4.
fn needs_scientific(values: &[f64]) -> bool {
    let mags = values.iter().filter(|v| v.is_finite() && **v != 0.0).map(|v| v.abs());
    let (min, max) = mags.fold((f64::INFINITY, 0.0f64), |(lo, hi), m| (lo.min(m), hi.max(m)));
    max > 0.0 && (max / min > 1000.0 || max > 1e8 || min < 1e-4)
}

/// `v` with `precision` decimals, as Python writes it: `nan`, and exponents like `e-08`.
fn format_float(v: f64, precision: usize, sci: bool) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if !sci || v.is_infinite() {
        return format!("{v:.precision$}");
    }
    let s = format!("{v:.precision$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
}

/// The printed elements (`cells`, row-major over `dims`) and which dims print `...`
/// after their first `EDGE` entries.
struct Grid<'a> {
    dims: &'a [usize],
    elided: &'a [bool],
    cells: &'a [String],
}

impl Grid<'_> {
    /// The sub-tensor at `dim` whose first element is `cells[offset]`, as text whose
    /// continuation lines are indented by `indent` (the column of its `[`).
    fn block(&self, dim: usize, offset: usize, indent: usize) -> String {
        if dim == self.dims.len() {
            return self.cells[offset].clone();
        }
        let stride: usize = self.dims[dim + 1..].iter().product();
        let last = dim + 1 == self.dims.len();
        let part = |i: usize| {
            if last {
                self.cells[offset + i].clone()
            } else {
                self.block(dim + 1, offset + i * stride, indent + 1)
            }
        };
        let mut parts: Vec<String> = (0..self.dims[dim]).map(part).collect();
        if self.elided[dim] {
            parts.insert(EDGE, if last { " ..." } else { "..." }.to_string());
        }
        let pad = " ".repeat(indent + 1);
        if last {
            return format!("[{}]", self.wrap(&parts, indent).join(&format!(",\n{pad}")));
        }
        let newlines = "\n".repeat(self.dims.len() - dim - 1);
        format!("[{}]", parts.join(&format!(",{newlines}{pad}")))
    }

    /// The entries of a vector joined with `, `, as many per line as fit in `LINE_WIDTH`.
    fn wrap(&self, parts: &[String], indent: usize) -> Vec<String> {
        let cell_width = self.cells.first().map_or(1, String::len) + 2;
        let per_line = (LINE_WIDTH.saturating_sub(indent) / cell_width).max(1);
        parts.chunks(per_line).map(|line| line.join(", ")).collect()
    }
}
