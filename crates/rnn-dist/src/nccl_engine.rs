//! NCCL for CUDA tensors (feature `nccl`): an MPI (or one-process) group reduces f32 / f64
//! CUDA tensors on the GPU instead of staging them through host memory.
//!
//! One NCCL communicator per group and device, made at the first CUDA collective: rank 0
//! draws the NCCL unique id and broadcasts it over the group (MPI). Before each NCCL call
//! the ranks compare the call's header over MPI, as the host path does, so a mismatch is an
//! error rather than a hang inside NCCL. NCCL calls are queued on the device's stream
//! (ordered with every op of the device) and return at once; they have no timeout of their
//! own. Where the NCCL library is missing, CUDA tensors take the host path.
//!
//! Run on one GPU (an H200, a one-process group: `tests/collectives.rs` with
//! `RNN_REQUIRE_NCCL=1`); several GPUs are untested. CI compile-checks it.

use std::ffi::c_void;
use std::sync::Mutex;

use cudarc::nccl::{result as nccl, sys};
use rnn_core::{DType, Device, Error, KernelArg, Result, Shape, Tensor};

use crate::buffer::{header_of, Call, Collective, ReduceOp, HEADER_WORDS};
use crate::group::{Backend, ProcessGroup};
use crate::worker::{lock, Slot, Work};

