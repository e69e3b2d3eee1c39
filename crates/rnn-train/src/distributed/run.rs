//! What `Network::train` does differently on a rank of a data-parallel group.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rnn_core::{GradStore, Result, Tensor};

use super::{broadcast_from_main, check_same_on_all_ranks, check_same_structure, DataParallel, GradBuckets};
use crate::config::TrainingConfig;
use crate::data::Batches;
use crate::fit::Evaluation;
use crate::network::Network;

const OP: &str = "Network::train (data parallel)";

/// One rank's part of a `train` call.
pub(crate) struct ParallelRun {
    dp: DataParallel,
    buckets: GradBuckets,
    /// Nanoseconds spent in [`Reduction::finish`](super::buckets::Reduction::finish) since the
    /// last [`ParallelRun::take_comm_wait`]: the communication backward did not hide.
    comm_wait_ns: AtomicU64,
}

impl ParallelRun {
    /// Checks that every rank has the same model, settings and data size (an error on every
    /// rank otherwise, before any training), then gives every rank rank 0's weights.
    pub fn start(
        dp: &DataParallel,
        net: &Network,
        config: &TrainingConfig,
        samples: [usize; 2],
    ) -> Result<ParallelRun> {
        let group = &dp.group;
        check_same_structure(group, OP, "model", &net.state())?;
        let seed = config.seed;
        let settings = [
            ("training samples", samples[0] as f64),
            ("validation samples", samples[1] as f64),
            ("batch_size", config.batch_size as f64),
            ("max_epochs", config.max_epochs as f64),
            ("shuffle", config.shuffle as u8 as f64),
            ("seed (high 32 bits)", (seed >> 32) as f64),
            ("seed (low 32 bits)", (seed & 0xffff_ffff) as f64),
            ("bucket_bytes", dp.bucket_bytes as f64),
        ];
        check_same_on_all_ranks(group, OP, "the training settings or data", &settings)?;
        let state: Vec<Tensor> = net.state().into_iter().map(|(_, t)| t).collect();
        broadcast_from_main(group, &state)?;
        let params = net.named_parameters().into_iter().map(|(_, t)| t).collect();
        let buckets = GradBuckets::new(group.clone(), params, dp.bucket_bytes)?;
        Ok(ParallelRun { dp: dp.clone(), buckets, comm_wait_ns: AtomicU64::new(0) })
    }

    pub fn rank(&self) -> usize {
        self.dp.rank()
    }

    pub fn is_main(&self) -> bool {
        self.dp.is_main()
    }

    /// This rank's batches of `epoch` over `n` samples.
    pub fn batches(&self, n: usize, config: &TrainingConfig, epoch: u64) -> Result<Batches> {
        let (rank, world) = (self.dp.rank(), self.dp.world_size());
        Batches::sharded(n, config.batch_size, config.shuffle, config.seed, epoch, rank, world)
    }

    /// The gradients of `loss` averaged over the ranks (buckets launched during backward),
    /// and the mean of the ranks' losses: NaN or infinite when any rank's is, so every rank
    /// takes the same decision about the step.
    pub fn backward(&self, loss: &Tensor) -> Result<(GradStore, f64)> {
        let local = loss.to_f64_scalar()?;
        let mut reduction = self.buckets.start(&[local]);
        let mut grads = GradStore::new();
        loss.backward_with_hook(&mut grads, &mut |param, grad| reduction.ready(param, grad))?;
        // The local gradients are in the buckets now: their buffers go back to the cache.
        drop(grads);
        let waiting = Instant::now();
        let (averaged, extras) = reduction.finish()?;
        self.comm_wait_ns.fetch_add(waiting.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok((averaged, extras.first().copied().unwrap_or(f64::NAN)))
    }

    /// Whether other ranks of the group are threads of this process, sharing its CPU thread
    /// pool: a step blocked in a collective must then not hold one of the pool's workers.
    pub fn shares_process(&self) -> bool {
        self.dp.group.backend() == rnn_dist::Backend::Threads
    }

    /// Seconds this rank waited for averaged gradients after its backward passes since the
    /// last call (then zero again).
    pub fn take_comm_wait(&self) -> f64 {
        self.comm_wait_ns.swap(0, Ordering::Relaxed) as f64 * 1e-9
    }

    /// The rows `start..start + len` of `n` that this rank evaluates (contiguous slices whose
    /// sizes differ by at most one).
    pub fn slice(&self, n: usize) -> (usize, usize) {
        let (rank, world) = (self.dp.rank(), self.dp.world_size());
        let start = rank * n / world;
        (start, (rank + 1) * n / world - start)
    }

    /// The evaluation of all ranks together from each rank's sums (see `Totals::sums`).
    pub fn combine(&self, sums: [f64; 4]) -> Result<Evaluation> {
        let mut all = sums;
        self.dp.group.all_reduce_slice(&mut all, rnn_dist::ReduceOp::Sum)?;
        Ok(Evaluation::from_sums(all))
    }

    /// Gives every rank rank 0's buffers (BatchNorm running statistics), which each rank
    /// updated from its own batches.
    pub fn sync_buffers(&self, net: &Network) -> Result<()> {
        let buffers: Vec<Tensor> = net.model.named_buffers().into_iter().map(|(_, t)| t).collect();
        broadcast_from_main(&self.dp.group, &buffers)
    }
}
