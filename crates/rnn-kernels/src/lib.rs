//! Kernel sources only: CUDA C under `cuda/` and WGSL under `wgsl/`, exposed as string
//! constants and compiled at run time by the backends (NVRTC, wgpu). No build script.
//!
//! WGSL sources are templates: `{{name}}` placeholders (element types, op expressions) are
//! filled by the wgpu backend from the op table before compiling. Every kernel reads its
//! sizes and layouts from binding 0 (`info`, an array of u32) through the helpers in
//! `common.wgsl`, which is prepended to each kernel.

/// WGSL kernel templates for the wgpu backend.
pub mod wgsl {
    /// Shared helpers: the `info` binding, strided indexing, thread ids, erf, casts.
    pub const COMMON: &str = include_str!("../wgsl/common.wgsl");
    /// Fill a buffer with one value.
    pub const FILL: &str = include_str!("../wgsl/fill.wgsl");
    /// Strided read, convert, strided write: copies, casts and `cat`.
    pub const COPY: &str = include_str!("../wgsl/copy.wgsl");
    /// Elementwise op of one input (`{{expr}}` from the op table).
    pub const UNARY: &str = include_str!("../wgsl/unary.wgsl");
    /// Elementwise op of two broadcast inputs (`{{expr}}` from the op table).
    pub const BINARY: &str = include_str!("../wgsl/binary.wgsl");
    /// Comparison of two inputs to a u8 (stored as u32) mask.
    pub const CMP: &str = include_str!("../wgsl/cmp.wgsl");
    /// `cond ? t : f` elementwise.
    pub const WHERE: &str = include_str!("../wgsl/where.wgsl");
    /// Sum / max / min / argmax / argmin of each output over its reduced elements.
    pub const REDUCE: &str = include_str!("../wgsl/reduce.wgsl");
    /// Softmax or log-softmax along the last dim, one workgroup per row.
    pub const SOFTMAX: &str = include_str!("../wgsl/softmax.wgsl");
    /// `gather` along one dim, with its ids range-checked (`index_select` runs it too, with
    /// the ids broadcast).
    pub const GATHER: &str = include_str!("../wgsl/gather.wgsl");
    /// `scatter_add` along one dim (atomic adds).
    pub const SCATTER_ADD: &str = include_str!("../wgsl/scatter_add.wgsl");
    /// Register-blocked tiled batched matmul, staging k-slices in workgroup memory (GPUs).
    pub const MATMUL: &str = include_str!("../wgsl/matmul.wgsl");
    /// Batched matmul for CPU adapters: a large block of outputs per invocation, no
    /// workgroup memory; its unrolled statements and access mode are filled in by the plan
    /// builder.
    pub const MATMUL_UNIT: &str = include_str!("../wgsl/matmul_unit.wgsl");
    /// `MATMUL_UNIT`'s access mode for 4-aligned row-contiguous b: vec4 loads and stores.
    pub const MATMUL_UNIT_VEC4: &str = include_str!("../wgsl/matmul_unit_vec4.wgsl");
    /// `MATMUL_UNIT`'s access mode for any layout of b: one element at a time.
    pub const MATMUL_UNIT_STRIDED: &str = include_str!("../wgsl/matmul_unit_strided.wgsl");
    /// Sliding windows (im2col) of `[N, C, H, W]`.
    pub const UNFOLD2D: &str = include_str!("../wgsl/unfold2d.wgsl");
    /// The adjoint of `UNFOLD2D`: window elements summed back into place.
    pub const FOLD2D: &str = include_str!("../wgsl/fold2d.wgsl");
    /// Optimizer updates (SGD, Adam / AdamW, RMSprop, Adagrad) of one parameter, in place.
    pub const OPTIM: &str = include_str!("../wgsl/optim.wgsl");

    // ---- fused LayerNorm / RMSNorm, softmax-cross-entropy, bias + GELU ----

    /// LayerNorm / RMSNorm forward, one workgroup per row, saving mean and rstd.
    pub const NORM: &str = include_str!("../wgsl/norm.wgsl");
    /// LayerNorm / RMSNorm input gradient, one workgroup per row.
    pub const NORM_BACKWARD: &str = include_str!("../wgsl/norm_backward.wgsl");
    /// LayerNorm / RMSNorm weight and bias gradients, one invocation per column.
    pub const NORM_PARAMS: &str = include_str!("../wgsl/norm_params.wgsl");
    /// Softmax-cross-entropy from logits: per-row loss and log-sum-exp, ids range-checked.
    pub const CROSS_ENTROPY: &str = include_str!("../wgsl/cross_entropy.wgsl");
    /// Softmax-cross-entropy gradient from the logits and the saved log-sum-exp.
    pub const CROSS_ENTROPY_BACKWARD: &str = include_str!("../wgsl/cross_entropy_backward.wgsl");
    /// `gelu(x + b)` and its gradient, elementwise with a broadcast bias.
    pub const BIAS_GELU: &str = include_str!("../wgsl/bias_gelu.wgsl");

    // ---- Scaled dot-product attention (fused/attention/gpu.rs) ----
    /// Fused attention's forward: the shared part, then the pass.
    pub const ATTENTION_FWD: &str =
        concat!(include_str!("../wgsl/attention_common.wgsl"), include_str!("../wgsl/attention_fwd.wgsl"));
    /// Fused attention's backward dq pass (also writes delta = rowsum(dO * O)).
    pub const ATTENTION_BWD_DQ: &str =
        concat!(include_str!("../wgsl/attention_common.wgsl"), include_str!("../wgsl/attention_bwd_dq.wgsl"));
    /// Fused attention's backward dk / dv pass (and the bias gradient).
    pub const ATTENTION_BWD_DKDV: &str =
        concat!(include_str!("../wgsl/attention_common.wgsl"), include_str!("../wgsl/attention_bwd_dkdv.wgsl"));
}

