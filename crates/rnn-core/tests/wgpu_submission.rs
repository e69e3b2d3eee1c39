//! Batched submission on wgpu: ops are recorded and submitted together, the host waits only
//! at read-backs, bind groups are reused, and results stay right across batch boundaries
//! (the `Info` ring reused), with tensors dropped and buffers recycled while their ops are
//! recorded but not yet submitted. On a machine without a wgpu adapter the tests say they
//! are skipped (and fail when `RNN_REQUIRE_GPU` requires wgpu).
#![cfg(feature = "wgpu")]

use std::sync::Mutex;

use rnn_core::wgpu::{submission_stats, SubmissionStats, MAX_BATCH_DISPATCHES};
use rnn_core::{Device, Result, Tensor};
use rnn_testutil::{usable, wgpu_test_device};

/// The counters are per device: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn wgpu() -> Option<(Device, usize)> {
    match usable(wgpu_test_device()) {
        Some(d @ Device::Wgpu(i)) => Some((d, i)),
        _ => None,
    }
}

/// Counter changes since `before`.
fn since(ordinal: usize, before: SubmissionStats) -> Result<SubmissionStats> {
    let now = submission_stats(ordinal)?;
    Ok(SubmissionStats {
        submits: now.submits - before.submits,
        syncs: now.syncs - before.syncs,
        dispatches: now.dispatches - before.dispatches,
        bind_groups_created: now.bind_groups_created - before.bind_groups_created,
        bind_groups_reused: now.bind_groups_reused - before.bind_groups_reused,
    })
}

#[test]
fn tiny_ops_are_submitted_together_and_waited_for_once() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu() else { return Ok(()) };
    let x = Tensor::from_vec(vec![1f32; 16], 16, device)?;
    let before = submission_stats(ordinal)?;
    let mut acc = x.clone();
    for _ in 0..100 {
        acc = acc.add(&x)?;
    }
    let queued = since(ordinal, before)?;
    assert_eq!((queued.syncs, queued.submits), (0, 0), "{queued:?}");
    assert_eq!(queued.dispatches, 100);
    assert_eq!(acc.to_vec1::<f32>()?, vec![101.0; 16]);
    let done = since(ordinal, before)?;
    assert_eq!((done.syncs, done.submits), (1, 1), "one batch, read back with one wait: {done:?}");
    Ok(())
}

#[test]
fn more_ops_than_a_batch_holds_stay_in_order() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu() else { return Ok(()) };
    let n = 4 * MAX_BATCH_DISPATCHES + 17;
    let one = Tensor::from_vec(vec![1f32, 2.0, 3.0], 3, device)?;
    let before = submission_stats(ordinal)?;
    let mut acc = Tensor::zeros(3, rnn_core::DType::F32, device)?;
    for i in 0..n {
        // Alternating ops whose `Info` differ, so a slice of the ring overwritten before its
        // op ran would show.
        acc = match i % 2 {
            0 => acc.add(&one)?,
            _ => acc.add_scalar(0.5)?.sub_scalar(0.5)?,
        };
    }
    let got = acc.to_vec1::<f32>()?;
    let want: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| v * n.div_ceil(2) as f32).collect();
    assert_eq!(got, want);
    let stats = since(ordinal, before)?;
    assert_eq!(stats.syncs, 1, "{stats:?}");
    let full_batches = stats.dispatches as usize / MAX_BATCH_DISPATCHES;
    assert!(stats.dispatches as usize >= 3 * n / 2, "{stats:?}");
    assert!(stats.submits as usize >= full_batches, "batches are bounded: {stats:?}");
    assert!(stats.submits as usize <= full_batches + 2, "{stats:?}");
    Ok(())
}

#[test]
fn recycled_buffers_keep_their_recorded_contents() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, _)) = wgpu() else { return Ok(()) };
    // Each upload lands in the buffer the previous step dropped while its read was still
    // recorded: the upload must not overtake that read.
    let mut kept = Vec::new();
    for i in 0..40 {
        let a = Tensor::from_vec(vec![i as f32; 16], 16, device)?;
        let b = a.mul_scalar(2.0)?;
        drop(a);
        let c = b.add_scalar(1.0)?;
        drop(b);
        kept.push(c);
    }
    for (i, c) in kept.iter().enumerate() {
        assert_eq!(c.to_vec1::<f32>()?, vec![2.0 * i as f32 + 1.0; 16], "step {i}");
    }
    Ok(())
}

