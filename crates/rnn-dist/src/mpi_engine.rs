//! The MPI engine: one rank per process, launched by `mpirun`. MPI is initialized and
//! finalized by the group's communication thread. By default that thread alone calls MPI
//! (`MPI_THREAD_FUNNELED`), so the training threads never do and a blocked collective never
//! blocks them past the timeout (see `worker`). With `RNN_DIST_DIRECT=1`, a caller that waits
//! for its collective runs it itself when nothing is queued (`MPI_THREAD_SERIALIZED`: one
//! thread in MPI at a time, behind the engine's lock), and a watchdog ends the process if
//! such a call outlives the timeout.

use std::sync::{Arc, Mutex, Weak};

use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
use mpi::datatype::Equivalence;
use mpi::environment::Universe;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;
use rnn_core::{Error, Result};

use crate::buffer::{Buf, Call, Collective, ReduceOp, HEADER_WORDS};
use crate::engine::Engine;
use crate::group::{Backend, Inner, ProcessGroup};
use crate::worker::{lock, watch_direct_calls, Executor, Shared};

/// The world group while a handle lives, and whether MPI was ever started (it cannot start
/// twice in one process).
static WORLD: Mutex<(Option<Weak<Inner>>, bool)> = Mutex::new((None, false));

/// The job's MPI world, started on first use and shared by later calls while it lives.
pub(crate) fn world_group() -> Result<ProcessGroup> {
    let mut world = lock(&WORLD);
    if let Some(inner) = world.0.as_ref().and_then(Weak::upgrade) {
        return Ok(ProcessGroup::from_arc(inner));
    }
    if world.1 {
        return Err(Error::invalid(
            "ProcessGroup::from_env",
            "MPI was finalized when the last handle of the group was dropped, and MPI cannot start twice \
             in one process: keep one ProcessGroup for the whole program",
        ));
    }
    let timeout = crate::launch::timeout_from_env()?;
    let direct = crate::launch::direct_from_env()?;
    let shared = Shared::new(timeout);
    let (tell, told) = std::sync::mpsc::channel();
    shared.set_header_checks(crate::launch::header_checks_from_env());
    let engine_shared = shared.clone();
    let start = move |threading| {
        let engine = MpiEngine::start(engine_shared, threading)?;
        let _ = tell.send((engine.world.rank() as usize, engine.world.size() as usize));
        Ok(engine)
    };
    let name = "rnn-dist-mpi".to_string();
    let executor = if direct {
        Executor::spawn_direct_made(name, shared.clone(), move || {
            Ok(Box::new(SerializedMpi(start(Threading::Serialized)?)) as Box<dyn Engine + Send>)
        })
    } else {
        Executor::spawn(name, shared.clone(), move || Ok(Box::new(start(Threading::Funneled)?) as Box<dyn Engine>))
    };
    let executor = executor?;
    world.1 = true;
    let (rank, world_size) = told.recv().map_err(|_| Error::Msg("MPI did not start".into()))?;
    if direct {
        watch_direct_calls(&shared, rank)?;
    }
    let group = ProcessGroup::from_inner(Inner::new(rank, world_size, Backend::Mpi, shared, executor, None));
    world.0 = Some(Arc::downgrade(group.inner()));
    Ok(group)
}

pub(crate) struct MpiEngine {
    world: SimpleCommunicator,
    shared: Arc<Shared>,
    // Dropped last: finalizes MPI.
    _universe: Universe,
}

impl MpiEngine {
    /// Initializes MPI on this thread, asking for `threading` (funneled or serialized).
    fn start(shared: Arc<Shared>, threading: Threading) -> Result<MpiEngine> {
        let (universe, level) = mpi::initialize_with_threading(threading).ok_or_else(|| {
            Error::invalid("ProcessGroup::from_env", "MPI was already initialized by other code in this process")
        })?;
        let serialized = matches!(level, Threading::Serialized | Threading::Multiple);
        if threading == Threading::Serialized && !serialized {
            return Err(Error::invalid(
                "ProcessGroup::from_env",
                format!(
                    "{}=1 needs MPI_THREAD_SERIALIZED, and this MPI library provides only {level:?}: \
                     unset {0}",
                    crate::launch::DIRECT_ENV
                ),
            ));
        }
        Ok(MpiEngine { world: universe.world(), shared, _universe: universe })
    }

    /// The smallest and largest header over all ranks, in one all_reduce (the max of the
    /// header and of its negation).
    fn exchange_headers(&self, header: [i64; HEADER_WORDS]) -> ([i64; HEADER_WORDS], [i64; HEADER_WORDS]) {
        let mut both = [0i64; 2 * HEADER_WORDS];
        for (i, &h) in header.iter().enumerate() {
            both[i] = h;
            both[HEADER_WORDS + i] = -h;
        }
        let mut max = [0i64; 2 * HEADER_WORDS];
        self.world.all_reduce_into(&both[..], &mut max[..], SystemOperation::max());
        let hi: [i64; HEADER_WORDS] = std::array::from_fn(|i| max[i]);
        let lo: [i64; HEADER_WORDS] = std::array::from_fn(|i| -max[HEADER_WORDS + i]);
        (lo, hi)
    }
}

