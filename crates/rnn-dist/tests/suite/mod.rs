//! The collective checks every backend passes: run by each rank of a group (threads in one
//! process, or processes under mpirun), each rank computing what every other rank gave from
//! the same seeds, so each can check its own result.
//!
//! Values are random multiples of 1/8 below 2^10 in magnitude: sums of a few of them are
//! exact in f32 and f64 whatever the order of the additions, so results are compared
//! exactly even where MPI picks its own reduction order.

use rand::{Rng, SeedableRng};
use rnn_core::{DType, Device, Result, Tensor};
use rnn_dist::{CommElem, ProcessGroup, ReduceOp};

/// Sizes with an empty buffer, a single element, odd lengths and one past a power of two.
pub const SIZES: [usize; 5] = [0, 1, 7, 12, 1025];

/// What rank `rank` contributes to a call of `len` elements with `salt` telling calls apart.
pub fn contribution(rank: usize, len: usize, salt: u64) -> Vec<f64> {
    let seed = (rank as u64) << 40 ^ (len as u64) << 8 ^ salt;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(-8192i32..8192) as f64 / 8.0).collect()
}

fn cast<T: CommElem>(v: &[f64]) -> Vec<T> {
    v.iter().map(|&x| T::from_f64(x)).collect()
}

/// The sum over ranks of their contributions, in f64 (exact, see the module doc).
fn expected_sum(world: usize, len: usize, salt: u64) -> Vec<f64> {
    let mut total = vec![0.0; len];
    for r in 0..world {
        total.iter_mut().zip(contribution(r, len, salt)).for_each(|(t, x)| *t += x);
    }
    total
}

fn expect_eq<T: CommElem + PartialEq>(what: &str, got: &[T], want: &[T]) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    Err(rnn_core::Error::Msg(format!(
        "{what}: {} elements vs {} expected, first difference at {first:?}",
        got.len(),
        want.len()
    )))
}

/// Every collective on slices of `T` at every size, with sum and mean.
pub fn slices<T: CommElem + PartialEq>(g: &ProcessGroup) -> Result<()> {
    let (rank, n) = (g.rank(), g.world_size());
    for (i, &len) in SIZES.iter().enumerate() {
        let salt = i as u64;
        let mine = contribution(rank, len, salt);
        let sum = expected_sum(n, len, salt);
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            let mut data: Vec<T> = cast(&mine);
            g.all_reduce_slice(&mut data, op)?;
            let want: Vec<T> = if op == ReduceOp::Sum { cast(&sum) } else { mean_of::<T>(&sum, n) };
            expect_eq(&format!("all_reduce {op:?} of {len}"), &data, &want)?;
        }
        for root in [0, n - 1] {
            let mut data: Vec<T> = cast(&mine);
            g.broadcast_slice(&mut data, root)?;
            expect_eq(&format!("broadcast from {root} of {len}"), &data, &cast(&contribution(root, len, salt)))?;
        }
        let gathered = g.all_gather_slice::<T>(&cast(&mine))?;
        let all: Vec<f64> = (0..n).flat_map(|r| contribution(r, len, salt)).collect();
        expect_eq(&format!("all_gather of {len}"), &gathered, &cast(&all))?;
        reduce_scatter::<T>(g, len * n, salt)?;
        g.barrier()?;
    }
    Ok(())
}

/// The mean as the backends compute it: the sum in `T`, divided by `n` in `T`.
fn mean_of<T: CommElem>(sum: &[f64], n: usize) -> Vec<T> {
    match T::DTYPE {
        DType::F64 => cast(&sum.iter().map(|s| s / n as f64).collect::<Vec<_>>()),
        _ => cast(&sum.iter().map(|s| ((*s as f32) / n as f32) as f64).collect::<Vec<_>>()),
    }
}

fn reduce_scatter<T: CommElem + PartialEq>(g: &ProcessGroup, len: usize, salt: u64) -> Result<()> {
    let (rank, n) = (g.rank(), g.world_size());
    let sum = expected_sum(n, len, salt + 100);
    let chunk = len / n;
    for op in [ReduceOp::Sum, ReduceOp::Mean] {
        let got = g.reduce_scatter_slice::<T>(&cast(&contribution(rank, len, salt + 100)), op)?;
        let part = &sum[rank * chunk..(rank + 1) * chunk];
        let want: Vec<T> = if op == ReduceOp::Sum { cast(part) } else { mean_of::<T>(part, n) };
        expect_eq(&format!("reduce_scatter {op:?} of {len}"), &got, &want)?;
    }
    Ok(())
}