#[test]
fn an_op_on_the_same_buffers_reuses_its_bind_group() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu() else { return Ok(()) };
    if std::env::var("RNN_GPU_MEMORY_POOL").is_ok_and(|v| v.trim() == "0") {
        eprintln!("SKIPPED: bind groups are not cached without the buffer pool");
        return Ok(());
    }
    let (x, y) = (Tensor::from_vec(vec![1f32; 64], 64, device)?, Tensor::from_vec(vec![2f32; 64], 64, device)?);
    drop(x.mul(&y)?);
    let before = submission_stats(ordinal)?;
    for _ in 0..20 {
        // The result takes the buffer the previous one gave back: the same three buffers.
        let z = x.mul(&y)?;
        drop(z);
    }
    let stats = since(ordinal, before)?;
    assert_eq!(stats.dispatches, 20);
    assert!(stats.bind_groups_reused >= 19, "{stats:?}");
    assert_eq!(x.mul(&y)?.to_vec1::<f32>()?, vec![2.0; 64]);
    Ok(())
}

/// Host cost of tiny ops: `cargo test --release -p rnn-core --test wgpu_submission --
/// --ignored --nocapture` (lavapipe runs the kernels on the same CPU cores).
#[test]
#[ignore = "timing; run by hand in release"]
fn tiny_op_overhead() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu() else { return Ok(()) };
    let x = Tensor::from_vec(vec![1.0f32; 16], 16, device)?;
    let y = Tensor::from_vec(vec![2.0f32; 16], 16, device)?;
    let per_op = |d: std::time::Duration, n: usize| d.as_secs_f64() * 1e6 / n as f64;
    for round in 0..5 {
        device.synchronize()?;
        // Recording alone: fewer ops than a batch holds, so nothing is submitted meanwhile.
        let n = MAX_BATCH_DISPATCHES - 1;
        let start = std::time::Instant::now();
        let outs: Vec<Tensor> = (0..n).map(|_| x.add(&y)).collect::<Result<_>>()?;
        let record = per_op(start.elapsed(), n);
        let start = std::time::Instant::now();
        rnn_core::wgpu::flush(ordinal)?;
        let submit = per_op(start.elapsed(), n);
        device.synchronize()?;
        let run = per_op(start.elapsed(), n);
        drop(outs);
        // 1000 ops (half the results dropped at once), submitted without waiting, then waited for.
        let n = 1000;
        let start = std::time::Instant::now();
        let mut outs = Vec::with_capacity(n);
        for i in 0..n {
            let z = x.add(&y)?;
            if i % 2 == 0 {
                outs.push(z);
            }
        }
        rnn_core::wgpu::flush(ordinal)?;
        let enqueue = per_op(start.elapsed(), n);
        device.synchronize()?;
        let total = per_op(start.elapsed(), n);
        println!(
            "round {round}: one batch: record {record:.2}, submit {submit:.2}, submit + run {run:.2} us/op; \
             1000 ops: enqueue + flush {enqueue:.2}, end-to-end {total:.2} us/op"
        );
    }
    Ok(())
}

/// Kernel timing: while on, results are unchanged, the summed kernel time is positive and
/// below the wall time of the timed work, and more work gives more kernel time; an adapter
/// without timestamp queries says so.
#[test]
fn kernel_timing_sums_the_kernels_device_time() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let Some((device, ordinal)) = wgpu() else { return Ok(()) };
    if let Err(e) = rnn_core::wgpu::set_kernel_timing(ordinal, true) {
        assert!(e.to_string().contains("timestamp"), "{e}");
        eprintln!("kernel timing skipped: {e}");
        return Ok(());
    }
    let a = Tensor::randn(0.0, 1.0, (96, 96), rnn_core::DType::F32, device)?;
    let timed = |ops: usize| -> Result<(f64, f64)> {
        rnn_core::wgpu::set_kernel_timing(ordinal, true)?;
        let start = std::time::Instant::now();
        let mut x = a.clone();
        for _ in 0..ops {
            x = x.matmul(&a)?.mul_scalar(0.01)?;
        }
        device.synchronize()?;
        let wall = start.elapsed().as_secs_f64();
        Ok((rnn_core::wgpu::kernel_time(ordinal)?.as_secs_f64(), wall))
    };
    let (few, few_wall) = timed(2)?;
    let (many, many_wall) = timed(40)?;
    let product = a.matmul(&a)?.to_vec2::<f32>()?;
    rnn_core::wgpu::set_kernel_timing(ordinal, false)?;
    assert_eq!(product, a.matmul(&a)?.to_vec2::<f32>()?, "timing changed a result");
    assert!(few > 0.0 && few <= few_wall, "2 ops: kernels {few} s, wall {few_wall} s");
    assert!(many > few && many <= many_wall, "40 ops: kernels {many} s (2 ops: {few}), wall {many_wall} s");
    Ok(())
}
