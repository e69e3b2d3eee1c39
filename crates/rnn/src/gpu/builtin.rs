//! The built-in kernels ([`CudaKernels`]) and the seed API's kernel description
//! ([`GpuKernel`]), run by [`GpuContext::execute_kernel`].
//!
//! Each built-in is a CUDA C source with a fixed signature (below). `execute_kernel` knows a
//! built-in by its source and runs it on any GPU as the library's own op on the same
//! arguments: cuBLASLt or the WGSL tiled matmul, the element-wise kernels of the op table. The
//! CUDA C text is what the kernel computes, and compiles as it is with
//! [`KernelManager`](super::KernelManager) on a CUDA device.
//!
//! | built-in   | entry point        | arguments (f32 tensors, then `I32` / `U32` counts) |
//! |------------|--------------------|-----------------------------------------------------|
//! | `matmul`   | `matmul_kernel`    | `A, B, C (output), M, N, K, lda, ldb, ldc`: `C[r*ldc+c] = sum_k A[r*lda+k] * B[k*ldb+c]` |
//! | `add`      | `add_kernel`       | `a, b, out (output), n`                              |
//! | `multiply` | `multiply_kernel`  | `a, b, out (output), n`                              |
//! | `relu`     | `relu_kernel`      | `x, y (output), n` (NaN stays NaN, as in PyTorch)    |
//! | `sigmoid`  | `sigmoid_kernel`   | `x, y (output), n`                                   |
//! | `tanh`     | `tanh_kernel`      | `x, y (output), n`                                   |
//!
//! Element-wise built-ins use the first `n` elements of each tensor; `matmul` needs
//! `lda >= K`, `ldb >= N` and writes `C` densely (`ldc == N`). Outputs keep their elements past
//! those written.

use rnn_core::{DType, Device, Error, Result, Tensor};

use super::{CompiledKernel, GpuContext, KernelArg, KernelBackend, KernelManager, LaunchConfig};

const MATMUL: &str = r#"extern "C" __global__ void matmul_kernel(
    const float* A, const float* B, float* C,
    int M, int N, int K,
    int lda, int ldb, int ldc
) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; k++) {
            sum += A[row * lda + k] * B[k * ldb + col];
        }
        C[row * ldc + col] = sum;
    }
}
"#;

/// An element-wise CUDA kernel over `n` elements with the body `expr` (of `a`, `b` or `x`).
macro_rules! elementwise_source {
    ($entry:literal, binary, $expr:literal) => {
        concat!(
            "extern \"C\" __global__ void ",
            $entry,
            "(const float* a, const float* b, float* out, int n) {\n",
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n",
            "    if (i < n) out[i] = ",
            $expr,
            ";\n}\n"
        )
    };
    ($entry:literal, unary, $expr:literal) => {
        concat!(
            "extern \"C\" __global__ void ",
            $entry,
            "(const float* x, float* y, int n) {\n",
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n",
            "    if (i < n) y[i] = ",
            $expr,
            ";\n}\n"
        )
    };
}

/// One built-in kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Builtin {
    Matmul,
    Add,
    Multiply,
    Relu,
    Sigmoid,
    Tanh,
}

impl Builtin {
    const ALL: [Builtin; 6] =
        [Builtin::Matmul, Builtin::Add, Builtin::Multiply, Builtin::Relu, Builtin::Sigmoid, Builtin::Tanh];

