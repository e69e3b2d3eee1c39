//! The communication thread of a rank and the handles of the collectives it runs.
//!
//! Every collective of a group goes through one queue, in the order the rank issued them, to
//! one thread that owns the engine (for MPI, by default: the only thread that calls MPI). The
//! exception: in a thread group, a call whose caller waits for it and finds nothing queued
//! runs on the caller's own thread (`Executor::run_now`), which saves the two thread wake-ups
//! of the hand-off; the rendezvous it waits in has the group's timeout. The MPI group does
//! the same when asked to (`RNN_DIST_DIRECT=1`): a blocking MPI call cannot be given up on,
//! so a watchdog thread ends the process when such a call outlives the timeout
//! (`watch_direct_calls`). A caller waits for its result with a deadline: if the running
//! collective takes longer than the group's timeout (another rank failed, died or never
//! came), the caller gets an error and the group is marked broken, even though the
//! communication thread itself may stay blocked inside MPI.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rnn_core::{Error, Result};

use crate::buffer::{Buf, Call};
use crate::engine::Engine;

type Outcome = Result<Option<Buf>>;

/// Where a collective's outcome lands; the caller waits on it.
#[derive(Default)]
pub(crate) struct Slot {
    outcome: Mutex<Option<Outcome>>,
    ready: Condvar,
}

impl Slot {
    pub(crate) fn filled(outcome: Outcome) -> Arc<Slot> {
        Arc::new(Slot { outcome: Mutex::new(Some(outcome)), ready: Condvar::new() })
    }
    /// The outcome of a filled slot.
    fn take(&self) -> Outcome {
        lock(&self.outcome).take().unwrap_or_else(|| Err(Error::Msg("internal: collective outcome taken twice".into())))
    }
    fn fill(&self, outcome: Outcome) {
        *lock(&self.outcome) = Some(outcome);
        self.ready.notify_all();
    }
}

/// A mutex lock that survives a panic elsewhere (the data here stay consistent: every write
/// is a single assignment).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What callers and the communication thread share.
pub(crate) struct Shared {
    /// The collective now running, if any.
    busy: Mutex<Option<Busy>>,
    /// Why the group can no longer be used, once it cannot.
    broken: Mutex<Option<String>>,
    /// False once the communication thread has ended.
    alive: AtomicBool,
    timeout_ms: AtomicU64,
    /// Whether MPI collectives compare headers first (see `ProcessGroup::set_header_checks`).
    header_checks: AtomicBool,
}

impl Shared {
    pub(crate) fn new(timeout: Duration) -> Arc<Shared> {
        Arc::new(Shared {
            busy: Mutex::new(None),
            broken: Mutex::new(None),
            alive: AtomicBool::new(true),
            timeout_ms: AtomicU64::new(timeout.as_millis().min(u64::MAX as u128) as u64),
            header_checks: AtomicBool::new(true),
        })
    }
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }
    pub(crate) fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms.store(timeout.as_millis().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }
    pub(crate) fn header_checks(&self) -> bool {
        self.header_checks.load(Ordering::Relaxed)
    }
    pub(crate) fn set_header_checks(&self, on: bool) {
        self.header_checks.store(on, Ordering::Relaxed);
    }
    pub(crate) fn broken(&self) -> Option<String> {
        lock(&self.broken).clone()
    }
    fn break_with(&self, why: String) {
        lock(&self.broken).get_or_insert(why);
    }
}

/// A collective that is running: since when, its name, and whether it runs on its caller's
/// thread (a direct call) rather than on the communication thread.
#[derive(Clone, Copy)]
struct Busy {
    since: Instant,
    op: &'static str,
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    on_caller: bool,
}

pub(crate) struct Job {
    call: Call,
    slot: Arc<Slot>,
}

/// How a rank's collectives are carried out.
pub(crate) enum Executor {
    /// On the caller's thread (the one-process group: nothing to wait for).
    Inline(Mutex<Box<dyn Engine + Send>>),
    /// On the rank's communication thread; with `direct`, a synchronous call finding nothing
    /// queued runs on the caller's thread instead.
    Thread { jobs: Mutex<Option<Sender<Job>>>, thread: Mutex<Option<JoinHandle<()>>>, direct: Option<Direct> },
}

