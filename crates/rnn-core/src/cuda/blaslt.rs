//! cuBLASLt through cudarc's `cublaslt::result` / `sys` layer (the safe wrapper fixes f32 to
//! TF32, has no f64 and allocates its own workspace). One handle per device, created on first
//! use with a workspace buffer from the device's pool; every product is one `cublasLtMatmul`
//! call on the device's stream (strided batches included), with the algorithm chosen by
//! cuBLASLt's heuristic once per problem description and cached.
//!
//! What to multiply is a `GemmLaunch` (`gpu/gemm.rs`, shared with the host emulator): each
//! operand as the column-major matrix it is in memory, whether cuBLASLt must transpose it,
//! and the alignment every batch entry keeps.

use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys;

use super::context::{driver_err, CudaDevice};
use super::libs;
use super::pool::{alloc, PooledBuffer};
use crate::gpu::gemm::{GemmLaunch, Matrix};
use crate::gpu::GemmOutcome;
use crate::op_table::Epilogue;
use crate::{DType, Error, Result};

/// (element type, compute type, scale type) of a product of `dtype`: f16 and bf16
/// accumulate in f32.
fn types(dtype: DType) -> Option<(sys::cudaDataType, sys::cublasComputeType_t, sys::cudaDataType)> {
    use sys::cublasComputeType_t::*;
    use sys::cudaDataType_t::*;
    let c32 = if crate::allow_tf32() { CUBLAS_COMPUTE_32F_FAST_TF32 } else { CUBLAS_COMPUTE_32F };
    Some(match dtype {
        DType::F32 => (CUDA_R_32F, c32, CUDA_R_32F),
        DType::F16 => (CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        DType::BF16 => (CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        DType::F64 => (CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F),
        _ => return None,
    })
}

fn blas_err(ordinal: usize, what: &'static str) -> impl Fn(CublasError) -> Error {
    move |e| Error::Msg(format!("cuda:{ordinal}: cuBLASLt {what}: {:?}", e.0))
}

/// What the chosen algorithm depends on.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    dtype: DType,
    tf32: bool,
    batch: i32,
    matrices: [Matrix; 3],
    alignments: [u32; 3],
    epilogue: Option<Epilogue>,
}

/// A device's cuBLASLt handle, workspace and chosen algorithms.
struct Handle {
    raw: sys::cublasLtHandle_t,
    workspace: PooledBuffer,
    workspace_size: usize,
    /// `None`: no algorithm for the epilogue (the caller applies it separately).
    algos: HashMap<Key, Option<sys::cublasLtMatmulAlgo_t>>,
}

// SAFETY: the raw handle is only used while the device's mutex is held.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `create_handle` and is destroyed once, here.
        let _ = unsafe { lt::destroy_handle(self.raw) };
    }
}

/// The handle of `dev`, created on first use.
fn handle(dev: &Arc<CudaDevice>) -> Result<Arc<Mutex<Handle>>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Mutex<Handle>>>>> = OnceLock::new();
    libs::cublaslt()?;
    let mut handles = HANDLES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(h) = handles.get(&dev.ordinal) {
        return Ok(h.clone());
    }
    // NVIDIA's recommended workspace: 32 MiB on Hopper and newer, 4 MiB before.
    let workspace_size: usize = if dev.compute_capability.0 >= 9 { 32 << 20 } else { 4 << 20 };
    let workspace = alloc(dev, workspace_size as u64)?;
    dev.ctx.bind_to_thread().map_err(driver_err(dev.ordinal, "bind context"))?;
    let raw = libs::guarded("cublasLtCreate", lt::create_handle)?.map_err(blas_err(dev.ordinal, "create handle"))?;
    let h = Arc::new(Mutex::new(Handle { raw, workspace, workspace_size, algos: HashMap::new() }));
    handles.insert(dev.ordinal, h.clone());
    Ok(h)
}

struct MatrixLayout(sys::cublasLtMatrixLayout_t);

impl Drop for MatrixLayout {
    fn drop(&mut self) {
        // SAFETY: created by `create_matrix_layout`, destroyed once.
        let _ = unsafe { lt::destroy_matrix_layout(self.0) };
    }
}

struct MatmulDesc(sys::cublasLtMatmulDesc_t);

impl Drop for MatmulDesc {
    fn drop(&mut self) {
        // SAFETY: created by `create_matmul_desc`, destroyed once.
        let _ = unsafe { lt::destroy_matmul_desc(self.0) };
    }
}

