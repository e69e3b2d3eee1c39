//! Data-parallel training: every rank of a [`ProcessGroup`] holds the whole model, trains on
//! its own shard of each batch, and the gradients are averaged over the ranks before every
//! update, so all ranks take the same steps as one process with `world_size` times the batch.
//!
//! `Network::train` does it when `TrainingConfig::distributed` is set:
//! - at the start, the ranks check that they built the same model (parameter names, shapes
//!   and dtypes) with the same training settings and data size, then take rank 0's weights;
//! - each epoch, every rank reads its own shard of the epoch's order ([`Batches::sharded`]:
//!   the order padded by wrapping to a multiple of the ranks, as PyTorch's
//!   `DistributedSampler`);
//! - during backward, gradients are copied into buckets of about
//!   [`DataParallel::bucket_bytes`] (25 MiB by default) and each bucket's all_reduce starts
//!   as soon as its last gradient is ready ([`GradBuckets`]);
//! - loss and accuracy are summed over the ranks (each rank validates on its slice of the
//!   validation set), so every rank sees the same history and makes the same early-stopping
//!   and schedule decisions; buffers (BatchNorm statistics) are rank 0's at each epoch's end;
//! - only rank 0 prints progress: files are the caller's to write on rank 0 alone
//!   ([`DataParallel::is_main`]).
//!
//! [`Batches::sharded`]: crate::data::Batches::sharded

mod buckets;
mod run;

pub(crate) use run::ParallelRun;

pub use buckets::{GradBuckets, Reduction, DEFAULT_BUCKET_BYTES};
pub use rnn_dist::{Backend, ProcessGroup, ReduceOp};

use rnn_core::{no_grad, Error, Result, Tensor};

/// How `Network::train` trains in parallel: the group of ranks, and the bucket size.
#[derive(Clone, Debug)]
pub struct DataParallel {
    pub group: ProcessGroup,
    /// Gradients are averaged in buckets of about this many bytes (default 25 MiB): smaller
    /// buckets start communicating sooner, larger ones make fewer calls.
    pub bucket_bytes: usize,
}

impl DataParallel {
    pub fn new(group: ProcessGroup) -> DataParallel {
        DataParallel { group, bucket_bytes: DEFAULT_BUCKET_BYTES }
    }

    pub fn with_bucket_bytes(mut self, bytes: usize) -> DataParallel {
        self.bucket_bytes = bytes;
        self
    }

    pub fn rank(&self) -> usize {
        self.group.rank()
    }

    pub fn world_size(&self) -> usize {
        self.group.world_size()
    }

    /// Whether this is rank 0, the one that prints and writes files.
    pub fn is_main(&self) -> bool {
        self.group.rank() == 0
    }
}

/// Fails on every rank, naming the ranks and values that differ, unless every rank gives the
/// same `fields` (name, value). Values are compared exactly: give integers below 2^53.
pub fn check_same_on_all_ranks(
    group: &ProcessGroup,
    op: &'static str,
    what: &str,
    fields: &[(&str, f64)],
) -> Result<()> {
    let local: Vec<f64> = fields.iter().map(|f| f.1).collect();
    let all = group.all_gather_slice(&local)?;
    let mut differences = Vec::new();
    for (rank, theirs) in all.chunks(fields.len().max(1)).enumerate().skip(1) {
        for ((name, _), (ours, other)) in fields.iter().zip(all.iter().zip(theirs)) {
            if ours.to_bits() != other.to_bits() {
                differences.push(format!("rank {rank} has {name} {other} where rank 0 has {ours}"));
            }
        }
    }
    if differences.is_empty() {
        return Ok(());
    }
    let msg = format!("the ranks disagree on {what}: {}", differences.join("; "));
    Err(Error::invalid(op, msg))
}

/// A 64-bit FNV-1a hash of the names, shapes and dtypes of `tensors`, as two 32-bit halves
/// (each exact in an f64), for [`check_same_on_all_ranks`].
pub fn structure_hash(tensors: &[(String, Tensor)]) -> [f64; 2] {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, t) in tensors {
        for byte in format!("{name}:{:?}:{};", t.dims(), t.dtype()).bytes() {
            hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    [(hash >> 32) as f64, (hash & 0xffff_ffff) as f64]
}

/// Checks that every rank has the same tensors (names, shapes, dtypes): `what` names them in
/// the error ("model", "parameters").
pub fn check_same_structure(
    group: &ProcessGroup,
    op: &'static str,
    what: &str,
    tensors: &[(String, Tensor)],
) -> Result<()> {
    let [hi, lo] = structure_hash(tensors);
    let values: usize = tensors.iter().map(|(_, t)| t.elem_count()).sum();
    let fields = [
        ("tensors", tensors.len() as f64),
        ("values", values as f64),
        ("structure hash (high)", hi),
        ("structure hash (low)", lo),
    ];
    let what = format!("the {what} (every rank must build the same one: names, shapes and dtypes)");
    check_same_on_all_ranks(group, op, &what, &fields)
}

/// Replaces every tensor's values with rank 0's, in place.
pub fn broadcast_from_main(group: &ProcessGroup, tensors: &[Tensor]) -> Result<()> {
    if group.world_size() == 1 {
        return Ok(());
    }
    no_grad(|| {
        for t in tensors {
            t.assign(&group.broadcast(t, 0)?)?;
        }
        Ok(())
    })
}

/// The seed of this rank's random draws (dropout) from the run's `seed`: rank 0 keeps `seed`,
/// so one rank draws what a run without a group draws.
pub fn rank_seed(seed: u64, rank: usize) -> u64 {
    seed ^ (rank as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
}