/// The engine of a rank whose collectives may also run on the caller's thread: engines that
/// wait with a deadline of their own (the thread group's rendezvous), so a caller never
/// blocks past the timeout. MPI's engine is one only when asked for (`RNN_DIST_DIRECT=1`),
/// with a watchdog in place of the deadline (`watch_direct_calls`); by default MPI is called
/// by the communication thread alone.
pub(crate) struct Direct {
    /// Shared with the communication thread, which drops the engine last (for MPI: MPI is
    /// finalized by the thread that initialized it, see `shut_down`).
    engine: Arc<Mutex<Box<dyn Engine + Send>>>,
    /// Collectives submitted to the communication thread and not yet finished: a direct run
    /// must not overtake them.
    queued: Arc<AtomicUsize>,
}

impl Executor {
    /// Starts the communication thread; `make_engine` runs on it (MPI is initialized by the
    /// thread that will call it). Fails if the thread cannot start or the engine cannot be
    /// made.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn spawn<F>(name: String, shared: Arc<Shared>, make_engine: F) -> Result<Executor>
    where
        F: FnOnce() -> Result<Box<dyn Engine>> + Send + 'static,
    {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (started, start_result) = mpsc::channel::<Result<()>>();
        let thread = start_thread(name, move || {
            let _alive = AliveGuard(shared.clone());
            let mut engine = match make_engine() {
                Ok(engine) => engine,
                Err(e) => return drop(started.send(Err(e))),
            };
            drop(started.send(Ok(())));
            serve(queue, None, |call| run_job(&shared, engine.as_mut(), call, false));
        })?;
        match start_result.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(Error::Msg("the communication thread ended while starting".into())),
        }
        Ok(Executor::Thread { jobs: Mutex::new(Some(jobs)), thread: Mutex::new(Some(thread)), direct: None })
    }

    /// Starts the communication thread of `engine`, which synchronous calls may also run on
    /// their own thread (see `Direct`).
    pub(crate) fn spawn_direct(name: String, shared: Arc<Shared>, engine: Box<dyn Engine + Send>) -> Result<Executor> {
        Self::spawn_direct_made(name, shared, move || Ok(engine))
    }

    /// `spawn_direct` for an engine that `make_engine` makes on the communication thread,
    /// which also drops it when the group ends.
    pub(crate) fn spawn_direct_made<F>(name: String, shared: Arc<Shared>, make_engine: F) -> Result<Executor>
    where
        F: FnOnce() -> Result<Box<dyn Engine + Send>> + Send + 'static,
    {
        let queued = Arc::new(AtomicUsize::new(0));
        let (jobs, queue) = mpsc::channel::<Job>();
        let (made, made_engine) = mpsc::channel();
        let thread_queued = queued.clone();
        let thread = start_thread(name, move || {
            let _alive = AliveGuard(shared.clone());
            let engine = match make_engine() {
                Ok(engine) => Arc::new(Mutex::new(engine)),
                Err(e) => return drop(made.send(Err(e))),
            };
            drop(made.send(Ok(engine.clone())));
            serve(queue, Some(thread_queued), |call| run_job(&shared, lock(&engine).as_mut(), call, false));
        })?;
        let engine = made_engine
            .recv()
            .unwrap_or_else(|_| Err(Error::Msg("the communication thread ended while starting".into())))?;
        let direct = Some(Direct { engine, queued });
        Ok(Executor::Thread { jobs: Mutex::new(Some(jobs)), thread: Mutex::new(Some(thread)), direct })
    }

    /// Queues `call` (or runs it, inline) and returns the slot its outcome lands in.
    pub(crate) fn submit(&self, shared: &Shared, call: Call) -> Arc<Slot> {
        if let Some(why) = shared.broken() {
            return Slot::filled(Err(broken_error(call.collective.name(), &why)));
        }
        match self {
            Executor::Inline(engine) => Slot::filled(lock(engine).run(call)),
            Executor::Thread { jobs, direct, .. } => {
                let slot = Arc::new(Slot::default());
                let job = Job { call, slot: slot.clone() };
                if let Some(d) = direct {
                    d.queued.fetch_add(1, Ordering::SeqCst);
                }
                let sent = lock(jobs).as_ref().map(|tx| tx.send(job));
                if !matches!(sent, Some(Ok(()))) {
                    if let Some(d) = direct {
                        d.queued.fetch_sub(1, Ordering::SeqCst);
                    }
                    slot.fill(Err(Error::Msg("the group's communication thread has ended".into())));
                }
                slot
            }
        }
    }

    /// Runs `call` on the caller's thread when this executor may (inline, or a direct engine
    /// with nothing queued before it) and returns its outcome; otherwise gives `call` back,
    /// to be submitted.
    pub(crate) fn run_now(&self, shared: &Shared, call: Call) -> std::result::Result<Outcome, Call> {
        match self {
            Executor::Inline(_) => Ok(self.submit(shared, call).take()),
            Executor::Thread { direct: Some(d), .. } if d.queued.load(Ordering::SeqCst) == 0 => {
                let mut engine = lock(&d.engine);
                // Checked again under the lock: a call queued meanwhile from another thread
                // of this rank goes first.
                if d.queued.load(Ordering::SeqCst) != 0 {
                    return Err(call);
                }
                Ok(run_job(shared, engine.as_mut(), call, true))
            }
            Executor::Thread { .. } => Err(call),
        }
    }

    /// Whether a synchronous call with nothing queued before it runs on its caller's thread.
    pub(crate) fn runs_on_caller(&self) -> bool {
        matches!(self, Executor::Inline(_) | Executor::Thread { direct: Some(_), .. })
    }

    /// Ends the communication thread after the queued collectives, unless the group is
    /// broken: then the thread may be blocked in a collective that will never complete, and
    /// is left behind (the process is expected to exit with the error). The callers' handle
    /// on a direct engine goes first, so that the thread drops the engine.
    pub(crate) fn shut_down(&mut self, shared: &Shared) {
        if let Executor::Thread { jobs, thread, direct } = self {
            drop(direct.take());
            lock(jobs).take();
            let handle = lock(thread).take();
            if let Some(handle) = handle.filter(|_| shared.broken().is_none()) {
                drop(handle.join());
            }
        }
    }
}