/// The MPI engine of a group with direct calls (`RNN_DIST_DIRECT=1`), which callers'
/// threads run too.
struct SerializedMpi(MpiEngine);

// SAFETY: this engine exists only where MPI was initialized with MPI_THREAD_SERIALIZED or
// more (checked by `MpiEngine::start`), which lets any thread call MPI while no two do at
// once. It is only used behind the lock of the group's `Direct`, so calls never overlap, and
// the communication thread, which initialized MPI, drops it last and so finalizes MPI.
unsafe impl Send for SerializedMpi {}

impl Engine for SerializedMpi {
    fn run(&mut self, call: Call) -> Result<Option<Buf>> {
        self.0.run(call)
    }
}

/// Runs `$body` with `$v` the buffer's vector and `$out` a new vector of `$n` zeros of the
/// same element type; the result is `$out` wrapped back into a buffer.
macro_rules! into_new {
    ($buf:expr, $n:expr, |$v:ident, $out:ident| $body:expr) => {
        match $buf {
            Buf::F32($v) => {
                let mut $out = vec![0f32; $n];
                $body;
                Buf::F32($out)
            }
            Buf::F64($v) => {
                let mut $out = vec![0f64; $n];
                $body;
                Buf::F64($out)
            }
        }
    };
}

impl Engine for MpiEngine {
    fn run(&mut self, call: Call) -> Result<Option<Buf>> {
        if self.shared.header_checks() {
            let (lo, hi) = self.exchange_headers(call.header());
            call.check_agreement(&lo, &hi)?;
        } else if let Some(msg) = call.invalid {
            return Err(Error::invalid(call.collective.name(), msg));
        }
        let Some(buf) = call.buf else {
            self.world.barrier();
            return Ok(None);
        };
        let n = self.world.size() as usize;
        let len = buf.len();
        // MPI counts are C ints; the length agrees on every rank, so every rank fails here.
        if len.saturating_mul(n) > i32::MAX as usize {
            let msg = format!("{len} elements per rank exceed MPI's count limit: split the buffer");
            return Err(Error::invalid(call.collective.name(), msg));
        }
        let world = &self.world;
        let out = match call.collective {
            Collective::AllReduce(op) => {
                let mut buf = buf;
                all_reduce_sum_in_place(world, &mut buf);
                mean_if(buf, op, n)
            }
            Collective::Broadcast { root } => {
                let mut buf = buf;
                let root = world.process_at_rank(root as i32);
                match &mut buf {
                    Buf::F32(v) => root.broadcast_into(&mut v[..]),
                    Buf::F64(v) => root.broadcast_into(&mut v[..]),
                }
                buf
            }
            Collective::AllGather => into_new!(&buf, len * n, |v, out| world.all_gather_into(&v[..], &mut out[..])),
            Collective::ReduceScatter(op) => {
                let part = into_new!(&buf, len / n, |v, out| world.reduce_scatter_block_into(
                    &v[..],
                    &mut out[..],
                    SystemOperation::sum()
                ));
                mean_if(part, op, n)
            }
            Collective::Barrier => buf,
        };
        Ok(Some(out))
    }
}

unsafe extern "C" {
    /// The MPI library's `MPI_IN_PLACE` (src/mpi_in_place.c, compiled by build.rs).
    static rnn_mpi_in_place: *mut std::ffi::c_void;
}

/// Replaces `buf` with its sum over the ranks, in place: no receive buffer to fill, and no
/// copy of the input into one before reducing.
fn all_reduce_sum_in_place(world: &SimpleCommunicator, buf: &mut Buf) {
    fn sum<T: Equivalence>(world: &SimpleCommunicator, v: &mut [T]) {
        // SAFETY: `v` is a live, exclusively borrowed buffer of `v.len()` elements of T's MPI
        // datatype, a count that fits a C int (checked by the caller); with MPI_IN_PLACE as
        // the send buffer, MPI reads this rank's values from it and writes the sums over
        // them, as the standard defines for an intracommunicator (the world).
        unsafe {
            mpi::ffi::MPI_Allreduce(
                rnn_mpi_in_place,
                v.as_mut_ptr().cast(),
                v.len() as std::ffi::c_int,
                T::equivalent_datatype().as_raw(),
                SystemOperation::sum().as_raw(),
                world.as_raw(),
            );
        }
    }
    match buf {
        Buf::F32(v) => sum(world, v),
        Buf::F64(v) => sum(world, v),
    }
}

fn mean_if(mut sum: Buf, op: ReduceOp, n: usize) -> Buf {
    if op == ReduceOp::Mean {
        sum.divide(n);
    }
    sum
}
