//! CUDA-only behavior that needs a real GPU (skipped without one, failing when
//! `RNN_REQUIRE_GPU` names cuda): running out of device memory is an `Error::OutOfMemory`
//! with the sizes, after which the device keeps working; the allocator's statistics move.
#![cfg(feature = "cuda")]

use std::sync::{Mutex, MutexGuard};

use rnn_core::{DType, Device, Error, Tensor};

/// The tests here share the device's pool and its statistics (the out-of-memory test empties
/// the cache, the pool test counts cache hits), and the test harness runs tests on several
/// threads: each test holds this lock for its whole body.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static POOL: Mutex<()> = Mutex::new(());
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn allocating_past_the_card_is_an_error_and_the_device_keeps_working() -> rnn_core::Result<()> {
    let _pool = one_at_a_time();
    rnn_testutil::on_gpu(Device::Cuda(0), |device| {
        let total = rnn_core::cuda::device_info(0)?.total_memory as usize;
        let err = Tensor::zeros(total / 4 * 2, DType::F32, device).unwrap_err();
        match err {
            Error::OutOfMemory { requested, total: t, .. } => assert!(requested > total / 2 && t == total, "{err:?}"),
            e => panic!("expected OutOfMemory, got {e:?}"),
        }
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], 3, device)?;
        assert_eq!(x.add(&x)?.to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
        Ok(())
    })
}

#[test]
fn the_pool_reuses_buffers_and_empties() -> rnn_core::Result<()> {
    let _pool = one_at_a_time();
    rnn_testutil::on_gpu(Device::Cuda(0), |device| {
        let x = Tensor::ones(1000, DType::F32, device)?;
        for _ in 0..5 {
            let _ = x.exp()?;
        }
        let stats = rnn_core::gpu_memory::memory_stats(device)?;
        assert!(stats.cache_hits >= 4 && stats.reserved >= stats.allocated, "{stats:?}");
        rnn_core::gpu_memory::empty_cache(device)?;
        let after = rnn_core::gpu_memory::memory_stats(device)?;
        assert_eq!(after.reserved, after.allocated, "{after:?}");
        Ok(())
    })
}