/// The tensor forms on `device` (f32, and f64 where the device stores it): shapes and values.
pub fn tensors(g: &ProcessGroup, device: Device) -> Result<()> {
    let (rank, n) = (g.rank(), g.world_size());
    let dims = [2 * n, 3];
    let len = dims.iter().product();
    let mine = Tensor::from_vec(contribution(rank, len, 7), &dims[..], Device::Cpu)?;
    let sum = Tensor::from_vec(expected_sum(n, len, 7), &dims[..], Device::Cpu)?;
    for dtype in [DType::F32, DType::F64] {
        if !rnn_testutil::supports(device, dtype) {
            continue; // wgpu stores no f64
        }
        let x = mine.to_dtype(dtype)?.to_device(device)?;
        let reduced = g.all_reduce(&x, ReduceOp::Sum)?;
        check_tensor("all_reduce", &reduced, &sum, device)?;
        let mean = g.all_reduce(&x, ReduceOp::Mean)?;
        check_tensor("all_reduce mean", &mean, &(sum.clone() / n as f64)?, device)?;
        let root = Tensor::from_vec(contribution(n - 1, len, 7), &dims[..], Device::Cpu)?;
        check_tensor("broadcast", &g.broadcast(&x, n - 1)?, &root, device)?;
        let parts: Vec<Tensor> =
            (0..n).map(|r| Tensor::from_vec(contribution(r, len, 7), &dims[..], Device::Cpu)).collect::<Result<_>>()?;
        check_tensor("all_gather", &g.all_gather(&x)?, &Tensor::cat(&parts, 0)?, device)?;
        let scattered = g.reduce_scatter(&x, ReduceOp::Sum)?;
        check_tensor("reduce_scatter", &scattered, &sum.narrow(0, 2 * rank, 2)?, device)?;
    }
    Ok(())
}

fn check_tensor(what: &str, got: &Tensor, want: &Tensor, device: Device) -> Result<()> {
    if got.device() != device || got.dims() != want.dims() {
        return Err(rnn_core::Error::Msg(format!(
            "{what}: got {:?} on {:?}, expected {:?} on {device:?}",
            got.dims(),
            got.device(),
            want.dims()
        )));
    }
    let got: Vec<f64> = got.to_device(Device::Cpu)?.to_dtype(DType::F64)?.to_vec()?;
    let want: Vec<f64> = want.to_dtype(DType::F64)?.to_vec()?;
    // f32 results of a mean may differ from the f64 mean in the last bit.
    let close = got.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1.0));
    if close {
        Ok(())
    } else {
        Err(rnn_core::Error::Msg(format!("{what}: values differ: {got:?} vs {want:?}")))
    }
}

/// Everything above, on the CPU.
pub fn all(g: &ProcessGroup) -> Result<()> {
    slices::<f32>(g)?;
    slices::<f64>(g)?;
    tensors(g, Device::Cpu)
}

/// Calls that disagree across ranks (lengths, dtypes, collectives) fail on every rank with
/// the cause, and the group is still usable afterwards. Needs at least 2 ranks.
pub fn mismatches(g: &ProcessGroup) -> Result<()> {
    let (rank, n) = (g.rank(), g.world_size());
    let last = rank == n - 1;
    let lengths = g.all_reduce_slice(&mut vec![1.0f32; 4 + last as usize], ReduceOp::Sum);
    let dtypes = if last {
        g.all_reduce_slice(&mut [1.0f64; 4], ReduceOp::Sum)
    } else {
        g.all_reduce_slice(&mut [1.0f32; 4], ReduceOp::Sum)
    };
    let collectives = if last { g.barrier() } else { g.all_gather_slice(&[1.0f32]).map(drop) };
    let expected = [
        (lengths, "different element counts (from 4 to 5)"),
        (dtypes, "different dtypes"),
        (collectives, "different collectives"),
    ];
    for (result, want) in expected {
        let err = result.err().map(|e| e.to_string()).unwrap_or_default();
        if !err.contains(want) {
            return Err(rnn_core::Error::Msg(format!("rank {rank}: expected an error with {want:?}, got {err:?}")));
        }
    }
    let mut ok = [rank as f32];
    g.all_reduce_slice(&mut ok, ReduceOp::Sum)?;
    let want = (n * (n - 1) / 2) as f32;
    if ok[0] != want {
        return Err(rnn_core::Error::Msg(format!("after the mismatches: sum {} instead of {want}", ok[0])));
    }
    Ok(())
}
