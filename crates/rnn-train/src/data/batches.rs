//! Mini-batch index iteration: the sample order of one epoch, cut into batches.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rnn_core::{Error, Result};

/// An iterator over the index batches (`Vec<u32>`) of one epoch over `n` samples. Every
/// index appears exactly once; the last batch holds the remainder and may be smaller.
/// With shuffling, the order is a deterministic function of `(seed, epoch)`, different
/// for every epoch.
///
/// ```
/// use rnn_train::data::Batches;
/// let batches: Vec<Vec<u32>> = Batches::new(5, 2, false, 0).unwrap().collect();
/// assert_eq!(batches, vec![vec![0, 1], vec![2, 3], vec![4]]);
/// ```
#[derive(Clone, Debug)]
pub struct Batches {
    order: Vec<u32>,
    batch_size: usize,
    next: usize,
}

impl Batches {
    /// The batches of epoch 0.
    pub fn new(n: usize, batch_size: usize, shuffle: bool, seed: u64) -> Result<Batches> {
        Self::epoch(n, batch_size, shuffle, seed, 0)
    }

    /// The batches of `epoch`: reshuffled from `(seed, epoch)` when `shuffle` is set.
    pub fn epoch(n: usize, batch_size: usize, shuffle: bool, seed: u64, epoch: u64) -> Result<Batches> {
        if batch_size == 0 {
            return Err(Error::invalid("Batches", "batch_size must be > 0"));
        }
        let count =
            u32::try_from(n).map_err(|_| Error::invalid("Batches", format!("{n} samples do not fit u32 indices")))?;
        let mut order: Vec<u32> = (0..count).collect();
        if shuffle {
            order.shuffle(&mut StdRng::seed_from_u64(mix(seed, epoch)));
        }
        Ok(Batches { order, batch_size, next: 0 })
    }

    /// Rank `rank`'s batches of `epoch` among `world` ranks training together (a distributed
    /// sampler, as PyTorch's `DistributedSampler`): every rank draws the same epoch order
    /// (from `(seed, epoch)`), pads it by wrapping around to a multiple of `world` when
    /// `world` does not divide `n` (the first samples of the order are seen twice), and takes
    /// every `world`-th sample from position `rank`. So every rank gets `ceil(n / world)`
    /// samples, as many batches and the same last-batch size, and step `k` of the `world`
    /// ranks together covers exactly the samples of step `k` of one rank with batches of
    /// `world * batch_size` (when `world` divides `n`).
    ///
    /// ```
    /// use rnn_train::data::Batches;
    /// let rank1: Vec<Vec<u32>> = Batches::sharded(5, 2, false, 0, 0, 1, 2).unwrap().collect();
    /// assert_eq!(rank1, vec![vec![1, 3], vec![0]]); // order 0..5 padded with 0
    /// ```
    pub fn sharded(
        n: usize,
        batch_size: usize,
        shuffle: bool,
        seed: u64,
        epoch: u64,
        rank: usize,
        world: usize,
    ) -> Result<Batches> {
        if world == 0 || rank >= world {
            return Err(Error::invalid("Batches::sharded", format!("rank {rank} is not one of {world} ranks")));
        }
        if n == 0 {
            return Err(Error::invalid("Batches::sharded", "no samples to share among the ranks"));
        }
        let all = Self::epoch(n, batch_size, shuffle, seed, epoch)?;
        let padded = n.div_ceil(world) * world;
        let order = all.order.iter().copied().cycle().take(padded).skip(rank).step_by(world).collect();
        Ok(Batches { order, batch_size, next: 0 })
    }

    /// Number of batches in the whole epoch (including those already yielded).
    pub fn num_batches(&self) -> usize {
        self.order.len().div_ceil(self.batch_size)
    }

    /// Number of samples in the whole epoch.
    pub fn num_samples(&self) -> usize {
        self.order.len()
    }
}

impl Iterator for Batches {
    type Item = Vec<u32>;

    fn next(&mut self) -> Option<Vec<u32>> {
        let rest = self.order.get(self.next..).filter(|rest| !rest.is_empty())?;
        let batch = rest[..self.batch_size.min(rest.len())].to_vec();
        self.next += batch.len();
        Some(batch)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.order.len() - self.next).div_ceil(self.batch_size);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Batches {}

/// One well-mixed 64-bit seed from a seed and an epoch (SplitMix64 finalizer), so that
/// `(seed, epoch)` and `(seed + 1, epoch - 1)` give unrelated orders.
fn mix(seed: u64, epoch: u64) -> u64 {
    let mut z = seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
