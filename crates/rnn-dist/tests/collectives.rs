//! Collectives of every backend: the thread group at 1, 2 and 4 ranks here; the MPI group
//! at 2 and 4 processes by starting `mpirun` on this test binary (feature `mpi`, see
//! `mpi_launch`). Failures (mismatched calls, a rank that leaves, a rank that never comes)
//! end in errors on every rank within the timeout, never in a hang.

#[cfg(feature = "mpi")]
mod mpi_launch;
mod suite;

use std::time::{Duration, Instant};

use rnn_core::{DType, Device, Result, Tensor};
use rnn_dist::{Backend, ProcessGroup, ReduceOp};
use rnn_testutil::*;

/// Runs `body` on every rank of a new thread group of `n`, one thread each, and returns
/// their results in rank order.
fn on_threads<R: Send>(n: usize, body: impl Fn(ProcessGroup) -> R + Sync) -> Vec<R> {
    let groups = ProcessGroup::threads(n).expect("thread group");
    std::thread::scope(|s| {
        let handles: Vec<_> = groups.into_iter().map(|g| s.spawn(|| body(g))).collect();
        handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

fn all_ok(results: Vec<Result<()>>) -> Result<()> {
    results.into_iter().collect()
}

#[test]
fn thread_groups_of_1_2_and_4_pass_the_suite() -> Result<()> {
    for n in [1, 2, 4] {
        all_ok(on_threads(n, |g| suite::all(&g)))?;
    }
    Ok(())
}

/// Repeated reductions in a thread group are right every round (no stale values in reused
/// buffers, mixed with barriers and other sizes), and once warm they allocate nothing: every
/// rank gets back the buffer it deposited (rank 0 the one it deposited the round before).
#[test]
fn thread_group_reductions_reuse_the_ranks_buffers() -> Result<()> {
    let n = 3;
    all_ok(on_threads(n, |g| {
        let r = g.rank() as f64;
        let mut last_ptr = std::ptr::null();
        for round in 0..6 {
            let v: Vec<f64> = (0..1000).map(|i| r * 1000.0 + i as f64 + round as f64).collect();
            let ptr = v.as_ptr();
            let sum = g.all_reduce_vec_async(v, ReduceOp::Sum).wait()?;
            let want = |i: usize| (0..n).map(|q| q as f64 * 1000.0 + i as f64 + round as f64).sum::<f64>();
            assert!(sum.iter().enumerate().all(|(i, &x)| x == want(i)), "rank {} round {round}", g.rank());
            match g.rank() {
                0 if round > 0 => assert_eq!(sum.as_ptr(), last_ptr, "rank 0 round {round}"),
                0 => {}
                _ => assert_eq!(sum.as_ptr(), ptr, "rank {} round {round}", g.rank()),
            }
            last_ptr = ptr;
            if round % 2 == 1 {
                g.barrier()?;
                assert_eq!(g.all_reduce_vec_async(vec![r; 7], ReduceOp::Mean).wait()?, vec![1.0; 7]);
            }
            let part = g.reduce_scatter_slice(&[r + round as f64; 6], ReduceOp::Sum)?;
            assert_eq!(part, vec![3.0 + 3.0 * round as f64; 2]);
        }
        Ok(())
    }))
}

/// A waiting call issued while an earlier asynchronous one is still queued runs after it
/// (it goes through the queue, not the caller's thread), and one issued with nothing queued
/// runs at once; every rank sees both results in issue order.
#[test]
fn waiting_calls_keep_their_place_behind_queued_ones() -> Result<()> {
    all_ok(on_threads(3, |g| {
        let r = g.rank() as f64;
        for round in 0..20 {
            let first = g.all_reduce_vec_async(vec![r; 5], ReduceOp::Sum);
            let second = g.all_reduce_vec(vec![10.0 * r + round as f64; 3], ReduceOp::Sum)?;
            assert_eq!(first.wait()?, vec![3.0; 5], "rank {} round {round}", g.rank());
            assert_eq!(second, vec![30.0 + 3.0 * round as f64; 3], "rank {} round {round}", g.rank());
            let mut alone = [r + 1.0; 2];
            g.all_reduce_slice(&mut alone, ReduceOp::Mean)?;
            assert_eq!(alone, [2.0; 2]);
        }
        Ok(())
    }))
}

#[test]
fn the_single_group_passes_the_suite_and_rejects_other_roots() -> Result<()> {
    let g = ProcessGroup::single();
    assert_eq!((g.rank(), g.world_size(), g.is_main(), g.backend()), (0, 1, true, Backend::Single));
    suite::all(&g)?;
    let err = g.broadcast_slice(&mut [1.0f32], 1).unwrap_err().to_string();
    assert!(err.contains("root 1 is not a rank"), "{err}");
    Ok(())
}

fn tensors_on_devices(device: Device) -> Result<()> {
    all_ok(on_threads(2, |g| suite::tensors(&g, device)))
}
test_device!(tensors_on_devices_test, tensors_on_devices);

/// The one-process group's tensor collectives on each device. On CUDA with the `nccl`
/// feature they run through NCCL (all_reduce is the identity on one rank); where the NCCL
/// library is missing they take the host path, so `RNN_REQUIRE_NCCL=1` (the GPU script)
/// asserts that NCCL made the group's communicator.
fn single_group_tensors_on_devices(device: Device) -> Result<()> {
    let g = ProcessGroup::single();
    suite::tensors(&g, device)?;
    let nccl_required = std::env::var_os("RNN_REQUIRE_NCCL").is_some_and(|v| v == "1");
    if nccl_required && matches!(device, Device::Cuda(_)) {
        let why = "the CUDA collectives did not run through NCCL (is the feature nccl on?)";
        assert_eq!(g.nccl_communicators(), 1, "{why}");
    } else if !matches!(device, Device::Cuda(_)) {
        assert_eq!(g.nccl_communicators(), 0);
    }
    Ok(())
}
test_device!(single_group_tensors_on_devices_test, single_group_tensors_on_devices);

#[test]
fn from_env_without_a_launcher_is_the_single_group() -> Result<()> {
    if rnn_dist::launch::launcher_world_size().is_some() {
        return Ok(()); // this test binary runs under mpirun (the MPI child mode)
    }
    assert_eq!(ProcessGroup::from_env()?.backend(), Backend::Single);
    Ok(())
}

#[test]
fn mismatched_calls_fail_on_every_rank_and_the_group_goes_on() -> Result<()> {
    all_ok(on_threads(3, |g| suite::mismatches(&g)))
}

#[test]
fn invalid_arguments_on_one_rank_fail_every_rank_with_the_cause() -> Result<()> {
    let errors = on_threads(2, |g| {
        let root = if g.rank() == 1 { 5 } else { 0 };
        let bad_root = g.broadcast_slice(&mut [0.0f64; 3], root).unwrap_err().to_string();
        let odd = Tensor::zeros((3, 2), DType::F32, Device::Cpu).unwrap();
        let uneven = g.reduce_scatter(&odd, ReduceOp::Sum).unwrap_err().to_string();
        let bytes = Tensor::zeros(4, DType::U8, Device::Cpu).unwrap();
        let dtype = g.all_reduce(&bytes, ReduceOp::Sum).unwrap_err().to_string();
        (bad_root, uneven, dtype)
    });
    assert!(errors[1].0.contains("root 5 is not a rank of this group of 2"), "{}", errors[1].0);
    assert!(errors[0].0.contains("another rank gave invalid arguments"), "{}", errors[0].0);
    for (_, uneven, dtype) in &errors {
        assert!(uneven.contains("does not divide among 2 ranks"), "{uneven}");
        assert!(dtype.contains("cast to f32 or f64"), "{dtype}");
    }
    Ok(())
}

#[test]
fn asynchronous_collectives_complete_in_order_and_overlap_the_caller() -> Result<()> {
    all_ok(on_threads(2, |g| {
        let first = g.all_reduce_vec_async(vec![g.rank() as f64 + 1.0; 5], ReduceOp::Sum);
        let x = Tensor::full(g.rank() as f64, (2, 2), DType::F32, Device::Cpu)?;
        let second = g.all_reduce_async(&x, ReduceOp::Mean);
        // Waited for in the reverse order of their start.
        let mean: Vec<f32> = second.wait()?.to_vec()?;
        assert_eq!(mean, vec![0.5; 4]);
        assert_eq!(first.wait()?, vec![3.0; 5]);
        Ok(())
    }))
}

#[test]
fn a_rank_that_leaves_fails_the_others_at_once() {
    let started = Instant::now();
    let results = on_threads(3, |g| {
        if g.rank() == 1 {
            return Ok(()); // returns early: its group is dropped, as when its thread fails
        }
        g.barrier()
    });
    let err = results[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("rank 1 left the group"), "{err}");
    assert!(results[2].is_err());
    assert!(started.elapsed() < Duration::from_secs(60), "waited for the default timeout");
}

#[test]
fn a_rank_that_never_comes_times_out_and_breaks_the_group() {
    let results = on_threads(2, |g| {
        g.set_timeout(Duration::from_millis(500));
        if g.rank() == 1 {
            std::thread::sleep(Duration::from_secs(2)); // alive, but late
            return (String::new(), None);
        }
        let started = Instant::now();
        let err = g.all_reduce_slice(&mut [1.0f32], ReduceOp::Sum).unwrap_err().to_string();
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(2), "{waited:?}");
        let later = g.barrier().unwrap_err().to_string();
        (format!("{err}\n{later}"), g.broken())
    });
    let (errs, broken) = &results[0];
    assert!(errs.contains("did not complete within 0.5 s") && errs.contains("RNN_DIST_TIMEOUT"), "{errs}");
    assert!(errs.contains("broken by an earlier failure"), "{errs}");
    assert!(broken.is_some());
}