    fn name(self) -> &'static str {
        match self {
            Builtin::Matmul => "matmul",
            Builtin::Add => "add",
            Builtin::Multiply => "multiply",
            Builtin::Relu => "relu",
            Builtin::Sigmoid => "sigmoid",
            Builtin::Tanh => "tanh",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Builtin::Matmul => MATMUL,
            Builtin::Add => elementwise_source!("add_kernel", binary, "a[i] + b[i]"),
            Builtin::Multiply => elementwise_source!("multiply_kernel", binary, "a[i] * b[i]"),
            // `x > 0 ? x : 0` would turn NaN into 0; PyTorch keeps it.
            Builtin::Relu => elementwise_source!("relu_kernel", unary, "(x[i] < 0.0f) ? 0.0f : x[i]"),
            Builtin::Sigmoid => elementwise_source!("sigmoid_kernel", unary, "1.0f / (1.0f + expf(-x[i]))"),
            Builtin::Tanh => elementwise_source!("tanh_kernel", unary, "tanhf(x[i])"),
        }
    }

    fn entry_point(self) -> String {
        format!("{}_kernel", self.name())
    }

    /// The built-in whose source `source` is (ignoring surrounding white space).
    fn from_source(source: &str) -> Option<Builtin> {
        Builtin::ALL.into_iter().find(|b| b.source().trim() == source.trim())
    }
}

/// The built-in kernels' CUDA C sources (see the module table for their signatures), to put
/// in a [`GpuKernel`] and run with [`GpuContext::execute_kernel`] on any GPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct CudaKernels;

impl CudaKernels {
    /// `matmul_kernel(A, B, C, M, N, K, lda, ldb, ldc)`: `C = A B` for row-major f32 matrices.
    pub fn matmul() -> String {
        Builtin::Matmul.source().to_string()
    }
    /// `add_kernel(a, b, out, n)`.
    pub fn add() -> String {
        Builtin::Add.source().to_string()
    }
    /// `multiply_kernel(a, b, out, n)`.
    pub fn multiply() -> String {
        Builtin::Multiply.source().to_string()
    }
    /// `relu_kernel(x, y, n)`.
    pub fn relu() -> String {
        Builtin::Relu.source().to_string()
    }
    /// `sigmoid_kernel(x, y, n)`.
    pub fn sigmoid() -> String {
        Builtin::Sigmoid.source().to_string()
    }
    /// `tanh_kernel(x, y, n)`.
    pub fn tanh() -> String {
        Builtin::Tanh.source().to_string()
    }

    /// The names of the built-ins: `matmul`, `add`, `multiply`, `relu`, `sigmoid`, `tanh`.
    pub fn names() -> Vec<&'static str> {
        Builtin::ALL.iter().map(|b| b.name()).collect()
    }

    /// The built-in `name` as a ready [`GpuKernel`] (its source and entry point), if it exists.
    pub fn kernel(name: &str) -> Option<GpuKernel> {
        let b = Builtin::ALL.into_iter().find(|b| b.name() == name)?;
        Some(GpuKernel {
            name: b.name().to_string(),
            source: b.source().to_string(),
            entry_point: b.entry_point(),
            ..GpuKernel::default()
        })
    }
}

/// A kernel to run with [`GpuContext::execute_kernel`]: a built-in's source from
/// [`CudaKernels`], or your own CUDA C / WGSL.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuKernel {
    pub name: String,
    pub source: String,
    /// The `__global__` function (CUDA) or `@compute` function (WGSL) to run.
    pub entry_point: String,
    /// The kernel as `KernelManager::compile_kernel` compiled it, used when it was compiled
    /// for the context's device (else the source is compiled, cached by its text).
    pub compiled_binary: Option<CompiledKernel>,
    /// Threads per block (CUDA); a WGSL shader's own `@workgroup_size`, whose x must be given
    /// here too so the launch covers every element.
    pub work_group_size: (u32, u32, u32),
    /// The source's language, when neither `compiled_binary` nor the device says it.
    pub backend_handle: Option<KernelBackend>,
}

impl Default for GpuKernel {
    fn default() -> GpuKernel {
        GpuKernel {
            name: String::new(),
            source: String::new(),
            entry_point: String::new(),
            compiled_binary: None,
            work_group_size: (256, 1, 1),
            backend_handle: None,
        }
    }
}

