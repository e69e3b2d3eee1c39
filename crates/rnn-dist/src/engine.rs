//! The engines that carry out collectives: one per backend, each owning its rank's side of
//! the communication. An engine runs on one thread at a time: the group's communication
//! thread, or the caller's for the one-process group and for a thread group's synchronous
//! calls with nothing queued. MPI's engine runs on its communication thread alone (MPI at
//! `MPI_THREAD_FUNNELED`), unless the group was started with `RNN_DIST_DIRECT=1`: then waiting
//! callers run it too, one thread at a time (`MPI_THREAD_SERIALIZED`).

use rnn_core::Result;

use crate::buffer::{Buf, Call, Collective};

pub(crate) trait Engine {
    /// Compares `call`'s header with every other rank's, then runs it. The returned buffer
    /// is this rank's result (none for a barrier).
    fn run(&mut self, call: Call) -> Result<Option<Buf>>;

    /// Why the engine can no longer run collectives (a rank timed out or left), if so.
    fn broken(&self) -> Option<String> {
        None
    }
}

/// The group of one process: every collective is the identity (reduce_scatter keeps the
/// whole buffer, a mean divides by one).
pub(crate) struct SingleEngine;

impl Engine for SingleEngine {
    fn run(&mut self, call: Call) -> Result<Option<Buf>> {
        let header = call.header();
        call.check_agreement(&header, &header)?;
        debug_assert!(!matches!(call.collective, Collective::Broadcast { root } if root != 0));
        Ok(call.buf)
    }
}
