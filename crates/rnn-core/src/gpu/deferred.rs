//! Index checks of GPU ops, deferred to the next sync point.
//!
//! index_select, gather, scatter_add (and what is built on them: embedding, cross entropy,
//! one-hot rows) range-check every id on the device: the kernel records the first bad
//! position in a flag word (`index.rs`). Reading that flag right after the op would make the
//! host wait for the device after every index op, so the check is kept pending instead and
//! evaluated at the next sync point of the same device on the same thread: a read-back
//! (`to_cpu`, `to_vec`, `to_scalar`, ...) or `Device::synchronize`. The flags of all pending
//! checks are gathered into one buffer on the device and read back together with the data,
//! in the same wait. When one fired, that sync point returns the error the CPU returns at
//! once, `Error::IndexOutOfRange { op, index, size, shape }`, naming the op and the bad id,
//! as PyTorch's CUDA device-side asserts surface at the next synchronization.
//!
//! Checks are kept per thread, so that the thread that ran an op is the one that sees its
//! error. A pending check keeps its flag and ids buffers alive; once `MAX_PENDING_CHECKS`
//! checks or `MAX_PENDING_BYTES` of such buffers are pending, they are evaluated at once (one
//! host wait), which bounds the memory they hold.

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::plan::IdCheck;
use super::{elementwise, run, GpuStorage};
use crate::cpu::strided::StridedIndex;
use crate::cpu::CpuStorage;
use crate::{Error, Layout, Result};

/// Pending checks per device and thread after which they are evaluated at once.
pub(crate) const MAX_PENDING_CHECKS: usize = 16 * 1024;
/// Bytes of flag and ids buffers pending checks may keep alive (per device and thread).
pub(crate) const MAX_PENDING_BYTES: usize = 64 << 20;

/// One op's check: its description, its flag word and its ids.
struct Pending<S> {
    check: IdCheck,
    flag: S,
    ids: S,
}

/// One device's pending checks and the bytes of buffers they keep alive.
type Queue<S> = (Vec<Pending<S>>, usize);

/// The pending checks of one runtime on one thread, by device ordinal (each runtime keeps
/// one in a `thread_local!`, `GpuStorage::deferred`).
pub(crate) struct Deferred<S> {
    queues: RefCell<BTreeMap<usize, Queue<S>>>,
}

impl<S> Default for Deferred<S> {
    fn default() -> Self {
        Deferred { queues: RefCell::new(BTreeMap::new()) }
    }
}

fn bytes_of<S: GpuStorage>(s: &S) -> usize {
    s.len() * s.elem_dtype().size_in_bytes()
}

/// Keeps `check` (its flag and ids) for the next sync point of device `ordinal`; evaluates
/// the pending checks now when they reach the bounds above.
pub(crate) fn defer<S: GpuStorage>(ordinal: usize, check: &IdCheck, flag: &S, ids: &S) -> Result<()> {
    let pending = Pending { check: check.clone(), flag: flag.clone(), ids: ids.clone() };
    let full = S::deferred().with(|d| {
        let mut queues = d.queues.borrow_mut();
        let (checks, bytes) = queues.entry(ordinal).or_default();
        *bytes += bytes_of(flag) + bytes_of(ids);
        checks.push(pending);
        checks.len() >= MAX_PENDING_CHECKS || *bytes >= MAX_PENDING_BYTES
    });
    if full {
        let pending = take::<S>(ordinal);
        let flags = gather_flags(ordinal, &pending)?;
        report(&pending, &flags.download()?)?;
    }
    Ok(())
}

/// The checks pending on device `ordinal` on this thread (none are left pending).
fn take<S: GpuStorage>(ordinal: usize) -> Vec<Pending<S>> {
    S::deferred().with(|d| d.queues.borrow_mut().remove(&ordinal).map(|(checks, _)| checks).unwrap_or_default())
}

/// Reads `x` back, evaluating the pending checks of its device in the same wait.
pub(crate) fn download<S: GpuStorage>(x: &S) -> Result<CpuStorage> {
    let pending = take::<S>(x.ordinal());
    if pending.is_empty() {
        return x.download();
    }
    let flags = gather_flags(x.ordinal(), &pending)?;
    let mut both = S::download_all(&[x, &flags])?.into_iter();
    let (data, flags) = (both.next(), both.next());
    let (Some(data), Some(flags)) = (data, flags) else {
        return Err(Error::Msg("internal: a read-back returned too few buffers".into()));
    };
    report(&pending, &flags)?;
    Ok(data)
}

