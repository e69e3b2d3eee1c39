//! The in-process engine: `n` ranks in one process (one per thread, e.g. one per GPU) meet
//! at a shared rendezvous. Each rank deposits its header and buffer; the last to arrive
//! checks the headers, computes the collective once for everybody and opens the next round.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rnn_core::{Error, Result};

use crate::buffer::{Buf, Call, Collective, HEADER_WORDS};
use crate::engine::Engine;
use crate::worker::{lock, timeout_message};

type Header = [i64; HEADER_WORDS];

/// What one round computed, for every rank to take its part of.
struct Round {
    lo: Header,
    hi: Header,
    data: RoundData,
}

enum RoundData {
    None,
    /// The same result for every rank (all_reduce, broadcast, all_gather).
    Same(Buf),
    /// One result per rank (reduce_scatter).
    PerRank(Vec<Buf>),
}

#[derive(Default)]
struct State {
    /// Rounds completed so far; a rank's deposit belongs to round `completed`.
    completed: u64,
    headers: Vec<Option<Header>>,
    calls: Vec<Option<Call>>,
    /// The last completed round.
    last: Option<Arc<Round>>,
    /// Ranks whose engine is gone (their thread ended or dropped its group).
    departed: Vec<bool>,
    broken: Option<String>,
}

pub(crate) struct Rendezvous {
    size: usize,
    state: Mutex<State>,
    changed: Condvar,
    timeout_ms: Arc<AtomicU64>,
}

impl Rendezvous {
    pub(crate) fn new(size: usize, timeout: Duration) -> Arc<Rendezvous> {
        let state = State {
            headers: vec![None; size],
            calls: (0..size).map(|_| None).collect(),
            departed: vec![false; size],
            ..State::default()
        };
        let timeout_ms = Arc::new(AtomicU64::new(timeout.as_millis() as u64));
        Arc::new(Rendezvous { size, state: Mutex::new(state), changed: Condvar::new(), timeout_ms })
    }

    /// Sets how long a rank waits for the others (every rank of the rendezvous).
    pub(crate) fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms.store(timeout.as_millis().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
}

/// One rank's side of a rendezvous.
pub(crate) struct ThreadEngine {
    pub(crate) rendezvous: Arc<Rendezvous>,
    pub(crate) rank: usize,
}

impl Engine for ThreadEngine {
    fn run(&mut self, call: Call) -> Result<Option<Buf>> {
        let op = call.collective.name();
        // What is needed to judge the round once `meet` has taken the call and its buffer.
        let judge = Call { collective: call.collective, buf: None, invalid: call.invalid.clone() };
        let round = self.meet(call.header(), call, op)?;
        judge.check_agreement(&round.lo, &round.hi)?;
        Ok(match &round.data {
            RoundData::None => None,
            RoundData::Same(buf) => Some(buf.clone()),
            RoundData::PerRank(bufs) => Some(bufs[self.rank].clone()),
        })
    }

    fn broken(&self) -> Option<String> {
        lock(&self.rendezvous.state).broken.clone()
    }
}

impl Drop for ThreadEngine {
    fn drop(&mut self) {
        lock(&self.rendezvous.state).departed[self.rank] = true;
        self.rendezvous.changed.notify_all();
    }
}

impl ThreadEngine {
    /// Deposits this rank's call and waits until the round it belongs to is complete.
    fn meet(&self, header: Header, call: Call, op: &'static str) -> Result<Arc<Round>> {
        let rv = &*self.rendezvous;
        let mut state = lock(&rv.state);
        if let Some(why) = &state.broken {
            return Err(Error::invalid(op, format!("the process group is broken by an earlier failure: {why}")));
        }
        let round = state.completed;
        state.headers[self.rank] = Some(header);
        state.calls[self.rank] = Some(call);
        if state.headers.iter().all(Option::is_some) {
            let done = Arc::new(complete_round(&mut state, rv.size));
            state.last = Some(done.clone());
            state.completed += 1;
            rv.changed.notify_all();
            return Ok(done);
        }
        let started = Instant::now();
        loop {
            if state.completed > round {
                return Ok(state.last.clone().expect("a completed round is stored"));
            }
            if let Some(why) = &state.broken {
                return Err(Error::Msg(format!("{op}: {why}")));
            }
            let missing: Vec<usize> = (0..rv.size).filter(|&r| state.headers[r].is_none()).collect();
            if let Some(&gone) = missing.iter().find(|&&r| state.departed[r]) {
                let why = format!("{op}: rank {gone} left the group (its thread ended or dropped its ProcessGroup)");
                return Err(break_rendezvous(rv, &mut state, why));
            }
            let timeout = Duration::from_millis(rv.timeout_ms.load(Ordering::Relaxed));
            let Some(left) = timeout.checked_sub(started.elapsed()) else {
                let why = format!("{op} {} (ranks {missing:?} did not arrive)", timeout_message(timeout));
                return Err(break_rendezvous(rv, &mut state, why));
            };
            state = rv.changed.wait_timeout(state, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

fn break_rendezvous(rv: &Rendezvous, state: &mut State, why: String) -> Error {
    state.broken.get_or_insert(why.clone());
    rv.changed.notify_all();
    Error::Msg(why)
}

/// Compares the deposited headers, computes the collective and clears the deposits.
fn complete_round(state: &mut State, size: usize) -> Round {
    let headers: Vec<Header> = state.headers.iter_mut().map(|h| h.take().unwrap_or_default()).collect();
    let calls: Vec<Call> = state.calls.iter_mut().filter_map(Option::take).collect();
    let lo = headers.iter().fold(headers[0], |acc, h| std::array::from_fn(|i| acc[i].min(h[i])));
    let hi = headers.iter().fold(headers[0], |acc, h| std::array::from_fn(|i| acc[i].max(h[i])));
    let agree = lo == hi && hi[HEADER_WORDS - 1] == 0 && calls.len() == size;
    let data = if agree { compute(calls, size) } else { RoundData::None };
    Round { lo, hi, data }
}

fn compute(calls: Vec<Call>, size: usize) -> RoundData {
    let collective = calls[0].collective;
    let mut bufs: Vec<Buf> = calls.into_iter().filter_map(|c| c.buf).collect();
    if bufs.len() != size {
        return RoundData::None; // a barrier
    }
    match collective {
        Collective::AllReduce(op) => RoundData::Same(reduce(bufs, op, size)),
        Collective::Broadcast { root } => RoundData::Same(bufs.swap_remove(root)),
        Collective::AllGather => RoundData::Same(Buf::concat(&bufs.iter().collect::<Vec<_>>())),
        Collective::ReduceScatter(op) => {
            let total = reduce(bufs, op, size);
            let chunk = total.len() / size;
            RoundData::PerRank((0..size).map(|r| total.slice(r * chunk, chunk)).collect())
        }
        Collective::Barrier => RoundData::None,
    }
}

/// The sum over ranks in rank order (the same order on every call, so results are
/// reproducible), divided by the world size for a mean.
fn reduce(bufs: Vec<Buf>, op: crate::ReduceOp, size: usize) -> Buf {
    let mut parts = bufs.into_iter();
    let mut total = parts.next().expect("a group has at least one rank");
    parts.for_each(|b| total.add_assign(&b));
    if op == crate::ReduceOp::Mean {
        total.divide(size);
    }
    total
}