/// Starts a rank's communication thread named `name`, running `body`.
fn start_thread(name: String, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
        .map_err(|e| Error::Msg(format!("cannot start the communication thread: {e}")))
}

/// The communication thread's loop: runs the queued calls in order until the queue closes,
/// counting each down from `queued` before its caller sees the outcome.
fn serve(queue: mpsc::Receiver<Job>, queued: Option<Arc<AtomicUsize>>, mut run: impl FnMut(Call) -> Outcome) {
    for job in queue {
        let outcome = run(job.call);
        if let Some(q) = &queued {
            q.fetch_sub(1, Ordering::SeqCst);
        }
        job.slot.fill(outcome);
    }
}

/// Runs `call` on `engine`, on the communication thread or (`on_caller`) on the caller's.
fn run_job(shared: &Shared, engine: &mut dyn Engine, call: Call, on_caller: bool) -> Outcome {
    let op = call.collective.name();
    if let Some(why) = shared.broken() {
        return Err(broken_error(op, &why));
    }
    *lock(&shared.busy) = Some(Busy { since: Instant::now(), op, on_caller });
    let outcome = engine.run(call);
    *lock(&shared.busy) = None;
    if let Some(why) = engine.broken() {
        shared.break_with(why);
    }
    outcome
}

fn broken_error(op: &'static str, why: &str) -> Error {
    Error::invalid(op, format!("the process group is broken by an earlier failure: {why}"))
}

/// Marks the communication thread as ended, however it ends.
struct AliveGuard(Arc<Shared>);
impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
        if std::thread::panicking() {
            self.0.break_with("the communication thread panicked".into());
        }
    }
}

/// A collective under way: `wait` returns its result. Dropping it without waiting lets the
/// collective complete unobserved (it still counts in the group's order of calls).
#[must_use = "a collective's result (or error) is read with `wait`"]
pub struct Work<T> {
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    op: &'static str,
    finish: Box<dyn FnOnce(Option<Buf>) -> Result<T> + Send>,
}