/// Waits for device `ordinal` (`wait`), evaluating its pending checks in that wait.
pub(crate) fn synchronize<S: GpuStorage>(ordinal: usize, wait: impl FnOnce() -> Result<()>) -> Result<()> {
    let pending = take::<S>(ordinal);
    if pending.is_empty() {
        return wait();
    }
    // Reading the flags back waits for everything queued before them.
    let flags = gather_flags(ordinal, &pending)?;
    report(&pending, &flags.download()?)
}

/// The flag words of `pending`, in order, in one buffer (copied on the device).
fn gather_flags<S: GpuStorage>(ordinal: usize, pending: &[Pending<S>]) -> Result<S> {
    if let [only] = pending {
        return Ok(only.flag.clone());
    }
    let flags: Vec<&S> = pending.iter().map(|p| &p.flag).collect();
    let word = Layout::contiguous(1);
    let layouts = vec![&word; flags.len()];
    let dtype = flags[0].elem_dtype();
    let program = elementwise::cat(&S::target_of(ordinal)?, dtype, &layouts, 0)?;
    run(ordinal, &flags, &program)
}

/// `Err(IndexOutOfRange)` for the first check (in op order) whose flag holds a position.
fn report<S: GpuStorage>(pending: &[Pending<S>], flags: &CpuStorage) -> Result<()> {
    let positions: Vec<u64> = match flags {
        // -1 (all ones) while no position was recorded.
        CpuStorage::I64(v) => v.iter().map(|&p| p as u64).collect(),
        CpuStorage::U32(v) => v.iter().map(|&p| if p == u32::MAX { u64::MAX } else { u64::from(p) }).collect(),
        _ => return Err(Error::Msg("internal: unreadable index check flags".into())),
    };
    let fired = pending.iter().zip(positions).find(|(_, position)| *position != u64::MAX);
    let Some((p, position)) = fired else { return Ok(()) };
    let c = &p.check;
    let offsets = StridedIndex::new(&c.layout).skip(position as usize).take(1);
    let index = p.ids.download()?.indices_at(c.op, offsets)?.first().copied().unwrap_or_default();
    Err(Error::IndexOutOfRange { op: c.op, index, size: c.size, shape: c.shape.clone() })
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use crate::wgpu::WgpuStorage;
    use crate::{Device, Error, Result, Tensor};

    /// The wgpu test device, or `None` where this machine has no adapter.
    fn device() -> Option<Device> {
        let device = Device::Wgpu(0);
        match WgpuStorage::check_device(0) {
            Ok(()) => Some(device),
            Err(e) => {
                assert!(!device.is_required_by_env(), "{e}");
                None
            }
        }
    }

    #[test]
    fn a_bad_id_is_reported_at_the_next_read_back_then_forgotten() -> Result<()> {
        let Some(device) = device() else { return Ok(()) };
        let x = Tensor::from_vec(vec![1f32, 2.0, 3.0], 3, device)?;
        let bad = Tensor::from_vec(vec![0i64, 7, 1], 3, device)?;
        let picked = x.index_select(&bad, 0)?;
        let fine = x.add(&x)?;
        let err = fine.to_vec1::<f32>().unwrap_err();
        assert!(matches!(&err, Error::IndexOutOfRange { op: "index_select", index: 7, size: 3, .. }), "{err:?}");
        // Reported once: the device keeps working.
        assert_eq!(fine.to_vec1::<f32>()?, vec![2.0, 4.0, 6.0]);
        drop(picked);
        Ok(())
    }

    #[test]
    fn the_first_bad_op_is_the_one_reported() -> Result<()> {
        let Some(device) = device() else { return Ok(()) };
        let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], (2, 2), device)?;
        let good = Tensor::from_vec(vec![1u32, 0], 2, device)?;
        let mut outs = Vec::new();
        for _ in 0..5 {
            outs.push(x.index_select(&good, 0)?);
        }
        let g = Tensor::from_vec(vec![0i64, -3, 1, 0], (2, 2), device)?;
        outs.push(x.gather(&g, 1)?);
        outs.push(x.index_select(&Tensor::from_vec(vec![9u32], 1, device)?, 1)?);
        let err = device.synchronize().unwrap_err();
        assert!(matches!(&err, Error::IndexOutOfRange { op: "gather", index: -3, size: 2, .. }), "{err:?}");
        device.synchronize()?;
        Ok(())
    }
}