/// CUDA C kernel templates for the CUDA backend, compiled by NVRTC for the device's own
/// architecture at first use.
pub mod cuda {
    /// Shared helpers: `Info`, strided indexing, thread ids, half-type conversions, casts.
    pub const COMMON: &str = include_str!("../cuda/common.cuh");
    /// Fill a buffer with one value.
    pub const FILL: &str = include_str!("../cuda/fill.cu");
    /// Strided read, convert, strided write: copies, casts and `cat`.
    pub const COPY: &str = include_str!("../cuda/copy.cu");
    /// Elementwise op of one input (`{{expr}}` from the op table).
    pub const UNARY: &str = include_str!("../cuda/unary.cu");
    /// Elementwise op of two broadcast inputs (`{{expr}}` from the op table).
    pub const BINARY: &str = include_str!("../cuda/binary.cu");
    /// Comparison of two inputs to a u8 mask.
    pub const CMP: &str = include_str!("../cuda/cmp.cu");
    /// `cond ? t : f` elementwise.
    pub const WHERE: &str = include_str!("../cuda/where.cu");
    /// Sum / max / min / argmax / argmin with warp shuffles.
    pub const REDUCE: &str = include_str!("../cuda/reduce.cu");
    /// Softmax or log-softmax along the last dim, one block per row.
    pub const SOFTMAX: &str = concat!(include_str!("../cuda/block_reduce.cuh"), include_str!("../cuda/softmax.cu"));
    /// `gather` (and `index_select`) with range-checked ids.
    pub const GATHER: &str = include_str!("../cuda/gather.cu");
    /// `scatter_add` with atomic adds.
    pub const SCATTER_ADD: &str = include_str!("../cuda/scatter_add.cu");
    /// Sliding windows (im2col) of `[N, C, H, W]`.
    pub const UNFOLD2D: &str = include_str!("../cuda/unfold2d.cu");
    /// The adjoint of `UNFOLD2D`.
    pub const FOLD2D: &str = include_str!("../cuda/fold2d.cu");
    /// Optimizer updates (SGD, Adam / AdamW, RMSprop, Adagrad) of many parameters in one
    /// launch, in place, through a table of buffer addresses (multi-tensor apply).
    pub const OPTIM: &str = include_str!("../cuda/optim.cu");

    // ---- fused LayerNorm / RMSNorm, softmax-cross-entropy, bias + GELU ----

    /// LayerNorm / RMSNorm forward, one block per row, saving mean and rstd.
    pub const NORM: &str = concat!(include_str!("../cuda/block_reduce.cuh"), include_str!("../cuda/norm.cu"));
    /// LayerNorm / RMSNorm input gradient, one block per row.
    pub const NORM_BACKWARD: &str =
        concat!(include_str!("../cuda/block_reduce.cuh"), include_str!("../cuda/norm_backward.cu"));
    /// LayerNorm / RMSNorm weight and bias gradients, one thread per column.
    pub const NORM_PARAMS: &str = include_str!("../cuda/norm_params.cu");
    /// Softmax-cross-entropy from logits: per-row loss and log-sum-exp, ids range-checked.
    pub const CROSS_ENTROPY: &str =
        concat!(include_str!("../cuda/block_reduce.cuh"), include_str!("../cuda/cross_entropy.cu"));
    /// Softmax-cross-entropy gradient from the logits and the saved log-sum-exp.
    pub const CROSS_ENTROPY_BACKWARD: &str = include_str!("../cuda/cross_entropy_backward.cu");
    /// `gelu(x + b)` and its gradient, elementwise with a broadcast bias.
    pub const BIAS_GELU: &str = include_str!("../cuda/bias_gelu.cu");

    // ---- Scaled dot-product attention (fused/attention/gpu.rs) ----
    /// Fused attention, FlashAttention-2 style: the forward and the two backward passes
    /// (dq; dk, dv and the bias gradient), selected by the `{{pass}}` placeholder.
    pub const ATTENTION: &str = concat!(
        include_str!("../cuda/mma.cuh"),
        include_str!("../cuda/attention.cu"),
        include_str!("../cuda/attention_mma.cu")
    );

    /// Every template, by name (for compile checks).
    pub const ALL: &[(&str, &str)] = &[
        ("fill", FILL),
        ("copy", COPY),
        ("unary", UNARY),
        ("binary", BINARY),
        ("cmp", CMP),
        ("where", WHERE),
        ("reduce", REDUCE),
        ("softmax", SOFTMAX),
        ("gather", GATHER),
        ("scatter_add", SCATTER_ADD),
        ("unfold2d", UNFOLD2D),
        ("fold2d", FOLD2D),
        ("optim", OPTIM),
        ("norm", NORM),
        ("norm_backward", NORM_BACKWARD),
        ("norm_params", NORM_PARAMS),
        ("cross_entropy", CROSS_ENTROPY),
        ("cross_entropy_backward", CROSS_ENTROPY_BACKWARD),
        ("bias_gelu", BIAS_GELU),
        ("attention", ATTENTION),
    ];
}