struct MatmulPref(sys::cublasLtMatmulPreference_t);

impl Drop for MatmulPref {
    fn drop(&mut self) {
        // SAFETY: created by `create_matmul_pref`, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

fn as_void<T>(value: &T) -> *const c_void {
    (value as *const T).cast()
}

fn matrix_layout(ty: sys::cudaDataType, m: &Matrix, batch: i32) -> std::result::Result<MatrixLayout, CublasError> {
    use sys::cublasLtMatrixLayoutAttribute_t::*;
    let layout = MatrixLayout(lt::create_matrix_layout(ty, m.rows, m.cols, m.ld)?);
    if batch > 1 {
        // SAFETY: the layout is live; the attribute types are int32 and int64 as documented.
        unsafe {
            lt::set_matrix_layout_attribute(layout.0, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, as_void(&batch), 4)?;
            let stride: i64 = m.batch_stride;
            lt::set_matrix_layout_attribute(
                layout.0,
                CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                as_void(&stride),
                8,
            )?;
        }
    }
    Ok(layout)
}

fn matmul_desc(
    g: &GemmLaunch,
    compute: sys::cublasComputeType_t,
    scale: sys::cudaDataType,
    bias: Option<(Epilogue, u64)>,
) -> std::result::Result<MatmulDesc, CublasError> {
    use sys::cublasLtEpilogue_t::*;
    use sys::cublasLtMatmulDescAttributes_t::*;
    let desc = MatmulDesc(lt::create_matmul_desc(compute, scale)?);
    // cublasOperation_t: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
    let (ta, tb) = (g.a.matrix.trans as i32, g.b.matrix.trans as i32);
    // SAFETY: the descriptor is live; each value has the type its attribute documents
    // (int32 operations, uint32 epilogue, a device pointer for the bias).
    unsafe {
        lt::set_matmul_desc_attribute(desc.0, CUBLASLT_MATMUL_DESC_TRANSA, as_void(&ta), size_of::<i32>())?;
        lt::set_matmul_desc_attribute(desc.0, CUBLASLT_MATMUL_DESC_TRANSB, as_void(&tb), size_of::<i32>())?;
        if let Some((act, ptr)) = bias {
            let epilogue = match act {
                Epilogue::None => CUBLASLT_EPILOGUE_BIAS,
                Epilogue::Relu => CUBLASLT_EPILOGUE_RELU_BIAS,
                Epilogue::Gelu => CUBLASLT_EPILOGUE_GELU_BIAS,
            };
            let size = size_of::<sys::cublasLtEpilogue_t>();
            lt::set_matmul_desc_attribute(desc.0, CUBLASLT_MATMUL_DESC_EPILOGUE, as_void(&epilogue), size)?;
            let ptr = ptr as usize as *const c_void;
            lt::set_matmul_desc_attribute(
                desc.0,
                CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                as_void(&ptr),
                size_of::<usize>(),
            )?;
        }
    }
    Ok(desc)
}

fn matmul_pref(workspace: usize, alignments: [u32; 3]) -> std::result::Result<MatmulPref, CublasError> {
    use sys::cublasLtMatmulPreferenceAttributes_t::*;
    let pref = MatmulPref(lt::create_matmul_pref()?);
    let workspace = workspace as u64;
    let [a, b, d] = alignments;
    // SAFETY: the preference is live; uint64 workspace bytes and uint32 alignments.
    unsafe {
        lt::set_matmul_pref_attribute(pref.0, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, as_void(&workspace), 8)?;
        for (attr, bytes) in [
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d),
            (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d),
        ] {
            lt::set_matmul_pref_attribute(pref.0, attr, as_void(&bytes), 4)?;
        }
    }
    Ok(pref)
}

/// The device addresses of a product's operands: a, b, d and the bias.
pub(crate) struct Pointers {
    pub a: u64,
    pub b: u64,
    pub d: u64,
    pub bias: Option<u64>,
}

/// Enqueues `g` on `dev`'s stream. Batches past `i32::MAX` products are split.
pub(crate) fn run(dev: &Arc<CudaDevice>, g: &GemmLaunch, p: &Pointers) -> Result<GemmOutcome> {
    let (ty, compute, scale) =
        types(g.dtype).ok_or(Error::UnsupportedDType { op: "matmul", dtype: g.dtype, hint: ": use a float dtype" })?;
    let h = handle(dev)?;
    let mut h = h.lock().unwrap_or_else(|p| p.into_inner());
    dev.ctx.bind_to_thread().map_err(driver_err(dev.ordinal, "bind context"))?;
    let size = g.dtype.size_in_bytes() as u64;
    let mut start = 0;
    while start < g.batch {
        let count = (g.batch - start).min(i32::MAX as usize);
        let at = |ptr: u64, m: &Matrix| ptr + start as u64 * m.batch_stride as u64 * size;
        let ptrs = [at(p.a, &g.a.matrix), at(p.b, &g.b.matrix), at(p.d, &g.d.matrix)];
        let bias = g.bias.zip(p.bias).map(|((act, _, _), ptr)| (act, ptr));
        let outcome = libs::guarded("cublasLtMatmul", || {
            enqueue(dev, &mut h, g, (ptrs, bias), count as i32, (ty, compute, scale))
        })??;
        if outcome != GemmOutcome::Done {
            return Ok(outcome);
        }
        start += count;
    }
    Ok(GemmOutcome::Done)
}

fn enqueue(
    dev: &CudaDevice,
    h: &mut Handle,
    g: &GemmLaunch,
    ([a, b, d], bias): ([u64; 3], Option<(Epilogue, u64)>),
    batch: i32,
    (ty, compute, scale): (sys::cudaDataType, sys::cublasComputeType_t, sys::cudaDataType),
) -> Result<GemmOutcome> {
    let err = |what| blas_err(dev.ordinal, what);
    let alignments = g.alignments;
    let la = matrix_layout(ty, &g.a.matrix, batch).map_err(err("matrix layout"))?;
    let lb = matrix_layout(ty, &g.b.matrix, batch).map_err(err("matrix layout"))?;
    let ld = matrix_layout(ty, &g.d.matrix, batch).map_err(err("matrix layout"))?;
    let desc = matmul_desc(g, compute, scale, bias).map_err(err("matmul descriptor"))?;
    let key = Key {
        dtype: g.dtype,
        tf32: crate::allow_tf32(),
        batch,
        matrices: [g.a.matrix, g.b.matrix, g.d.matrix],
        alignments,
        epilogue: bias.map(|(e, _)| e),
    };
    let algo = match h.algos.get(&key) {
        Some(algo) => *algo,
        None => {
            let pref = matmul_pref(h.workspace_size, alignments).map_err(err("matmul preference"))?;
            // SAFETY: every descriptor is live until the end of this function.
            let found = unsafe { lt::get_matmul_algo_heuristic(h.raw, desc.0, la.0, lb.0, ld.0, ld.0, pref.0) };
            let algo = match found {
                Ok(heuristic) => Some(heuristic.algo),
                Err(CublasError(sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)) if bias.is_some() => None,
                Err(e) => {
                    // d is the transposed row-major output: its rows are the output's columns.
                    let (am, dm) = (g.a.matrix, g.d.matrix);
                    let (m, n, k) = (dm.cols, dm.rows, if am.trans { am.rows } else { am.cols });
                    return Err(Error::Msg(format!(
                        "cuda:{}: cuBLASLt found no algorithm for a {:?} product ({m} x {k} @ {k} x {n}, batch \
                         {batch}): {:?}",
                        dev.ordinal, g.dtype, e.0
                    )));
                }
            };
            h.algos.insert(key, algo);
            algo
        }
    };
    let Some(algo) = algo else {
        return Ok(GemmOutcome::EpilogueUnsupported);
    };
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta) = match g.dtype {
        DType::F64 => (as_void(&one64), as_void(&zero64)),
        _ => (as_void(&one32), as_void(&zero32)),
    };
    let (workspace, _workspace) = cudarc::driver::DevicePtr::device_ptr(h.workspace.slice(), &dev.stream);
    let stream = dev.stream.cu_stream() as sys::cudaStream_t;
    // SAFETY: the layouts describe matrices inside the operands' buffers (checked by the
    // callers against their storages), d does not overlap a or b, beta is 0 so c (= d) is not
    // read, the workspace holds `workspace_size` bytes and the scalars have the scale type.
    unsafe {
        lt::matmul(
            h.raw,
            desc.0,
            alpha,
            beta,
            a as usize as *const c_void,
            la.0,
            b as usize as *const c_void,
            lb.0,
            d as usize as *const c_void,
            ld.0,
            d as usize as *mut c_void,
            ld.0,
            &algo,
            workspace as usize as *mut c_void,
            h.workspace_size,
            stream,
        )
    }
    .map_err(err("matmul"))?;
    Ok(GemmOutcome::Done)
}
