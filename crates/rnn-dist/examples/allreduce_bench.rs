//! all_reduce bandwidth of the MPI process group against raw `MPI_Allreduce` on buffers of
//! the same sizes (4 KB to 64 MB of f32). MPI starts once per process, so each side runs in
//! its own launch; `bench/allreduce_mpi.sh` runs both and prints the ratios.
//!
//! ```text
//! cargo build --release -p rnn-dist --features mpi --example allreduce_bench
//! mpirun -np 2 target/release/examples/allreduce_bench raw     # MPI_Allreduce
//! mpirun -np 2 target/release/examples/allreduce_bench group   # ProcessGroup
//! ```
//!
//! A second argument picks the sizes: `allreduce_bench raw 2143272` times one buffer of
//! that many bytes (`bench/run_ddp.sh` times the MLP's gradients so).
//!
//! Each line: `mode,bytes,seconds per call,GB/s` (bytes / time, the algorithm bandwidth),
//! measured by rank 0 after a barrier: the median of 5 timed runs of at least 0.2 s each.
//! Modes: `raw` (from a send to a receive buffer), `raw-in-place` (`MPI_IN_PLACE`, as the
//! group's MPI engine calls it), `raw-in-place-serialized` (the same in a process at
//! `MPI_THREAD_SERIALIZED`, the level the group asks for with direct calls; the other raw modes
//! run at `MPI_THREAD_SINGLE`), `raw-nonblocking` (`MPI_Iallreduce` in place, polled with
//! `MPI_Test`), `group` (owning vectors, `all_reduce_vec_async(..).wait()`, as gradient
//! buckets are reduced), `group-sync` (`all_reduce_vec`: read `group-direct` when launched with
//! `RNN_DIST_DIRECT=1`, where it runs on the caller's thread), `group-slice`
//! (`all_reduce_slice`, which copies in and out), and `threads` / `threads-sync` (run without
//! `mpirun`: the `group` loop on a `ProcessGroup::threads(2)` group in this process, with
//! `all_reduce_vec_async(..).wait()` / `all_reduce_vec`). `direct-vs-raw` (with
//! `RNN_DIST_DIRECT=1`) alternates raw and direct calls within one launch: see its function.

use std::time::Instant;

use mpi::collective::{CommunicatorCollectives, SystemOperation};
use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use rnn_dist::{ProcessGroup, ReduceOp};

const SIZES_BYTES: [usize; 8] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

/// The sizes to time: the second argument's comma-separated byte counts (rounded down to
/// whole f32), else `SIZES_BYTES`; an error names a count that is not a number.
fn sizes() -> rnn_core::Result<Vec<usize>> {
    let Some(list) = std::env::args().nth(2) else { return Ok(SIZES_BYTES.to_vec()) };
    let parse = |b: &str| {
        let bytes = b
            .trim()
            .parse::<usize>()
            .map_err(|_| rnn_core::Error::Msg(format!("sizes: '{b}' is not a byte count (like 2143272,4096)")))?;
        Ok(bytes / 4 * 4)
    };
    list.split(',').map(parse).collect()
}

