//! `ProcessGroup`: the ranks that take part in collectives, and the collectives on slices,
//! vectors and tensors.

use std::sync::Arc;
use std::time::Duration;

use rnn_core::{DType, Error, Result, Shape, Tensor};

use crate::buffer::{Buf, Call, Collective, CommElem, ReduceOp};
use crate::engine::SingleEngine;
use crate::threads::{Rendezvous, ThreadEngine};
use crate::worker::{Executor, Shared, Work};

/// Which engine a group runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One process, one rank: every collective is the identity.
    Single,
    /// Several ranks in one process, one per thread ([`ProcessGroup::threads`]).
    Threads,
    /// One rank per process, launched by `mpirun` ([`ProcessGroup::from_env`], feature `mpi`).
    Mpi,
}

/// This process's (or thread's) membership of a group of ranks, and the collectives among
/// them. Cheap to clone: clones share the rank and its communication thread.
///
/// Every rank must issue the same collectives in the same order. Before moving data, each
/// collective compares a small header among the ranks (collective, root, dtype, element
/// count, and whether the rank's own arguments were valid): a disagreement is an error on
/// every rank, with no data exchanged, and the group stays usable. A collective that waits
/// longer than the timeout for the other ranks (`RNN_DIST_TIMEOUT` seconds, default 300) is
/// an error too, and breaks the group: every later call fails at once.
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    rank: usize,
    world_size: usize,
    backend: Backend,
    shared: Arc<Shared>,
    executor: Executor,
    /// For a thread group: the rendezvous, whose timeout `set_timeout` also sets.
    rendezvous: Option<Arc<Rendezvous>>,
    /// NCCL communicators, made at the first CUDA collective.
    #[cfg(feature = "nccl")]
    nccl: crate::nccl_engine::Comms,
}

impl Inner {
    pub(crate) fn new(
        rank: usize,
        world_size: usize,
        backend: Backend,
        shared: Arc<Shared>,
        executor: Executor,
        rendezvous: Option<Arc<Rendezvous>>,
    ) -> Inner {
        Inner {
            rank,
            world_size,
            backend,
            shared,
            executor,
            rendezvous,
            #[cfg(feature = "nccl")]
            nccl: Default::default(),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.executor.shut_down(&self.shared);
    }
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = &self.inner;
        write!(f, "ProcessGroup({:?}, rank {} of {})", g.backend, g.rank, g.world_size)
    }
}

impl ProcessGroup {
    /// The group of this process alone: rank 0 of 1.
    pub fn single() -> ProcessGroup {
        let shared = Shared::new(crate::launch::DEFAULT_TIMEOUT);
        let executor = Executor::Inline(std::sync::Mutex::new(Box::new(SingleEngine)));
        Self::from_inner(Inner::new(0, 1, Backend::Single, shared, executor, None))
    }

    /// `n` ranks inside this process, to be used one per thread (e.g. one per GPU): element
    /// `r` of the result is rank `r`. Collectives meet in shared memory. The timeout comes
    /// from `RNN_DIST_TIMEOUT`; a rank whose every handle is dropped (its thread returned or
    /// panicked) makes the others' collectives fail at once instead of waiting.
    pub fn threads(n: usize) -> Result<Vec<ProcessGroup>> {
        if n == 0 {
            return Err(Error::invalid("ProcessGroup::threads", "a group needs at least one rank"));
        }
        let timeout = crate::launch::timeout_from_env()?;
        let rendezvous = Rendezvous::new(n, timeout);
        (0..n)
            .map(|rank| {
                let shared = Shared::new(timeout);
                let engine = Box::new(ThreadEngine { rendezvous: rendezvous.clone(), rank });
                let executor = Executor::spawn_direct(format!("rnn-dist-rank{rank}"), shared.clone(), engine)?;
                let inner = Inner::new(rank, n, Backend::Threads, shared, executor, Some(rendezvous.clone()));
                Ok(Self::from_inner(inner))
            })
            .collect()
    }

