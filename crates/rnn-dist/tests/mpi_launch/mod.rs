//! The MPI group at 2 and 4 processes: each test starts `mpirun` on this very test binary,
//! which then runs one of the `child_*` tests (ignored in a plain run) as every rank.
//! OpenMPI over localhost, `--oversubscribe` (more ranks than cores).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rnn_core::Result;
use rnn_dist::{ProcessGroup, ReduceOp};

/// How long a test lets mpirun run.
const MPIRUN_DEADLINE: Duration = Duration::from_secs(30);

/// What one mpirun printed, whether it exited successfully, how long it ran, and whether it
/// had to be killed at the deadline (OpenMPI 4.1's mpirun sometimes hangs or crashes in its
/// own teardown after a rank failed, when every rank is already gone).
struct Run {
    log: String,
    success: bool,
    took: Duration,
    killed: bool,
}

/// Runs child test `child` on `np` ranks under mpirun with `env`.
fn mpirun(np: usize, child: &str, env: &[(&str, &str)]) -> Run {
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
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut proc = cmd.spawn().expect("mpirun could not start: install OpenMPI (openmpi-bin)");
    let readers = [read_all(proc.stdout.take()), read_all(proc.stderr.take())];
    let mut killed = false;
    let status = loop {
        if let Some(status) = proc.try_wait().expect("waiting for mpirun") {
            break Some(status);
        }
        if started.elapsed() > MPIRUN_DEADLINE {
            let _ = proc.kill();
            let _ = proc.wait();
            killed = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    let log = readers.into_iter().map(|r| r.join().unwrap_or_default()).collect();
    Run { log, success: status.is_some_and(|s| s.success()), took, killed }
}

fn read_all(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
}

/// The group of a child rank; `None` when the child test runs outside mpirun (a plain
/// `--ignored` run), where it has nothing to do.
fn child_group() -> Option<ProcessGroup> {
    rnn_dist::launch::launcher_world_size()?;
    Some(ProcessGroup::from_env().expect("the MPI group"))
}

#[test]
fn mpi_groups_of_2_and_4_pass_the_suite() {
    // 2 ranks again with the waiting calls run on their callers' threads.
    for (np, direct) in [(2, "0"), (4, "0"), (2, "1")] {
        let run = mpirun(np, "child_suite", &[("RNN_DIST_DIRECT", direct)]);
        assert!(run.success, "{np} ranks, direct {direct} (killed at the deadline: {}):\n{}", run.killed, run.log);
        // One line per rank, each written at once (the ranks' outputs interleave otherwise).
        for rank in 0..np {
            let line = format!("rank {rank} of {np}: the suite passed");
            assert!(run.log.contains(&line), "{line} is missing:\n{}", run.log);
        }
    }
}

#[test]
#[ignore = "a rank of mpi_groups_of_2_and_4_pass_the_suite"]
fn child_suite() -> Result<()> {
    let Some(g) = child_group() else { return Ok(()) };
    assert_eq!(g.backend(), rnn_dist::Backend::Mpi);
    assert_eq!(g.direct_calls(), std::env::var("RNN_DIST_DIRECT").is_ok_and(|v| v == "1"));
    // The same group again while a handle lives.
    assert_eq!(ProcessGroup::from_env()?.rank(), g.rank());
    crate::suite::all(&g)?;
    crate::suite::mismatches(&g)?;
    let overlapped = g.all_reduce_vec_async(vec![1.0f64; 3], ReduceOp::Sum);
    g.barrier()?;
    assert_eq!(overlapped.wait()?, vec![g.world_size() as f64; 3]);
    // Without the header check (turned off on every rank at the same point).
    g.set_header_checks(false);
    crate::suite::slices::<f32>(&g)?;
    g.set_header_checks(true);
    println!("rank {} of {}: the suite passed", g.rank(), g.world_size());
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
    println!("rank {} is process {}", g.rank(), std::process::id());
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
    for direct in ["0", "1"] {
        for how in ["error", "panic", "abort", "stall"] {
            failing_rank_1(how, direct);
        }
    }
}

/// Rank 1 of 3 fails `how` before an all_reduce, run directly on its callers' threads or not.
fn failing_rank_1(how: &str, direct: &str) {
    let env = [("RNN_TEST_FAILURE", how), ("RNN_DIST_TIMEOUT", "3"), ("RNN_DIST_DIRECT", direct)];
    let run = mpirun(3, "child_failure", &env);
    let log = &run.log;
    assert!(!run.success, "{how}, direct {direct}: mpirun succeeded:\n{log}");
    // Every rank has stopped (mpirun may have been killed in its teardown; the ranks
    // must be gone all the same).
    let ranks: Vec<u32> = log.lines().filter_map(|l| l.split(" is process ").nth(1)?.trim().parse().ok()).collect();
    assert_eq!(ranks.len(), 3, "{how}, direct {direct}:\n{log}");
    for pid in ranks {
        assert!(!running(pid), "{how}, direct {direct}: rank process {pid} still runs after {:?}:\n{log}", run.took);
    }
    if how == "stall" || !run.killed {
        assert!(run.took < MPIRUN_DEADLINE, "{how}, direct {direct}: took {:?}:\n{log}", run.took);
    }
    if how == "stall" {
        // The others time out themselves, with the error naming the cause and the knob;
        // a direct call cannot return, so its watchdog ends the process.
        assert!(log.contains("did not complete within 3.0 s") && log.contains("RNN_DIST_TIMEOUT"), "{log}");
        assert_eq!(log.contains("so this process ends"), direct == "1", "{log}");
    }
}

/// Whether process `pid` exists and is not a zombie.
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the parenthesized command name.
    let state = stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next());
    matches!(state, Some(s) if s != "Z" && s != "X")
}