/// `GpuContext::execute_kernel`: a built-in through the library's ops, else the user's source.
pub(super) fn execute(context: &GpuContext, kernel: &GpuKernel, args: &[KernelArg<'_>]) -> Result<()> {
    match Builtin::from_source(&kernel.source) {
        Some(b) => {
            if kernel.entry_point != b.entry_point() {
                let msg =
                    format!("the {} source's kernel is {}, not '{}'", b.name(), b.entry_point(), kernel.entry_point);
                return Err(Error::invalid("execute_kernel", msg));
            }
            rnn_core::no_grad(|| run_builtin(b, context.device(), args))
        }
        None => run_source(context, kernel, args),
    }
}

/// Compiles (or reuses) a user kernel for the context's device and launches it with one
/// thread per element of the largest output.
fn run_source(context: &GpuContext, kernel: &GpuKernel, args: &[KernelArg<'_>]) -> Result<()> {
    let device = context.device();
    let mut manager = KernelManager::for_context(context);
    let compiled = match &kernel.compiled_binary {
        Some(c) if c.device() == device => c.clone(),
        _ => {
            let backend = kernel.compiled_binary.as_ref().map(CompiledKernel::backend).or(kernel.backend_handle);
            let backend = backend.unwrap_or(if matches!(device, Device::Cuda(_)) {
                KernelBackend::Cuda
            } else {
                KernelBackend::Wgsl
            });
            let entry = if kernel.entry_point.is_empty() { &kernel.name } else { &kernel.entry_point };
            manager.compile_kernel_with_entry(&kernel.name, &kernel.source, &backend.to_string(), entry)?
        }
    };
    let outputs = args.iter().filter_map(|a| if let KernelArg::Output(t) = a { Some(t.elem_count()) } else { None });
    let Some(threads) = outputs.max() else {
        return Err(Error::invalid("execute_kernel", "the kernel has no output tensor (KernelArg::output)"));
    };
    let (x, y, z) = kernel.work_group_size;
    if x == 0 || y == 0 || z == 0 {
        return Err(Error::invalid("execute_kernel", format!("work_group_size {:?} has a zero", (x, y, z))));
    }
    let blocks = threads.div_ceil(x as usize).clamp(1, u32::MAX as usize) as u32;
    manager.execute(&compiled, args, LaunchConfig::new((blocks, 1, 1), (x, y, z)))
}

/// Runs a built-in as the library's op on `device`.
fn run_builtin(b: Builtin, device: Device, args: &[KernelArg<'_>]) -> Result<()> {
    let arity = match b {
        Builtin::Matmul => 9,
        Builtin::Add | Builtin::Multiply => 4,
        Builtin::Relu | Builtin::Sigmoid | Builtin::Tanh => 3,
    };
    if args.len() != arity {
        let msg = format!("the {} kernel takes {arity} arguments, {} given", b.name(), args.len());
        return Err(Error::invalid("execute_kernel", msg));
    }
    let args = Args { args, device, kernel: b.name() };
    match b {
        Builtin::Matmul => run_matmul(&args),
        Builtin::Add | Builtin::Multiply => {
            let n = args.count(3)?;
            let (a, c) = (args.prefix(0, n)?, args.prefix(1, n)?);
            let out = if b == Builtin::Add { a.add(&c)? } else { a.mul(&c)? };
            write_prefix(args.tensor(2, true)?, &out)
        }
        Builtin::Relu | Builtin::Sigmoid | Builtin::Tanh => {
            let x = args.prefix(0, args.count(2)?)?;
            let y = match b {
                Builtin::Relu => x.relu()?,
                Builtin::Sigmoid => x.sigmoid()?,
                _ => x.tanh()?,
            };
            write_prefix(args.tensor(1, true)?, &y)
        }
    }
}

/// `C[r*ldc + c] = sum_k A[r*lda + k] * B[k*ldb + c]`.
fn run_matmul(args: &Args<'_, '_>) -> Result<()> {
    let [m, n, k, lda, ldb, ldc] = [3, 4, 5, 6, 7, 8].map(|i| args.count(i));
    let (m, n, k, lda, ldb, ldc) = (m?, n?, k?, lda?, ldb?, ldc?);
    if lda < k || ldb < n || ldc != n {
        let msg =
            format!("matmul needs lda >= K, ldb >= N and ldc == N (M={m} N={n} K={k} lda={lda} ldb={ldb} ldc={ldc})");
        return Err(Error::invalid("execute_kernel", msg));
    }
    let a = args.matrix(0, m, k, lda)?;
    let b = args.matrix(1, k, n, ldb)?;
    write_prefix(args.tensor(2, true)?, &a.matmul(&b)?)
}

/// A built-in's arguments, checked as they are read.
struct Args<'s, 'a> {
    args: &'s [KernelArg<'a>],
    device: Device,
    kernel: &'static str,
}

impl Args<'_, '_> {
    /// Argument `i`, which must be an f32 tensor on the device (an output if `output`).
    fn tensor(&self, i: usize, output: bool) -> Result<&Tensor> {
        let t = match (self.args[i], output) {
            (KernelArg::Input(t), false) | (KernelArg::Output(t), true) => t,
            (other, _) => {
                let want = if output { "an output tensor" } else { "an input tensor" };
                let msg = format!("argument {i} of {} must be {want}, got {other:?}", self.kernel);
                return Err(Error::invalid("execute_kernel", msg));
            }
        };
        if t.device() != self.device {
            return Err(Error::DeviceMismatch { op: "execute_kernel", lhs: t.device(), rhs: self.device });
        }
        if t.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch { op: "execute_kernel", lhs: t.dtype(), rhs: DType::F32 });
        }
        Ok(t)
    }

    /// Argument `i`, a non-negative `I32` or `U32` count.
    fn count(&self, i: usize) -> Result<usize> {
        match self.args[i] {
            KernelArg::U32(v) => Ok(v as usize),
            KernelArg::I32(v) if v >= 0 => Ok(v as usize),
            other => {
                let msg = format!("argument {i} of {} must be a non-negative I32 or U32, got {other:?}", self.kernel);
                Err(Error::invalid("execute_kernel", msg))
            }
        }
    }

    /// The first `n` elements of input `i`, flat.
    fn prefix(&self, i: usize, n: usize) -> Result<Tensor> {
        let flat = self.tensor(i, false)?.flatten_all()?;
        if flat.elem_count() < n {
            let msg = format!("argument {i} of {} has {} elements, n = {n}", self.kernel, flat.elem_count());
            return Err(Error::invalid("execute_kernel", msg));
        }
        flat.narrow(0, 0, n)
    }

    /// Input `i` read as a `rows x cols` matrix whose rows start `ld` elements apart.
    fn matrix(&self, i: usize, rows: usize, cols: usize, ld: usize) -> Result<Tensor> {
        if rows == 0 || cols == 0 {
            return Tensor::zeros((rows, cols), DType::F32, self.device);
        }
        let flat = self.tensor(i, false)?.flatten_all()?;
        let needed = (rows - 1) * ld + cols;
        if flat.elem_count() < needed {
            let msg = format!("argument {i} of {} has {} elements, {needed} needed", self.kernel, flat.elem_count());
            return Err(Error::invalid("execute_kernel", msg));
        }
        // Pad the last row to a whole `ld` so the buffer reshapes to rows x ld.
        let padded = if flat.elem_count() >= rows * ld {
            flat.narrow(0, 0, rows * ld)?
        } else {
            let pad = Tensor::zeros(rows * ld - flat.elem_count(), DType::F32, self.device)?;
            Tensor::cat(&[flat, pad], 0)?
        };
        padded.reshape((rows, ld))?.narrow(1, 0, cols)
    }
}

/// Writes `values` over the first elements of `out` (row-major order), keeping the rest.
fn write_prefix(out: &Tensor, values: &Tensor) -> Result<()> {
    let (len, n) = (out.elem_count(), values.elem_count());
    if n > len {
        let msg = format!("the output has {len} elements, {n} are written");
        return Err(Error::invalid("execute_kernel", msg));
    }
    let values = values.flatten_all()?;
    let whole = if n == len {
        values
    } else {
        let rest = out.flatten_all()?.narrow(0, n, len - n)?.contiguous()?;
        Tensor::cat(&[values, rest], 0)?
    };
    out.assign(&whole.reshape(out.dims())?.contiguous()?)
}