    /// The group this process was launched into: under `mpirun` (or another MPI launcher) the
    /// job's MPI world, one rank per process; otherwise the one-process group. Under a
    /// launcher, a build without the `mpi` feature fails with an error saying so. MPI is
    /// started once per process: later calls return the same group while a handle lives, and
    /// MPI is finalized when the last handle is dropped (so keep one for the whole program).
    pub fn from_env() -> Result<ProcessGroup> {
        let launched = crate::launch::launcher_world_size();
        #[cfg(feature = "mpi")]
        if launched.is_some() {
            return crate::mpi_engine::world_group();
        }
        match launched {
            Some(n) if n > 1 => {
                let size = if n == usize::MAX { "several".to_string() } else { n.to_string() };
                Err(Error::invalid(
                    "ProcessGroup::from_env",
                    format!(
                        "launched by an MPI launcher with {size} processes, but this build has no MPI: \
                         rebuild with `--features mpi` (on rnn-dist, rnn or rnn-cli)"
                    ),
                ))
            }
            _ => Ok(ProcessGroup::single()),
        }
    }

    pub(crate) fn from_inner(inner: Inner) -> ProcessGroup {
        ProcessGroup { inner: Arc::new(inner) }
    }
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn from_arc(inner: Arc<Inner>) -> ProcessGroup {
        ProcessGroup { inner }
    }
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
    #[cfg_attr(not(feature = "nccl"), allow(dead_code))]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }
    #[cfg(feature = "nccl")]
    pub(crate) fn nccl_comms(&self) -> &crate::nccl_engine::Comms {
        &self.inner.nccl
    }

    /// How many NCCL communicators this group has made: one per CUDA device whose tensors it
    /// reduced with NCCL (feature `nccl`); 0 where CUDA tensors took the host path.
    pub fn nccl_communicators(&self) -> usize {
        #[cfg(feature = "nccl")]
        return self.inner.nccl.count();
        #[cfg(not(feature = "nccl"))]
        0
    }

