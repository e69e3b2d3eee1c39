//! The host cache on private pools, so that counts are exact while other tests allocate.

use super::{size_class, HostPool, MIN_POOLED_BYTES};

const MIB: u64 = 1 << 20;
/// Elements of an f32 buffer above the pooling threshold.
const N: usize = 3000;

fn class_of_f32(n: usize) -> u64 {
    size_class((n * 4) as u64)
}

#[test]
fn a_dropped_buffer_is_reused_by_the_next_request_of_its_class() {
    let pool = HostPool::new(64 * MIB);
    let v = pool.for_overwrite::<f32>(N).unwrap();
    let ptr = v.as_ptr();
    pool.release(v);
    // 2900 elements round up to the same class as 3000.
    assert_eq!(class_of_f32(2900), class_of_f32(N));
    let again = pool.for_overwrite::<f32>(2900).unwrap();
    assert_eq!(again.as_ptr(), ptr);
    assert_eq!(again.len(), 2900);
    let s = pool.stats();
    assert_eq!((s.hits, s.misses, s.returned), (1, 1, 1));
    pool.release(again);
}

#[test]
fn stats_count_cached_bytes_and_their_peak() {
    let pool = HostPool::new(64 * MIB);
    let (a, b) = (pool.zeros::<f32>(N).unwrap(), pool.zeros::<f64>(N).unwrap());
    assert_eq!(pool.stats().cached, 0);
    pool.release(a);
    pool.release(b);
    let both = class_of_f32(N) + size_class((N * 8) as u64);
    let s = pool.stats();
    assert_eq!((s.cached, s.peak_cached, s.misses, s.returned, s.cap), (both, both, 2, 2, 64 * MIB));
    // An f64 request does not take the f32 block (another layout).
    let c = pool.zeros::<f64>(N).unwrap();
    assert_eq!(pool.stats().cached, class_of_f32(N));
    pool.release(c);
    pool.empty_cache();
    let s = pool.stats();
    assert_eq!((s.cached, s.peak_cached, s.hits), (0, both, 1));
}

#[test]
fn the_cap_bounds_the_cached_bytes_and_zero_turns_caching_off() {
    let class = class_of_f32(N);
    let pool = HostPool::new(class);
    let (a, b) = (pool.zeros::<f32>(N).unwrap(), pool.zeros::<f32>(N).unwrap());
    pool.release(a);
    pool.release(b);
    let s = pool.stats();
    assert_eq!((s.cached, s.returned), (class, 1));

    let off = HostPool::new(0);
    let v = off.zeros::<f32>(N).unwrap();
    assert_eq!(v.len(), N);
    off.release(v);
    assert_eq!(off.stats(), super::HostMemoryStats::default());
}

#[test]
fn a_reused_buffer_handed_out_as_zeros_is_zeros() {
    let pool = HostPool::new(64 * MIB);
    let mut v = pool.for_overwrite::<f32>(N).unwrap();
    v.fill(7.5);
    pool.release(v);
    let z = pool.zeros::<f32>(N).unwrap();
    assert_eq!(pool.stats().hits, 1);
    assert!(z.iter().all(|&x| x == 0.0));
}

#[test]
fn overwrite_never_exposes_bytes_the_last_owner_did_not_write() {
    let pool = HostPool::new(64 * MIB);
    // A class-sized vector from elsewhere, with only 10 elements written.
    let mut foreign: Vec<u32> = Vec::with_capacity(class_of_f32(N) as usize / 4);
    foreign.extend(1..=10);
    pool.release(foreign);
    assert_eq!(pool.stats().returned, 1);
    let v = pool.for_overwrite::<u32>(N).unwrap();
    assert_eq!(pool.stats().hits, 1);
    assert_eq!(&v[..10], &(1..=10).collect::<Vec<u32>>()[..]);
    assert!(v[10..].iter().all(|&x| x == 0));
}

#[test]
fn small_and_odd_sized_buffers_bypass_the_cache() {
    let pool = HostPool::new(64 * MIB);
    let small = pool.zeros::<f32>(MIN_POOLED_BYTES / 4 - 1).unwrap();
    pool.release(small);
    // A capacity that is not a size class cannot be handed out as one.
    let odd: Vec<f32> = Vec::with_capacity(N + 1);
    assert_ne!(class_of_f32(N + 1), ((N + 1) * 4) as u64);
    pool.release(odd);
    let s = pool.stats();
    assert_eq!((s.hits, s.misses, s.returned, s.cached), (0, 0, 0, 0));
}

#[test]
fn an_impossible_size_is_an_out_of_memory_error() {
    let pool = HostPool::new(64 * MIB);
    let err = pool.zeros::<f32>(usize::MAX / 2).unwrap_err();
    assert!(matches!(err, crate::Error::OutOfMemory { .. }), "{err:?}");
    let err = pool.for_overwrite::<f64>(1 << 60).unwrap_err();
    assert!(matches!(err, crate::Error::OutOfMemory { .. }), "{err:?}");
}

#[test]
fn threads_sharing_a_pool_never_share_a_buffer() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 200;
    let pool = HostPool::new(64 * MIB);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let pool = &pool;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let n = N + (round % 3) * 700;
                    let mut v = pool.for_overwrite::<u32>(n).unwrap();
                    let mark = (t * ROUNDS + round) as u32;
                    v.fill(mark);
                    std::thread::yield_now();
                    assert!(v.iter().all(|&x| x == mark), "a buffer was handed out twice");
                    pool.release(v);
                }
            });
        }
    });
    let s = pool.stats();
    assert_eq!(s.hits + s.misses, (THREADS * ROUNDS) as u64);
    assert_eq!(s.returned, (THREADS * ROUNDS) as u64);
    // At most one block per thread and class was ever needed at once.
    assert!(s.misses <= (THREADS * 3) as u64, "{s:?}");
}