impl<T> Work<T> {
    pub(crate) fn new(
        slot: Arc<Slot>,
        shared: Arc<Shared>,
        op: &'static str,
        finish: impl FnOnce(Option<Buf>) -> Result<T> + Send + 'static,
    ) -> Work<T> {
        Work { slot, shared, op, finish: Box::new(finish) }
    }

    /// Whether the collective has finished (successfully or not): `wait` will not block.
    pub fn is_done(&self) -> bool {
        lock(&self.slot.outcome).is_some()
    }

    /// Blocks until the collective finishes and returns its result. Fails with a timeout
    /// error when the collective running on this rank's communication thread (this one or one
    /// issued before it) has been running longer than the group's timeout: another rank
    /// failed, died or never made the matching call. The group is broken after that.
    pub fn wait(self) -> Result<T> {
        let outcome = wait_slot(&self.slot, &self.shared, self.op)?;
        (self.finish)(outcome)
    }
}

fn wait_slot(slot: &Slot, shared: &Shared, op: &'static str) -> Outcome {
    // How often a waiter looks at the deadline; completion itself wakes it at once.
    const POLL: Duration = Duration::from_millis(100);
    let mut outcome = lock(&slot.outcome);
    loop {
        if let Some(result) = outcome.take() {
            return result;
        }
        if let Some(why) = shared.broken() {
            return Err(broken_error(op, &why));
        }
        if !shared.alive.load(Ordering::SeqCst) {
            return Err(Error::Msg(format!("{op}: the group's communication thread has ended")));
        }
        if let Some(Busy { since, op: running, .. }) = *lock(&shared.busy) {
            let timeout = shared.timeout();
            if since.elapsed() > timeout {
                let why = format!("{running} {}", timeout_message(timeout));
                shared.break_with(why.clone());
                let msg = if op == running { why } else { format!("{op}: queued behind {why}") };
                return Err(Error::Msg(msg));
            }
        }
        outcome = slot.ready.wait_timeout(outcome, POLL).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
    }
}

/// What a collective that timed out says after its name.
pub(crate) fn timeout_message(timeout: Duration) -> String {
    format!(
        "did not complete within {:.1} s: another rank failed, died or never made the \
         matching call (the limit is set by RNN_DIST_TIMEOUT in seconds or ProcessGroup::set_timeout)",
        timeout.as_secs_f64()
    )
}

/// Starts the watchdog of a group whose direct calls block in an engine that cannot give up
/// on them (MPI with `RNN_DIST_DIRECT=1`): when one has run longer than the group's timeout,
/// it prints why and ends the process, which makes the launcher stop the other ranks. The
/// watchdog looks every 100 ms and stops with the group's communication thread.
#[cfg(feature = "mpi")]
pub(crate) fn watch_direct_calls(shared: &Arc<Shared>, rank: usize) -> Result<()> {
    const POLL: Duration = Duration::from_millis(100);
    let shared = Arc::downgrade(shared);
    let watch = move || loop {
        std::thread::sleep(POLL);
        let Some(shared) = shared.upgrade().filter(|s| s.alive.load(Ordering::SeqCst)) else { return };
        let busy = *lock(&shared.busy);
        if let Some(Busy { since, op, on_caller: true }) = busy {
            if since.elapsed() > shared.timeout() {
                end_process(&format!("rank {rank}: {op} {}", timeout_message(shared.timeout())));
            }
        }
    };
    start_thread("rnn-dist-watchdog".into(), watch).map(drop)
}

/// Prints `why` and ends the process at once: the thread stuck in the collective cannot be
/// unwound, and exit handlers could wait on it.
#[cfg(feature = "mpi")]
fn end_process(why: &str) -> ! {
    use std::io::Write;
    eprintln!(
        "rnn-dist: {why}. With RNN_DIST_DIRECT=1 the call blocks inside MPI on its caller's \
         thread, where it cannot be given up on, so this process ends (exit status 1)"
    );
    drop(std::io::stdout().flush());
    // SAFETY: `_exit` takes no pointers and does not return.
    unsafe { libc::_exit(1) }
}