/// An NCCL communicator.
struct RawComm(sys::ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it are not
// concurrent; every use here holds the `Comms` mutex.
unsafe impl Send for RawComm {}

impl Drop for RawComm {
    fn drop(&mut self) {
        // SAFETY: the communicator was made by comm_init_rank and is destroyed once.
        let _ = unsafe { nccl::comm_destroy(self.0) };
    }
}

/// A group's NCCL communicators, one per CUDA device ordinal.
#[derive(Default)]
pub(crate) struct Comms(Mutex<Vec<(usize, RawComm)>>);

impl Comms {
    /// How many communicators exist (one per device a collective has run on).
    pub(crate) fn count(&self) -> usize {
        lock(&self.0).len()
    }
}

/// Runs `collective` with NCCL when `tensor` is a non-empty f32 / f64 CUDA tensor of an MPI
/// or one-process group and NCCL can be loaded; `None` sends it down the host path.
pub(crate) fn try_tensor_collective(
    g: &ProcessGroup,
    tensor: &Tensor,
    collective: Collective,
    out_shape: &Shape,
) -> Option<Work<Tensor>> {
    let Device::Cuda(ordinal) = tensor.device() else { return None };
    let eligible = matches!(g.backend(), Backend::Mpi | Backend::Single)
        && matches!(tensor.dtype(), DType::F32 | DType::F64)
        && tensor.elem_count() > 0;
    // SAFETY: only asks the dynamic loader whether the library can be opened.
    if !eligible || !unsafe { sys::is_culib_present() } {
        return None;
    }
    let outcome = run(g, tensor, collective, out_shape, ordinal);
    Some(Work::new(Slot::filled(Ok(None)), g.shared().clone(), collective.name(), move |_| outcome))
}

fn run(g: &ProcessGroup, tensor: &Tensor, collective: Collective, out_shape: &Shape, ordinal: usize) -> Result<Tensor> {
    let len = tensor.elem_count();
    let invalid = g.check_args(collective, len);
    agree(g, collective, tensor.dtype(), len, invalid)?;
    let id = unique_id(g, ordinal)?;
    let out = Tensor::zeros(out_shape.clone(), tensor.dtype(), tensor.device())?;
    let args = [KernelArg::Input(tensor), KernelArg::Output(&out)];
    let queued = rnn_core::cuda::with_device_buffers(ordinal, &args, |stream, ptrs| -> Result<()> {
        stream.context().bind_to_thread().map_err(|e| Error::Msg(format!("binding cuda:{ordinal}: {e:?}")))?;
        let mut comms = lock(&g.nccl_comms().0);
        let comm = comm_for(&mut comms, g, ordinal, id)?;
        let (send, recv) = (ptrs[0] as *const c_void, ptrs[1] as *mut c_void);
        let dtype = if tensor.dtype() == DType::F64 {
            sys::ncclDataType_t::ncclFloat64
        } else {
            sys::ncclDataType_t::ncclFloat32
        };
        let s = stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: `send` holds `len` elements and `recv` the output's, both on this device and
        // used on this stream only (with_device_buffers); the header check above made every
        // rank agree on the call, so NCCL's counts match across ranks.
        let status = unsafe {
            match collective {
                Collective::AllReduce(op) => nccl::all_reduce(send, recv, len, dtype, red_op(op), comm, s),
                Collective::Broadcast { root } => nccl::broadcast(send, recv, len, dtype, root as i32, comm, s),
                Collective::AllGather => nccl::all_gather(send, recv, len, dtype, comm, s),
                Collective::ReduceScatter(op) => {
                    nccl::reduce_scatter(send, recv, len / g.world_size(), dtype, red_op(op), comm, s)
                }
                Collective::Barrier => return Ok(()),
            }
        };
        status.map(drop).map_err(|e| Error::Msg(format!("{}: NCCL failed: {e:?}", collective.name())))
    })?;
    queued?;
    Ok(out)
}

fn red_op(op: ReduceOp) -> sys::ncclRedOp_t {
    match op {
        ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
        ReduceOp::Mean => sys::ncclRedOp_t::ncclAvg,
    }
}

/// Compares the call's header among the ranks over the host path (see the module doc).
fn agree(g: &ProcessGroup, collective: Collective, dtype: DType, len: usize, invalid: Option<String>) -> Result<()> {
    let header = header_of(collective, Some(dtype), len, invalid.is_some());
    let words: Vec<f64> = header.iter().map(|&w| w as f64).collect();
    let all = g.all_gather_slice(&words)?;
    let mut lo = header;
    let mut hi = header;
    for rank in all.chunks(HEADER_WORDS) {
        for i in 0..HEADER_WORDS {
            lo[i] = lo[i].min(rank[i] as i64);
            hi[i] = hi[i].max(rank[i] as i64);
        }
    }
    Call { collective, buf: None, invalid }.check_agreement(&lo, &hi)
}

/// The NCCL unique id of the group's communicator on `ordinal`: drawn by rank 0 and
/// broadcast (one byte per element), the first time only.
fn unique_id(g: &ProcessGroup, ordinal: usize) -> Result<sys::ncclUniqueId> {
    let known = lock(&g.nccl_comms().0).iter().any(|(o, _)| *o == ordinal);
    let mut bytes = vec![0f64; 128];
    if !known {
        if g.is_main() {
            let id = nccl::get_uniqueid().map_err(|e| Error::Msg(format!("NCCL unique id: {e:?}")))?;
            bytes = id.internal.iter().map(|&b| b as u8 as f64).collect();
        }
        g.broadcast_slice(&mut bytes, 0)?;
    }
    Ok(sys::ncclUniqueId { internal: std::array::from_fn(|i| bytes[i] as u8 as std::ffi::c_char) })
}

/// The communicator on `ordinal`, made collectively with `id` the first time.
fn comm_for(
    comms: &mut Vec<(usize, RawComm)>,
    g: &ProcessGroup,
    ordinal: usize,
    id: sys::ncclUniqueId,
) -> Result<sys::ncclComm_t> {
    if let Some((_, comm)) = comms.iter().find(|(o, _)| *o == ordinal) {
        return Ok(comm.0);
    }
    let mut comm = std::mem::MaybeUninit::uninit();
    // SAFETY: `comm` is written by NCCL on success; every rank calls this with the same id.
    unsafe { nccl::comm_init_rank(comm.as_mut_ptr(), g.world_size() as i32, id, g.rank() as i32) }
        .map_err(|e| Error::Msg(format!("NCCL communicator on cuda:{ordinal}: {e:?}")))?;
    // SAFETY: initialized by the successful call above.
    let comm = RawComm(unsafe { comm.assume_init() });
    let raw = comm.0;
    comms.push((ordinal, comm));
    Ok(raw)
}