    /// This rank's index, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }
    pub fn world_size(&self) -> usize {
        self.inner.world_size
    }
    /// Whether this is rank 0, the one that writes files and prints progress.
    pub fn is_main(&self) -> bool {
        self.inner.rank == 0
    }
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }
    /// How long a collective waits for the other ranks before failing.
    pub fn timeout(&self) -> Duration {
        self.inner.shared.timeout()
    }
    /// Sets this rank's timeout (for a thread group: every rank's, as they share a
    /// rendezvous).
    pub fn set_timeout(&self, timeout: Duration) {
        self.inner.shared.set_timeout(timeout);
        if let Some(rv) = &self.inner.rendezvous {
            rv.set_timeout(timeout);
        }
    }
    /// Whether collectives compare a header among the ranks before moving data (on by
    /// default). Turning the check off saves one small collective per call on the MPI
    /// backend, which matters for latency-bound messages (a few KB); the price is that a
    /// mismatch between ranks is no longer an error but MPI's undefined behaviour (a hang
    /// until the timeout, a truncation error or garbage). Turn it off on every rank at the
    /// same point, e.g. once the first training step has run checked. `RNN_DIST_CHECKS=0`
    /// turns it off from the start. The thread group always checks (it costs nothing there).
    pub fn set_header_checks(&self, on: bool) {
        self.inner.shared.set_header_checks(on);
    }
    pub fn header_checks(&self) -> bool {
        self.inner.shared.header_checks()
    }
    /// Whether a collective whose caller waits for it (`all_reduce`, `all_reduce_vec`, the
    /// slice forms, `barrier`) runs on the caller's own thread when nothing is queued before
    /// it, which saves a hand-off to the rank's communication thread and back (about 5 µs):
    /// always in the one-process and thread groups; in the MPI group when started with
    /// `RNN_DIST_DIRECT=1`. There a direct call blocks inside MPI, which cannot give up on
    /// it: past the timeout, a watchdog prints the error and ends the process (the launcher
    /// then stops the other ranks) instead of returning the error to the caller.
    pub fn direct_calls(&self) -> bool {
        self.inner.executor.runs_on_caller()
    }
    /// Why the group can no longer be used (a timeout or a lost rank), if it cannot.
    pub fn broken(&self) -> Option<String> {
        self.inner.shared.broken()
    }

    /// Queues a collective; `finish` turns the result buffer into what the caller gets.
    pub(crate) fn submit<T>(
        &self,
        call: Call,
        finish: impl FnOnce(Option<Buf>) -> Result<T> + Send + 'static,
    ) -> Work<T> {
        let op = call.collective.name();
        let slot = self.inner.executor.submit(&self.inner.shared, call);
        Work::new(slot, self.inner.shared.clone(), op, finish)
    }

    /// Runs a collective for a caller that waits for it: on the caller's thread where the
    /// group allows (a thread group with nothing queued: no hand-off to the communication
    /// thread and back), else queued and waited for.
    pub(crate) fn run_sync<T>(
        &self,
        call: Call,
        finish: impl FnOnce(Option<Buf>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        match self.inner.executor.run_now(&self.inner.shared, call) {
            Ok(outcome) => finish(outcome?),
            Err(call) => self.submit(call, finish).wait(),
        }
    }

    /// The invalid-argument message for `collective` on a buffer of `len` elements, if any.
    pub(crate) fn check_args(&self, collective: Collective, len: usize) -> Option<String> {
        let n = self.world_size();
        match collective {
            Collective::Broadcast { root } if root >= n => {
                Some(format!("root {root} is not a rank of this group of {n}"))
            }
            Collective::ReduceScatter(_) if len % n != 0 => {
                Some(format!("{len} elements cannot be split evenly among {n} ranks"))
            }
            _ => None,
        }
    }

    fn call<T: CommElem>(&self, collective: Collective, data: Vec<T>) -> Call {
        let invalid = self.check_args(collective, data.len());
        Call { collective, buf: Some(T::into_buf(data)), invalid }
    }

    // ---- vectors and slices (f32, f64) ----

    /// Starts an all_reduce of `data`; `wait` returns the reduced vector.
    pub fn all_reduce_vec_async<T: CommElem>(&self, data: Vec<T>, op: ReduceOp) -> Work<Vec<T>> {
        self.submit(self.call(Collective::AllReduce(op), data), unwrap_vec::<T>)
    }

    /// The all_reduce of `data`: the reduced vector (in `data`'s own buffer where the group
    /// can reuse it).
    pub fn all_reduce_vec<T: CommElem>(&self, data: Vec<T>, op: ReduceOp) -> Result<Vec<T>> {
        self.run_sync(self.call(Collective::AllReduce(op), data), unwrap_vec::<T>)
    }

    /// Reduces `data` over all ranks in place: afterwards every rank holds the element-wise
    /// sum (or mean).
    pub fn all_reduce_slice<T: CommElem>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let reduced = self.all_reduce_vec(data.to_vec(), op)?;
        data.copy_from_slice(&reduced);
        Ok(())
    }

    /// Replaces `data` with rank `root`'s `data` (every rank gives the same length).
    pub fn broadcast_slice<T: CommElem>(&self, data: &mut [T], root: usize) -> Result<()> {
        let received = self.run_sync(self.call(Collective::Broadcast { root }, data.to_vec()), unwrap_vec::<T>)?;
        data.copy_from_slice(&received);
        Ok(())
    }

    /// Every rank's `data` (same length everywhere), concatenated in rank order.
    pub fn all_gather_slice<T: CommElem>(&self, data: &[T]) -> Result<Vec<T>> {
        self.run_sync(self.call(Collective::AllGather, data.to_vec()), unwrap_vec::<T>)
    }

    /// Reduces `data` (whose length divides evenly among the ranks) over all ranks and
    /// returns this rank's chunk of the result: elements `rank * len / n ..`.
    pub fn reduce_scatter_slice<T: CommElem>(&self, data: &[T], op: ReduceOp) -> Result<Vec<T>> {
        self.run_sync(self.call(Collective::ReduceScatter(op), data.to_vec()), unwrap_vec::<T>)
    }

    /// Returns once every rank has called `barrier`.
    pub fn barrier(&self) -> Result<()> {
        let call = Call { collective: Collective::Barrier, buf: None, invalid: None };
        self.run_sync(call, |_| Ok(()))
    }

    // ---- tensors (CPU, wgpu and CUDA; f32 and f64) ----

    /// Starts an all_reduce of `tensor`; `wait` returns a tensor of the same shape on the
    /// same device holding the sum (or mean) over ranks. The tensor is staged through host
    /// memory, except CUDA tensors with the `nccl` feature, which NCCL reduces on the GPU.
    pub fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Work<Tensor> {
        self.tensor_collective(tensor, Collective::AllReduce(op), tensor.shape().clone())
    }

    /// The sum (or mean) of `tensor` over all ranks, same shape, same device.
    pub fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.tensor_collective_sync(tensor, Collective::AllReduce(op), tensor.shape().clone())
    }

    /// Rank `root`'s `tensor` (every rank gives one of the same shape and dtype).
    pub fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<Tensor> {
        self.tensor_collective_sync(tensor, Collective::Broadcast { root }, tensor.shape().clone())
    }

    /// Every rank's `tensor` (same shape everywhere) concatenated along dim 0 in rank order:
    /// shape `[n * d0, ..]` (a scalar gives `[n]`).
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Tensor> {
        let mut dims = tensor.dims().to_vec();
        match dims.first_mut() {
            Some(d0) => *d0 *= self.world_size(),
            None => dims.push(self.world_size()),
        }
        self.tensor_collective_sync(tensor, Collective::AllGather, Shape::from(dims))
    }

    /// The sum (or mean) over ranks of `tensor`, whose dim 0 divides evenly among the ranks,
    /// and this rank's slice of it along dim 0: shape `[d0 / n, ..]`.
    pub fn reduce_scatter(&self, tensor: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let mut dims = tensor.dims().to_vec();
        let n = self.world_size();
        let collective = Collective::ReduceScatter(op);
        let invalid = match dims.first_mut() {
            None => Some("a scalar cannot be scattered: give a tensor with a dim 0".to_string()),
            Some(d0) if *d0 % n != 0 => {
                Some(format!("dim 0 of shape {:?} does not divide among {n} ranks", tensor.dims()))
            }
            Some(d0) => {
                *d0 /= n;
                None
            }
        };
        match invalid {
            Some(msg) => self.run_sync(Call { collective, buf: None, invalid: Some(msg) }, unwrap_tensor_never),
            None => self.tensor_collective_sync(tensor, collective, Shape::from(dims)),
        }
    }

    /// Stages `tensor` to the host (or hands it to NCCL), runs `collective` and returns the
    /// result as a tensor of `out_shape` on the tensor's device.
    fn tensor_collective(&self, tensor: &Tensor, collective: Collective, out_shape: Shape) -> Work<Tensor> {
        #[cfg(feature = "nccl")]
        if let Some(work) = crate::nccl_engine::try_tensor_collective(self, tensor, collective, &out_shape) {
            return work;
        }
        let (call, finish) = self.host_call(tensor, collective, out_shape);
        self.submit(call, finish)
    }

    /// `tensor_collective` for a caller that waits for it (see `run_sync`).
    fn tensor_collective_sync(&self, tensor: &Tensor, collective: Collective, out_shape: Shape) -> Result<Tensor> {
        #[cfg(feature = "nccl")]
        if let Some(work) = crate::nccl_engine::try_tensor_collective(self, tensor, collective, &out_shape) {
            return work.wait();
        }
        let (call, finish) = self.host_call(tensor, collective, out_shape);
        self.run_sync(call, finish)
    }

    /// The call of `collective` on `tensor` staged to the host, and what turns its result
    /// into a tensor of `out_shape` on the tensor's device.
    fn host_call(
        &self,
        tensor: &Tensor,
        collective: Collective,
        out_shape: Shape,
    ) -> (Call, impl FnOnce(Option<Buf>) -> Result<Tensor> + Send + 'static) {
        let device = tensor.device();
        let call = match host_buf(tensor) {
            Ok(buf) => {
                let invalid = self.check_args(collective, buf.len());
                Call { collective, buf: Some(buf), invalid }
            }
            Err(e) => Call { collective, buf: None, invalid: Some(e.to_string()) },
        };
        let finish = move |buf: Option<Buf>| {
            let buf = buf.ok_or_else(|| Error::Msg("collective returned no data".into()))?;
            match buf {
                Buf::F32(v) => Tensor::from_vec(v, out_shape, device),
                Buf::F64(v) => Tensor::from_vec(v, out_shape, device),
            }
        };
        (call, finish)
    }
}

/// The tensor's elements on the host, for the element types collectives carry.
fn host_buf(tensor: &Tensor) -> Result<Buf> {
    match tensor.dtype() {
        DType::F32 => Ok(Buf::F32(tensor.to_vec()?)),
        DType::F64 => Ok(Buf::F64(tensor.to_vec()?)),
        dtype => Err(Error::UnsupportedDType { op: "collective", dtype, hint: " (cast to f32 or f64 first)" }),
    }
}

fn unwrap_vec<T: CommElem>(buf: Option<Buf>) -> Result<Vec<T>> {
    buf.and_then(T::from_buf).ok_or_else(|| Error::Msg("collective returned data of another type".into()))
}

/// The finish of a call with invalid arguments: it always fails before reaching here.
fn unwrap_tensor_never(_: Option<Buf>) -> Result<Tensor> {
    Err(Error::Msg("collective with invalid arguments returned data".into()))
}