/// Seconds per call of `step`: the median of 5 runs of at least 0.2 s each (after warming
/// up). Every rank must make the same number of calls: `agree` turns this rank's wish into
/// the value every rank uses (the largest), and also aligns the runs' starts.
fn time_per_call(mut step: impl FnMut(), mut agree: impl FnMut(f64) -> f64) -> f64 {
    let warm_up = Instant::now();
    for _ in 0..3 {
        step();
    }
    let guess = warm_up.elapsed().as_secs_f64() / 3.0;
    let calls = agree((0.2 / guess).ceil().max(3.0)) as usize;
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            agree(0.0);
            let started = Instant::now();
            for _ in 0..calls {
                step();
            }
            started.elapsed().as_secs_f64() / calls as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn report(mode: &str, bytes: usize, seconds: f64) {
    println!("{mode},{bytes},{seconds:.9},{:.3}", bytes as f64 / seconds / 1e9);
}

unsafe extern "C" {
    /// The MPI library's `MPI_IN_PLACE`, from rnn-dist's C shim (`src/mpi_in_place.c`).
    static rnn_mpi_in_place: *mut std::ffi::c_void;
}

/// `MPI_Allreduce` (sum) of `data` over the world, in place.
fn sum_in_place(world: &SimpleCommunicator, data: &mut [f32]) {
    // SAFETY: `data` is a live, exclusively borrowed f32 buffer whose length fits a C int
    // (at most 64 MB here); MPI_IN_PLACE makes it both the input and the output.
    unsafe {
        mpi::ffi::MPI_Allreduce(
            rnn_mpi_in_place,
            data.as_mut_ptr().cast(),
            data.len() as std::ffi::c_int,
            f32::equivalent_datatype().as_raw(),
            SystemOperation::sum().as_raw(),
            world.as_raw(),
        );
    }
}

/// `MPI_Iallreduce` (sum) of `data` in place, completed by polling `MPI_Test`: the call a
/// caller-thread path with a deadline would make (it can give up waiting; a blocking
/// `MPI_Allreduce` cannot).
fn sum_nonblocking(world: &SimpleCommunicator, data: &mut [f32]) {
    // SAFETY: `data` is a live, exclusively borrowed f32 buffer whose length fits a C int;
    // the request is completed (MPI_Test reports done) before the borrow ends, and
    // MPI_IN_PLACE makes the buffer both the input and the output.
    unsafe {
        let mut req: mpi::ffi::MPI_Request = std::mem::zeroed();
        mpi::ffi::MPI_Iallreduce(
            rnn_mpi_in_place,
            data.as_mut_ptr().cast(),
            data.len() as std::ffi::c_int,
            f32::equivalent_datatype().as_raw(),
            SystemOperation::sum().as_raw(),
            world.as_raw(),
            &mut req,
        );
        let mut done: std::ffi::c_int = 0;
        while done == 0 {
            mpi::ffi::MPI_Test(&mut req, &mut done, mpi::ffi::RSMPI_STATUS_IGNORE);
        }
    }
}

/// How a raw mode calls MPI.
#[derive(Clone, Copy)]
enum RawCall {
    /// `MPI_Allreduce` from a send to a receive buffer.
    SendRecv,
    /// `MPI_Allreduce` with `MPI_IN_PLACE`.
    InPlace,
    /// The same, in a process that asked for `MPI_THREAD_SERIALIZED` (as the group with
    /// direct calls does; the other modes run at `MPI_THREAD_SINGLE`).
    InPlaceSerialized,
    /// `MPI_Iallreduce` in place, polled with `MPI_Test`.
    Nonblocking,
}

fn raw(sizes: &[usize], call: RawCall) {
    let universe = match call {
        RawCall::InPlaceSerialized => mpi::initialize_with_threading(mpi::Threading::Serialized).map(|(u, _)| u),
        _ => mpi::initialize(),
    }
    .expect("MPI init");
    let world = universe.world();
    for &bytes in sizes {
        let send = vec![1.0f32; bytes / 4];
        let mut recv = vec![0.0f32; bytes / 4];
        let step = || match call {
            RawCall::SendRecv => world.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum()),
            RawCall::InPlace | RawCall::InPlaceSerialized => sum_in_place(&world, &mut recv),
            RawCall::Nonblocking => sum_nonblocking(&world, &mut recv),
        };
        let seconds = time_per_call(step, |wish| {
            let mut most = 0.0f64;
            world.all_reduce_into(&wish, &mut most, SystemOperation::max());
            most
        });
        if world.rank() == 0 {
            let mode = match call {
                RawCall::SendRecv => "raw",
                RawCall::InPlace => "raw-in-place",
                RawCall::InPlaceSerialized => "raw-in-place-serialized",
                RawCall::Nonblocking => "raw-nonblocking",
            };
            report(mode, bytes, seconds);
        }
    }
}

/// How the `group` modes call the process group.
#[derive(Clone, Copy, PartialEq)]
enum GroupCall {
    Async,
    Sync,
    Slice,
}

fn group(call: GroupCall, sizes: &[usize]) -> rnn_core::Result<()> {
    let g = ProcessGroup::from_env()?;
    let base = match call {
        GroupCall::Async => "group",
        GroupCall::Sync if g.direct_calls() => "group-direct",
        GroupCall::Sync => "group-sync",
        GroupCall::Slice => "group-slice",
    };
    let mode = if g.header_checks() { base.to_string() } else { format!("{base}-unchecked") };
    for &bytes in sizes {
        let seconds = time_group_call(&g, call, bytes);
        if g.is_main() {
            report(&mode, bytes, seconds);
        }
    }
    Ok(())
}

