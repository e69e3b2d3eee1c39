//! Process groups and collectives for data-parallel training.
//!
//! A [`ProcessGroup`] is the set of ranks that train together and this rank's place in it.
//! Its collectives — [`all_reduce`](ProcessGroup::all_reduce) (sum or mean),
//! [`broadcast`](ProcessGroup::broadcast), [`all_gather`](ProcessGroup::all_gather),
//! [`reduce_scatter`](ProcessGroup::reduce_scatter), [`barrier`](ProcessGroup::barrier) —
//! take tensors (CPU, wgpu, CUDA; f32 or f64) or host slices, and every rank must make the
//! same calls in the same order.
//!
//! Three ways to make a group:
//! - [`ProcessGroup::single`]: this process alone; every collective is the identity.
//! - [`ProcessGroup::threads`]`(n)`: `n` ranks inside this process, one per thread (e.g. one
//!   per GPU), meeting in shared memory. No feature needed.
//! - [`ProcessGroup::from_env`]: one rank per process as launched by `mpirun -np N` (feature
//!   `mpi`, the system's OpenMPI or MPICH); the one-process group when not launched by MPI.
//!   With the feature `nccl`, CUDA tensors are reduced on the GPU by NCCL, whose unique id
//!   travels over MPI.
//!
//! Each rank has a communication thread that runs its collectives in order, so a collective
//! can be started now and waited for later ([`ProcessGroup::all_reduce_async`],
//! [`Work::wait`]) while the caller goes on computing. Errors never hang: ranks compare a
//! small header (collective, root, dtype, length) before moving data, so a mismatch fails on
//! every rank; a collective that waits for the others longer than the timeout
//! (`RNN_DIST_TIMEOUT` seconds, default 300) fails with an error naming the cause.
//!
//! ```
//! use rnn_dist::{ProcessGroup, ReduceOp};
//! # fn main() -> rnn_core::Result<()> {
//! let ranks = ProcessGroup::threads(2)?;
//! let sums = std::thread::scope(|s| {
//!     let handles: Vec<_> = ranks
//!         .iter()
//!         .map(|g| s.spawn(move || {
//!             let mut grad = vec![g.rank() as f32 + 1.0; 3];
//!             g.all_reduce_slice(&mut grad, ReduceOp::Sum).map(|_| grad)
//!         }))
//!         .collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! for sum in sums {
//!     assert_eq!(sum?, vec![3.0; 3]);
//! }
//! # Ok(()) }
//! ```

mod buffer;
mod engine;
mod group;
pub mod launch;
#[cfg(feature = "mpi")]
mod mpi_engine;
#[cfg(feature = "nccl")]
mod nccl_engine;
mod threads;
mod worker;

pub use buffer::{CommElem, ReduceOp};
pub use group::{Backend, ProcessGroup};
pub use launch::{DEFAULT_TIMEOUT, TIMEOUT_ENV};
pub use worker::Work;
