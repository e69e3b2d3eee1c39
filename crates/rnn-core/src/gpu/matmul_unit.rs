//! The matmul kernel of CPU adapters (`matmul_unit.wgsl`): each invocation keeps a block of
//! `ROWS x 4 * GROUPS` outputs in registers and reads its operands straight from the buffers.
//!
//! Why: on lavapipe (Mesa's Vulkan on LLVM) a load from a buffer or from workgroup memory is
//! compiled to a loop over the SIMD lanes and takes as long as ~2000 FMAs on 8-lane vectors
//! (a vec4 load about twice a scalar one), while FMAs on registers run at the CPU's peak.
//! Throughput is then set by the FMAs per load: a block of r x c outputs per invocation
//! does r * c FMAs per k step for r scalar loads of a and c / 4 vec4 loads of b. 32 x 32
//! (1024 FMAs for 40 loads) runs ~8x faster there than the 4 x 4 blocks of the
//! shared-memory kernel; larger blocks gain little more and take LLVM many seconds to
//! compile. A GPU would spill such a block from its registers, so GPUs keep `matmul.wgsl`.
//!
//! WGSL has no way to unroll a loop by itself and lavapipe does not unroll these (the
//! accumulators then live in memory, ~4x slower), so the statements over the block are
//! written out here, once per access mode, and the result is the template of the kernel.

use std::fmt::Write;
use std::sync::OnceLock;

use super::matmul::Problem;
use super::plan::KernelSource;
use super::target::Target;
use crate::{DType, Layout, Result};

/// Rows of the output block of one invocation.
const ROWS: usize = 32;
/// Column groups (4 adjacent columns each) of that block.
const GROUPS: usize = 8;
/// Invocations per workgroup, side by side along n: 8 f32 lanes fill an AVX2 register.
const LANES: usize = 8;

/// Output rows and columns of one workgroup.
pub(crate) const TILE_ROWS: usize = ROWS;
pub(crate) const TILE_COLS: usize = 4 * GROUPS * LANES;
/// Invocations per workgroup.
pub(crate) const THREADS: u32 = LANES as u32;

/// How the kernel reads b and writes the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// vec4 loads and stores: b's rows contiguous, every offset a multiple of 4, n too.
    Vec4,
    /// One element at a time through b's strides: any layout, any n.
    Strided,
}

impl Access {
    pub const ALL: [Access; 2] = [Access::Vec4, Access::Strided];

    pub fn name(self) -> &'static str {
        match self {
            Access::Vec4 => "vec4",
            Access::Strided => "strided",
        }
    }

    /// `Vec4` when every vec4 of b (at a column multiple of 4) starts at a multiple of 4
    /// elements: unit column stride, and 4 dividing n, the start offset, the row stride and
    /// the stride of every batch dim (a broadcast one has stride 0).
    pub fn of(pr: &Problem, lb: &Layout) -> Access {
        let r = lb.dims().len();
        let strides = lb.strides();
        let aligned = |v: usize| v % 4 == 0;
        let batch_aligned = lb.dims()[..r - 2].iter().zip(strides).all(|(&d, &s)| d == 1 || aligned(s));
        let vec4 = strides[r - 1] == 1
            && aligned(pr.n)
            && aligned(strides[r - 2])
            && aligned(lb.start_offset())
            && batch_aligned;
        if vec4 {
            Access::Vec4
        } else {
            Access::Strided
        }
    }

    fn snippet(self) -> &'static str {
        match self {
            Access::Vec4 => rnn_kernels::wgsl::MATMUL_UNIT_VEC4,
            Access::Strided => rnn_kernels::wgsl::MATMUL_UNIT_STRIDED,
        }
    }

    /// The stored type of b and out elements (`{{T}}` is filled later).
    fn binding_type(self) -> &'static str {
        match self {
            Access::Vec4 => "vec4<{{T}}>",
            Access::Strided => "{{T}}",
        }
    }
}

/// The kernel of `access` for `dtype`.
pub(crate) fn unit_source(target: &Target, dtype: DType, access: Access) -> Result<KernelSource> {
    let t = target.elem_type("matmul", dtype)?;
    Ok(KernelSource::new(target, template(access), &[("T", t)], target.needs_half(&[dtype])))
}

/// `matmul_unit.wgsl` with the access mode and the unrolled statements filled in, built once.
fn template(access: Access) -> &'static str {
    static TEMPLATES: [OnceLock<String>; 2] = [OnceLock::new(), OnceLock::new()];
    TEMPLATES[access as usize].get_or_init(|| {
        rnn_kernels::wgsl::MATMUL_UNIT
            .replace("{{ACCESS}}", access.snippet())
            .replace("{{BT}}", access.binding_type())
            .replace("{{LANES}}", &LANES.to_string())
            .replace("{{ROWS}}", &ROWS.to_string())
            .replace("{{GROUPS}}", &GROUPS.to_string())
            .replace("{{UNROLLED_SETUP}}", &setup())
            .replace("{{UNROLLED_STEP}}", &step())
            .replace("{{UNROLLED_STORE}}", &store())
    })
}

fn block() -> impl Iterator<Item = (usize, usize)> {
    (0..ROWS).flat_map(|i| (0..GROUPS).map(move |j| (i, j)))
}

/// Row offsets of a (`ra{i}`), column offsets of b (`cb{j}`), zeroed accumulators.
fn setup() -> String {
    let mut s = String::new();
    for i in 0..ROWS {
        let _ = writeln!(s, "    let ra{i} = a_start + min(row0 + {i}u, m - 1u) * a_rs;");
    }
    for j in 0..GROUPS {
        let _ = writeln!(s, "    let cb{j} = column_offsets(g0 + {j}u * LANES);");
    }
    for (i, j) in block() {
        let _ = writeln!(s, "    var acc{i}_{j} = vec4<f32>(0.0);");
    }
    s
}

/// One k step: the block's column groups of b's row, then each row's element of a times
/// them.
fn step() -> String {
    let mut s = String::new();
    for j in 0..GROUPS {
        let _ = writeln!(s, "        let b{j} = load_b(kb, cb{j});");
    }
    for i in 0..ROWS {
        let _ = writeln!(s, "        let a{i} = vec4<f32>(f32(a[ra{i} + ka]));");
        for j in 0..GROUPS {
            let _ = writeln!(s, "        acc{i}_{j} = fma(a{i}, b{j}, acc{i}_{j});");
        }
    }
    s
}

fn store() -> String {
    let mut s = String::new();
    for (i, j) in block() {
        let _ = writeln!(s, "    store_group(base, row0 + {i}u, g0 + {j}u * LANES, acc{i}_{j});");
    }
    s
}