/// Seconds per all_reduce of `bytes` of f32 made as `call` says (see `time_per_call`).
fn time_group_call(g: &ProcessGroup, call: GroupCall, bytes: usize) -> f64 {
    if call == GroupCall::Slice {
        let mut data = vec![1.0f32; bytes / 4];
        return time_per_call(
            || g.all_reduce_slice(&mut data, ReduceOp::Sum).expect("all_reduce"),
            |wish| agree(g, wish),
        );
    }
    let mut data = Some(vec![1.0f32; bytes / 4]);
    let step = || {
        let v = data.take().unwrap_or_default();
        let reduced = match call {
            GroupCall::Async => g.all_reduce_vec_async(v, ReduceOp::Sum).wait(),
            _ => g.all_reduce_vec(v, ReduceOp::Sum),
        };
        data = Some(reduced.expect("all_reduce"));
    };
    time_per_call(step, |wish| agree(g, wish))
}

/// With `RNN_DIST_DIRECT=1`: per size, three alternating rounds in this one launch of raw
/// `MPI_Allreduce` in place (on this thread, at the group's `MPI_THREAD_SERIALIZED`), the
/// group's direct `all_reduce_vec`, and the same without the header check; the best round of
/// each. One launch, because this VM runs some whole launches at half speed.
fn direct_vs_raw(sizes: &[usize]) -> rnn_core::Result<()> {
    let g = ProcessGroup::from_env()?;
    if !g.direct_calls() {
        return Err(rnn_core::Error::Msg("direct-vs-raw needs RNN_DIST_DIRECT=1".into()));
    }
    // The group's MPI world. Only this thread calls MPI here: the group runs no asynchronous
    // call, so its communication thread stays idle, as MPI_THREAD_SERIALIZED requires.
    let world = SimpleCommunicator::world();
    for &bytes in sizes {
        let mut best = [f64::INFINITY; 3];
        for _ in 0..3 {
            for (mode, best) in best.iter_mut().enumerate() {
                g.set_header_checks(mode != 2);
                let seconds = if mode == 0 {
                    let mut v = vec![1.0f32; bytes / 4];
                    time_per_call(|| sum_in_place(&world, &mut v), |wish| agree(&g, wish))
                } else {
                    time_group_call(&g, GroupCall::Sync, bytes)
                };
                *best = best.min(seconds);
            }
        }
        if g.is_main() {
            for (mode, seconds) in ["raw-same-launch", "direct", "direct-unchecked"].iter().zip(best) {
                report(mode, bytes, seconds);
            }
        }
    }
    Ok(())
}

/// The group of `ranks` threads in this process (`ProcessGroup::threads`), each reducing
/// its own vector as `group` does (`sync`: with the waiting call `all_reduce_vec`, which
/// runs on the caller's thread when nothing is queued); rank 0 reports.
fn threads(ranks: usize, sync: bool, sizes: &[usize]) -> rnn_core::Result<()> {
    let groups = ProcessGroup::threads(ranks)?;
    std::thread::scope(|s| {
        for g in groups {
            s.spawn(move || {
                for &bytes in sizes {
                    let seconds = time_group_call(&g, if sync { GroupCall::Sync } else { GroupCall::Async }, bytes);
                    if g.is_main() {
                        report(&format!("threads{ranks}{}", if sync { "-sync" } else { "" }), bytes, seconds);
                    }
                }
            });
        }
    });
    Ok(())
}

/// The largest of the ranks' `wish`es.
fn agree(g: &ProcessGroup, wish: f64) -> f64 {
    let all = g.all_gather_slice(&[wish]).expect("all_gather");
    all.into_iter().fold(0.0, f64::max)
}

fn main() -> rnn_core::Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("raw") => raw(&sizes()?, RawCall::SendRecv),
        Some("raw-in-place") => raw(&sizes()?, RawCall::InPlace),
        Some("raw-in-place-serialized") => raw(&sizes()?, RawCall::InPlaceSerialized),
        Some("raw-nonblocking") => raw(&sizes()?, RawCall::Nonblocking),
        Some("threads") => threads(2, false, &sizes()?)?,
        Some("threads-sync") => threads(2, true, &sizes()?)?,
        Some("group") => group(GroupCall::Async, &sizes()?)?,
        Some("group-sync") => group(GroupCall::Sync, &sizes()?)?,
        Some("group-slice") => group(GroupCall::Slice, &sizes()?)?,
        Some("direct-vs-raw") => direct_vs_raw(&sizes()?)?,
        _ => eprintln!(
            "usage: mpirun -np 2 allreduce_bench raw|raw-in-place|raw-in-place-serialized|raw-nonblocking|group|group-sync|group-slice \
             [bytes,bytes,..] (RNN_DIST_CHECKS=0: unchecked; RNN_DIST_DIRECT=1: group-sync runs direct), \
             direct-vs-raw [bytes,..] with RNN_DIST_DIRECT=1, or allreduce_bench threads|threads-sync [bytes,..] without mpirun"
        ),
    }
    Ok(())
}
