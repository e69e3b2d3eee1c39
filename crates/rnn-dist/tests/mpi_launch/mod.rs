//! The MPI group at 2 and 4 processes: each test starts `mpirun` on this very test binary,
//! which then runs one of the `child_*` tests (ignored in a plain run) as every rank.
//! OpenMPI over localhost, `--oversubscribe` (more ranks than cores).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rnn_core::Result;
use rnn_dist::{ProcessGroup, ReduceOp};

/// Runs child test `child` on `np` ranks under mpirun with `env`, and returns its output and
/// how long it took.
fn mpirun(np: usize, child: &str, env: &[(&str, &str)]) -> (Output, Duration) {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = Command::new("mpirun");
    cmd.args(["-np", &np.to_string(), "--oversubscribe"]);
    for (key, value) in env {
        cmd.args(["-x", &format!("{key}={value}")]);
    }
    cmd.arg(exe).args(["--ignored", "--exact", "--nocapture", "--test-threads=1"]);
    cmd.arg(format!("mpi_launch::{child}"));
    // OpenMPI refuses to run as root (containers, CI) unless told it is on purpose.
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let started = Instant::now();
    let output = cmd.output().expect("mpirun could not start: install OpenMPI (openmpi-bin)");
    (output, started.elapsed())
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The group of a child rank; `None` when the child test runs outside mpirun (a plain
/// `--ignored` run), where it has nothing to do.
fn child_group() -> Option<ProcessGroup> {
    rnn_dist::launch::launcher_world_size()?;
    Some(ProcessGroup::from_env().expect("the MPI group"))
}

#[test]
fn mpi_groups_of_2_and_4_pass_the_suite() {
    for np in [2, 4] {
        let (output, _) = mpirun(np, "child_suite", &[]);
        let log = text(&output);
        assert!(output.status.success(), "{np} ranks:\n{log}");
        assert_eq!(log.matches("test result: ok. 1 passed").count(), np, "{log}");
    }
}

#[test]
#[ignore = "a rank of mpi_groups_of_2_and_4_pass_the_suite"]
fn child_suite() -> Result<()> {
    let Some(g) = child_group() else { return Ok(()) };
    assert_eq!(g.backend(), rnn_dist::Backend::Mpi);
    // The same group again while a handle lives.
    assert_eq!(ProcessGroup::from_env()?.rank(), g.rank());
    crate::suite::all(&g)?;
    crate::suite::mismatches(&g)?;
    let overlapped = g.all_reduce_vec_async(vec![1.0f64; 3], ReduceOp::Sum);
    g.barrier()?;
    assert_eq!(overlapped.wait()?, vec![g.world_size() as f64; 3]);
    Ok(())
}

/// How a child rank fails, by the value of RNN_TEST_FAILURE on rank 1.
fn fail_rank_1(how: &str) {
    match how {
        "error" => {
            eprintln!("rank 1: failing with an error");
            std::process::exit(3)
        }
        "panic" => panic!("rank 1: a panic"),
        "abort" => std::process::abort(),
        "stall" => std::thread::sleep(Duration::from_secs(60)),
        _ => {}
    }
}

#[test]
#[ignore = "a rank of a_failing_rank_stops_the_others_within_the_timeout"]
fn child_failure() -> Result<()> {
    let Some(g) = child_group() else { return Ok(()) };
    g.barrier()?;
    if g.rank() == 1 {
        fail_rank_1(&std::env::var("RNN_TEST_FAILURE").unwrap_or_default());
    }
    let mut grads = vec![1.0f32; 1000];
    match g.all_reduce_slice(&mut grads, ReduceOp::Mean) {
        Ok(()) => Ok(()),
        Err(e) => {
            eprintln!("rank {}: {e}", g.rank());
            Err(e)
        }
    }
}

#[test]
fn a_failing_rank_stops_the_others_within_the_timeout() {
    for how in ["error", "panic", "abort", "stall"] {
        let env = [("RNN_TEST_FAILURE", how), ("RNN_DIST_TIMEOUT", "3")];
        let (output, took) = mpirun(3, "child_failure", &env);
        let log = text(&output);
        assert!(!output.status.success(), "{how}: mpirun succeeded:\n{log}");
        assert!(took < Duration::from_secs(40), "{how}: took {took:?}:\n{log}");
        if how == "stall" {
            // The others time out themselves, with the error naming the cause and the knob.
            assert!(log.contains("did not complete within 3.0 s") && log.contains("RNN_DIST_TIMEOUT"), "{log}");
        }
    }
}
