//! Admission: how many workers' calls use the store at once, which go
//! first when more come, and how long the refused are told to wait.
//!
//! Without it the only queue was the store's pool (16 connections on
//! Postgres), entered by every call and left after its acquire timeout
//! (5 s): past saturation calls failed there, heartbeats with them, leases
//! expired and their jobs were counted again, and throughput fell to a
//! tenth (BENCHMARKS.md, "Load"). Now at most [`AdmissionLimits::calls`]
//! worker calls are in flight (by default the pool's size and a queue as
//! long again), so one that is admitted waits about one call's time for a
//! connection; past a short queue for the slots the rest are refused at
//! once, before they touch the store, with UNAVAILABLE and a retry hint
//! ([`census_proto::retry`]): the waiting is done by the callers, where it
//! costs nothing.
//!
//! **A short queue.** A call that finds no free slot waits for one in a
//! queue (its caller's calls in the order they came, the callers in turn:
//! `admission/slots.rs`), but only while the wait it can expect there (the
//! calls ahead of it, times the mean time a call holds its slot, over the
//! slots) is short: 2 s for a new lease, a tenth of the lease TTL (3 s) for
//! a call about leases held, and while its caller has fewer calls waiting
//! than its share of [`AdmissionLimits::waiting`] places (new leases: half
//! as many), shared among the callers waiting. Past that it is refused at
//! once. So one caller's flood fills its own share of the queue, not
//! another's (issue 44).
//!
//! **Who goes first.** A call about leases already held (a heartbeat, a
//! report, a failure) may wait longer, and a quarter of the slots are
//! never taken by new leases ([`AdmissionLimits::new_leases`]), so when the
//! coordinator is saturated new leases are refused first and the calls
//! that keep leases alive still pass. A lost lease costs its job's whole
//! count, and a report held up behind new leases leaves its worker idle; a
//! lease handed out a second later costs nothing. A report steps out of its
//! slot while its results are counted again (a recount can take as long as
//! the count did, an hour for some keys) and waits in the queue to step
//! back in, never refused: it was admitted once.
//!
//! **Headers first, the body outside the slot.** A call is admitted on its
//! headers, its credential is checked in its slot, and only then is its
//! body read, outside the slot (`Admitted::outside`), the call stepping
//! back in when the body has come (`server.rs`). So a caller that presents
//! no credential, or a made-up one, is refused before a byte of its body is
//! read; and a slot is never held while a body is on its way, which its
//! caller could make last as long as it likes: admitted on their headers
//! and held while their bodies came, one caller's calls held every slot,
//! the bodies queued behind them, unread, filling their connection's window
//! so that theirs never came (issue 44). Outside the slots, an identity has
//! at most [`BODIES_AN_IDENTITY`] bodies on their way at once (`bodies.rs`).
//!
//! **Not here.** Reads take turns of their own
//! ([`crate::CoordinatorConfig::concurrent_reads`]), never these slots, so
//! neither starves the other. An operator's calls (a person's, and rare)
//! are never refused: an operator must be able to cancel a run on a
//! saturated coordinator.
//!
//! **The hint.** Refused calls are handed turns in the order they were
//! refused, at the pace admitted calls leave their slots: each refused call
//! of a kind is told to come back one turn (the mean time a call holds its
//! slot, over the slots of its kind) after the one refused before it, within
//! bounds. A crowd that was refused together thus comes back spread out at
//! about the rate the store takes it, instead of all at once to be refused
//! again.
//!
//! **The pace.** Refusing calls bounds the work in flight, but a fleet
//! still offers about two calls a batch (the lease and the report), so
//! 10,000 workers whose batches last a second offer 20,000 calls a second
//! whatever their jobs are, far past what one coordinator and one
//! database answer (BENCHMARKS.md, "Load"). So the coordinator also asks,
//! in every lease's answer, how long the worker's next batch should take
//! to count (`batch_millis`): a second while its slots are
//! mostly free, longer as the calls admitted fill them (the time the slots
//! were held, over the slots and the time: the calls a second times the
//! mean time a call holds its slot, by Little's law), up to a quarter of the lease TTL (so that a batch needs no
//! heartbeat). A fleet that asks for batches twice as long makes half the
//! calls for the same jobs, so the pace settles where about half the slots
//! are busy, and the calls admitted are answered without queueing.
//!
//! Unless the fleet is backlogged: when the jobs whose leases are
//! heartbeated outnumber a quarter of the jobs leased, batches are not
//! ending within a third of the TTL, so workers wait for the store with
//! leases in hand, and a longer batch would only hold (and heartbeat, a
//! row a job) more of them while it waits. The pace is halved instead
//! (BENCHMARKS.md, "The coordinator's pace": a fleet offering fifty times
//! what the store completed slowed to a third before this rule).

mod bodies;
mod slots;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::Status;

pub use self::bodies::BODIES_AN_IDENTITY;
pub(crate) use self::slots::CallerKey;
use self::slots::{Permits, Position, Slots};
use crate::auth::Need;

/// How many workers' calls use the store at once, and wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Workers' calls in flight at once, from admission to answer (a
    /// report counting its results again is not in flight).
    pub calls: usize,
    /// The most calls waiting for a slot (new leases: half as many), shared
    /// among the callers waiting (a caller alone may take them all, and the
    /// others then as many again together); within it a call waits only
    /// while the wait it can expect is short. The
    /// bound that holds when the calls' past times say little (a store
    /// that stopped answering). More are refused with a retry hint.
    pub waiting: usize,
}

impl AdmissionLimits {
    /// The least [`AdmissionLimits::calls`] of the default, whatever the pool:
    /// a call spends part of its time outside the store (gRPC, checking a
    /// result), so a one-connection pool (SQLite) still needs a few calls in
    /// flight to stay busy.
    pub const LEAST_DEFAULT: usize = 8;

    /// How many calls may wait for a slot, a call in flight.
    pub const WAITING_PER_CALL: usize = 256;

    /// `calls` in flight, and [`AdmissionLimits::WAITING_PER_CALL`] times as
    /// many waiting at most.
    pub fn with_calls(calls: usize) -> AdmissionLimits {
        AdmissionLimits { calls, waiting: calls.saturating_mul(Self::WAITING_PER_CALL) }
    }

    /// The default for a store whose pool holds `connections`: a call for
    /// every connection and a queue as long again in flight (32 for
    /// Postgres's 16), at least [`AdmissionLimits::LEAST_DEFAULT`] (SQLite's 1).
    pub fn for_pool(connections: usize) -> AdmissionLimits {
        AdmissionLimits::with_calls(connections.saturating_mul(2).max(Self::LEAST_DEFAULT))
    }

    /// How many of the calls in flight may be new leases: all but a
    /// quarter, which stay for the calls about leases already held.
    pub fn new_leases(self) -> usize {
        let calls = self.calls.max(1);
        calls - calls / 4
    }
}

/// What admission has done since the coordinator started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionCounts {
    /// Calls admitted (a report that stepped out to be checked and came
    /// back counts once).
    pub admitted: u64,
    /// Calls about leases held (heartbeat, report, failure) refused.
    pub refused_held: u64,
    /// New leases refused.
    pub refused_leases: u64,
    /// The most calls in flight at once: never more than [`AdmissionLimits::calls`].
    pub most_in_flight: usize,
    /// Calls waiting for a slot now: never more than twice
    /// [`AdmissionLimits::waiting`] (reports stepping back in after their
    /// check aside): a caller alone may fill the queue, and others that come
    /// then take as many places again.
    pub waiting: usize,
    /// How long a worker's batch is asked to take now (the pace in the
    /// module's documentation).
    pub batch_pace: Duration,
    /// Requests whose bodies are being read now, outside the slots: never
    /// more than [`BODIES_AN_IDENTITY`] an identity.
    pub reading: usize,
}

/// What a worker call is, for admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// About leases the caller holds: heartbeat, report, failure.
    Held = 0,
    /// A new lease.
    Lease = 1,
}

impl Kind {
    /// The kind of the call to `path`, which needs `need`; `None` for the
    /// calls that admission does not bound (reads, an operator's). Every
    /// worker call but a lease is about leases held.
    pub(crate) fn of(path: &str, need: Need) -> Option<Kind> {
        match need {
            Need::Worker if path == "/census.v1.WorkerService/LeaseJobs" => Some(Kind::Lease),
            Need::Worker => Some(Kind::Held),
            Need::Read | Need::Operator => None,
        }
    }
}

/// The shortest pause a refused call is told to make.
const SHORTEST_PUSHBACK: Duration = Duration::from_millis(50);
/// The longest a new lease may expect to wait for a slot.
const LEASE_QUEUE: Duration = Duration::from_secs(2);
/// How much each call's time in its slot moves the mean (1/64: the last
/// few hundred calls).
const MEAN_WEIGHT: f64 = 1.0 / 64.0;
/// The shortest batch the coordinator asks for: what a worker aims for
/// unless asked for longer (the protocol's, for both sides).
const SHORTEST_BATCH: Duration = census_proto::limits::SHORTEST_BATCH_TIME;
/// How often the pace is set again from the calls admitted since.
const PACE_WINDOW: Duration = Duration::from_secs(2);
/// The share of the slots the pace aims to keep busy: enough to keep the
/// store busy, few enough that a call rarely waits for a slot.
const TARGET_OCCUPANCY: f64 = 0.5;
/// Jobs heartbeated over jobs leased past which the fleet is backlogged.
const BACKLOG: f64 = 0.25;

/// The coordinator's admission: the slots, the pace of the hints, the counts.
pub(crate) struct Admission {
    limits: AdmissionLimits,
    /// Every admitted call holds one, a new lease one of its own besides;
    /// given back, a slot goes to the callers waiting in turn.
    slots: Slots,
    /// The longest pause each kind is told to make: a held lease's call
    /// comes back well within the lease's time; a new lease within it.
    longest: [Duration; 2],
    /// The longest wait for a slot each kind may expect in the queue.
    queue: [Duration; 2],
    pace: Mutex<Pace>,
    admitted: AtomicU64,
    /// The time the slots were held, all together, in microseconds: with
    /// calls that step out and back in, the mean time a slot is held times
    /// the calls admitted is not it.
    busy_micros: AtomicU64,
    refused: [AtomicU64; 2],
    most_in_flight: AtomicUsize,
    /// How long a worker's batch is asked to take, and what it was set from.
    fleet: Mutex<FleetPace>,
    /// The longest batch asked for: a quarter of the lease TTL.
    longest_batch: Duration,
    /// Jobs leased, and jobs whose leases were heartbeated (a job once a
    /// heartbeat), for the pace.
    jobs_leased: AtomicU64,
    jobs_heartbeated: AtomicU64,
    /// The bodies being read outside the slots, by identity.
    bodies: bodies::Bodies,
}

/// The pace asked of the fleet's batches, and the counts at its last change.
struct FleetPace {
    batch: Duration,
    since: Instant,
    busy_micros: u64,
    refused: u64,
    leased: u64,
    heartbeated: u64,
}

/// How the slots and the fleet fared over one window of the pace.
#[derive(Debug, Clone, Copy)]
struct PaceWindow {
    /// The share of the time the slots were busy.
    occupancy: f64,
    /// Calls were refused.
    refused: bool,
    /// The jobs heartbeated outnumbered [`BACKLOG`] of the jobs leased.
    backlogged: bool,
}

/// When refused calls are told to come back.
struct Pace {
    /// The mean seconds a call holds its slot.
    slot_seconds: f64,
    /// The turn handed to the last refused call of each kind.
    last_turn: [Instant; 2],
}

impl Admission {
    /// Admission within `limits`, for leases that last `lease_ttl`.
    pub(crate) fn new(limits: AdmissionLimits, lease_ttl: Duration) -> Arc<Admission> {
        let calls = limits.calls.max(1);
        let now = Instant::now();
        Arc::new(Admission {
            limits: AdmissionLimits { calls, waiting: limits.waiting },
            slots: Slots::new(calls, limits.new_leases()),
            longest: [(lease_ttl / 10).max(SHORTEST_PUSHBACK), lease_ttl.max(SHORTEST_PUSHBACK)],
            queue: [lease_ttl / 10, LEASE_QUEUE.min(lease_ttl / 10)],
            pace: Mutex::new(Pace { slot_seconds: 0.01, last_turn: [now, now] }),
            admitted: AtomicU64::new(0),
            busy_micros: AtomicU64::new(0),
            refused: [AtomicU64::new(0), AtomicU64::new(0)],
            most_in_flight: AtomicUsize::new(0),
            fleet: Mutex::new(FleetPace {
                batch: SHORTEST_BATCH,
                since: now,
                busy_micros: 0,
                refused: 0,
                leased: 0,
                heartbeated: 0,
            }),
            longest_batch: (lease_ttl / 4).max(SHORTEST_BATCH),
            jobs_leased: AtomicU64::new(0),
            jobs_heartbeated: AtomicU64::new(0),
            bodies: bodies::Bodies::default(),
        })
    }

    /// How long the coordinator asks a worker's next batch to take to
    /// count: set again every [`PACE_WINDOW`] from how busy the slots were
    /// since ([`next_batch`]).
    pub(crate) fn batch_pace(&self) -> Duration {
        self.batch_pace_at(Instant::now())
    }

    /// A lease handed out `jobs` jobs.
    pub(crate) fn leased(&self, jobs: usize) {
        self.jobs_leased.fetch_add(jobs as u64, Ordering::Relaxed);
    }

    /// A heartbeat named `jobs` leases.
    pub(crate) fn heartbeated(&self, jobs: usize) {
        self.jobs_heartbeated.fetch_add(jobs as u64, Ordering::Relaxed);
    }

    fn batch_pace_at(&self, now: Instant) -> Duration {
        let busy_micros = self.busy_micros.load(Ordering::Relaxed);
        let refused = self.refused.iter().map(|r| r.load(Ordering::Relaxed)).sum::<u64>();
        let leased = self.jobs_leased.load(Ordering::Relaxed);
        let heartbeated = self.jobs_heartbeated.load(Ordering::Relaxed);
        let mut fleet = self.fleet.lock().expect("never poisoned");
        let elapsed = now.saturating_duration_since(fleet.since);
        if elapsed >= PACE_WINDOW {
            let busy = (busy_micros - fleet.busy_micros) as f64 / 1e6;
            let window = PaceWindow {
                occupancy: busy / (self.limits.calls as f64 * elapsed.as_secs_f64()),
                refused: refused > fleet.refused,
                backlogged: (heartbeated - fleet.heartbeated) as f64 > BACKLOG * (leased - fleet.leased) as f64,
            };
            let batch = next_batch(fleet.batch, window, self.longest_batch);
            *fleet = FleetPace { batch, since: now, busy_micros, refused, leased, heartbeated };
            metrics::gauge!("census_batch_pace_seconds").set(fleet.batch.as_secs_f64());
        }
        fleet.batch
    }

    /// Admits a call of `kind` from `caller` into a free slot, or after
    /// a short wait for one, or refuses it with UNAVAILABLE and the pause
    /// to make before trying again.
    pub(crate) async fn admit(self: &Arc<Self>, kind: Kind, caller: CallerKey) -> Result<Admitted, Status> {
        let permits = match self.slots.take(kind, caller) {
            Some(permits) => permits,
            None => {
                let slot_seconds = self.pace.lock().expect("never poisoned").slot_seconds;
                let Some(place) = self.slots.queue(kind, caller, |at| self.fits(kind, at, slot_seconds)) else {
                    return Err(self.refuse(kind));
                };
                place.granted().await
            }
        };
        Ok(Admitted(Arc::new(Mutex::new(Some(self.slot(caller, permits))))))
    }

    /// Whether a call of `kind` may wait at `position` in the queue: the
    /// wait it can expect there (the calls ahead of it, each holding its
    /// slot for `slot_seconds`, over the slots) is within its kind's bound,
    /// its caller has fewer calls waiting than its share of the queue's
    /// places (all of them for a caller alone), and the queue is not twice
    /// full.
    fn fits(&self, kind: Kind, position: Position, slot_seconds: f64) -> bool {
        let (slots, longest) = (self.slots(kind) as f64, self.queue[kind as usize].as_secs_f64());
        let most = match kind {
            Kind::Held => self.limits.waiting,
            Kind::Lease => self.limits.waiting / 2,
        };
        let share = (most / (position.others + 1)).max(1).min(most);
        let expected = (position.ahead + 1) as f64 * slot_seconds / slots;
        expected <= longest && position.mine < share && position.waiting < 2 * most
    }

    /// The slots a call of `kind` may take.
    fn slots(&self, kind: Kind) -> usize {
        match kind {
            Kind::Held => self.limits.calls,
            Kind::Lease => self.limits.new_leases(),
        }
    }

    fn slot(self: &Arc<Self>, caller: CallerKey, permits: Permits) -> Slot {
        self.admitted.fetch_add(1, Ordering::Relaxed);
        self.most_in_flight.fetch_max(self.slots.counts().0, Ordering::Relaxed);
        Slot { admission: self.clone(), caller, permits: Some(permits), since: Instant::now() }
    }

    /// The refusal of a call of `kind`, with its turn.
    fn refuse(&self, kind: Kind) -> Status {
        self.refused[kind as usize].fetch_add(1, Ordering::Relaxed);
        let label = match kind {
            Kind::Held => "held",
            Kind::Lease => "lease",
        };
        metrics::counter!("census_calls_refused_total", "kind" => label).increment(1);
        let wait = self.turn(kind, Instant::now());
        census_proto::retry::refused(
            &format!(
                "the coordinator is at its limit of {} workers' calls at once; try again in {} ms",
                self.limits.calls,
                wait.as_millis()
            ),
            wait,
        )
    }

    /// How long a call of `kind` refused `now` should wait: one turn after
    /// the turn handed to the last one refused, within bounds.
    fn turn(&self, kind: Kind, now: Instant) -> Duration {
        let slots = self.slots(kind);
        let mut pace = self.pace.lock().expect("never poisoned");
        let turn = Duration::from_secs_f64(pace.slot_seconds / slots as f64);
        let longest = self.longest[kind as usize];
        let last = &mut pace.last_turn[kind as usize];
        let next = ((*last).max(now) + turn).min(now + longest);
        *last = next;
        (next - now).max(SHORTEST_PUSHBACK)
    }

    /// A place to read the body of `identity`'s call of `kind` outside its
    /// slot, or the refusal (with the kind's hint) past the identity's
    /// [`BODIES_AN_IDENTITY`].
    pub(crate) fn body_place(&self, kind: Kind, identity: &str) -> Result<bodies::Reading, Status> {
        self.bodies.place(identity).ok_or_else(|| {
            self.refused[kind as usize].fetch_add(1, Ordering::Relaxed);
            let wait = self.turn(kind, Instant::now());
            census_proto::retry::refused(
                &format!(
                    "{identity:?} has {BODIES_AN_IDENTITY} requests on their way to the coordinator already; \
                     try again in {} ms",
                    wait.as_millis()
                ),
                wait,
            )
        })
    }

    /// A call left its slot after `held`.
    fn left(&self, held: Duration) {
        self.busy_micros.fetch_add(held.as_micros() as u64, Ordering::Relaxed);
        let mut pace = self.pace.lock().expect("never poisoned");
        pace.slot_seconds += (held.as_secs_f64() - pace.slot_seconds) * MEAN_WEIGHT;
    }

    pub(crate) fn counts(&self) -> AdmissionCounts {
        let batch_pace = self.fleet.lock().expect("never poisoned").batch;
        AdmissionCounts {
            admitted: self.admitted.load(Ordering::Relaxed),
            refused_held: self.refused[Kind::Held as usize].load(Ordering::Relaxed),
            refused_leases: self.refused[Kind::Lease as usize].load(Ordering::Relaxed),
            most_in_flight: self.most_in_flight.load(Ordering::Relaxed),
            waiting: self.slots.counts().1,
            batch_pace,
            reading: self.bodies.now(),
        }
    }
}

/// The pace after `batch` and a `window` in which the slots were busy
/// `occupancy` of the time (and calls were `refused`, a sign of a full
/// house whatever the mean says): longer or shorter in proportion to how
/// far that is from [`TARGET_OCCUPANCY`], at most twice or half at once
/// (the calls of a fleet follow a new pace only as its batches end),
/// within [`SHORTEST_BATCH`] and `longest`; half as long when the fleet
/// was `backlogged`, however busy the slots.
/// A fleet's calls fall as its batches lengthen, so the pace settles where
/// the slots are about that busy, or at `longest`.
fn next_batch(batch: Duration, window: PaceWindow, longest: Duration) -> Duration {
    let occupancy = if window.refused { window.occupancy.max(1.0) } else { window.occupancy };
    let factor = if window.backlogged { 0.5 } else { (occupancy / TARGET_OCCUPANCY).clamp(0.5, 2.0) };
    let longest = longest.max(SHORTEST_BATCH);
    batch.mul_f64(factor).clamp(SHORTEST_BATCH, longest)
}

/// A call's place: the permits it holds while in flight.
struct Slot {
    admission: Arc<Admission>,
    caller: CallerKey,
    permits: Option<Permits>,
    since: Instant,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(permits) = self.permits.take() {
            self.admission.left(self.since.elapsed());
            self.admission.slots.give_back(permits);
        }
    }
}

/// An admitted call, shared by the layer that admitted it and the handler
/// (in the request's extensions), so that a report can step out while its
/// results are counted again. Empty for the calls admission does not bound.
/// The slot is given back when the last holder drops it.
#[derive(Clone, Default)]
pub(crate) struct Admitted(Arc<Mutex<Option<Slot>>>);

impl Admitted {
    /// Runs `work` (that uses no store connection) outside the call's slot:
    /// the slot is given back first, and a slot is waited for afterwards,
    /// in the queue (a slot given back goes to who waits first), but never
    /// refused: the call was admitted once.
    pub(crate) async fn outside<T>(&self, work: impl Future<Output = T>) -> T {
        let Some((admission, caller)) = self.leave() else { return work.await };
        let done = work.await;
        let permits = match admission.slots.back_in(caller) {
            Ok(permits) => permits,
            Err(place) => place.granted().await,
        };
        let slot = Slot { admission: admission.clone(), caller, permits: Some(permits), since: Instant::now() };
        *self.0.lock().expect("never poisoned") = Some(slot);
        done
    }

    /// Gives the slot back; the admission it was of, and whose call it is.
    fn leave(&self) -> Option<(Arc<Admission>, CallerKey)> {
        let slot = self.0.lock().expect("never poisoned").take()?;
        let left = (slot.admission.clone(), slot.caller);
        drop(slot);
        Some(left)
    }

    /// Gives the slot back now (the call is answered).
    pub(crate) fn release(&self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    /// Polls `call` once, by hand, so that each step is where the test says it is.
    fn poll<T>(call: &mut Pin<Box<impl Future<Output = T>>>) -> Poll<T> {
        call.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    /// A call admitted or refused at once.
    fn now(admission: &Arc<Admission>, kind: Kind) -> Result<Admitted, Status> {
        match poll(&mut Box::pin(admission.admit(kind, CallerKey::default()))) {
            Poll::Ready(admitted) => admitted,
            Poll::Pending => panic!("a {kind:?} call waits"),
        }
    }

    fn hint(status: &Status) -> Duration {
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        census_proto::retry::pushback(status).unwrap_or_else(|| panic!("no retry hint: {status:?}"))
    }

    #[test]
    fn the_default_is_the_pool_and_a_queue_as_long() {
        assert_eq!(AdmissionLimits::for_pool(16), AdmissionLimits { calls: 32, waiting: 8192 });
        assert_eq!(AdmissionLimits::for_pool(1), AdmissionLimits::with_calls(AdmissionLimits::LEAST_DEFAULT));
        assert_eq!(AdmissionLimits::for_pool(16).new_leases(), 24);
        assert_eq!(AdmissionLimits::with_calls(1).new_leases(), 1);
        assert_eq!(AdmissionLimits::with_calls(3).new_leases(), 3);
        assert_eq!(AdmissionLimits::with_calls(0).new_leases(), 1);
    }

    /// Four slots (three for new leases), a slot held 4 s on average: a
    /// new lease may expect 1.33 s a call ahead of it, 2 s at most; a call
    /// about held leases 1 s, 3 s at most.
    #[test]
    fn past_a_short_queue_calls_are_refused_with_a_hint_new_leases_first() {
        let admission = Admission::new(AdmissionLimits::with_calls(4), TTL);
        admission.pace.lock().unwrap().slot_seconds = 4.0;
        let leases: Vec<Admitted> = (0..3).map(|_| now(&admission, Kind::Lease).expect("a lease slot")).collect();
        // A fourth lease waits (1.33 s); a fifth would wait 2.67 s: refused.
        let mut fourth = Box::pin(admission.admit(Kind::Lease, CallerKey::default()));
        assert!(poll(&mut fourth).is_pending());
        let refused = now(&admission, Kind::Lease).err().expect("past the lease's queue");
        assert!(hint(&refused) >= SHORTEST_PUSHBACK);
        // The slot new leases never take admits a heartbeat at once.
        let held = now(&admission, Kind::Held).expect("the held leases' slot");
        // Calls about held leases wait while the lease and they ahead keep
        // them within 3 s: two more; the next is refused.
        let mut waiting: Vec<_> = (0..2).map(|_| Box::pin(admission.admit(Kind::Held, CallerKey::default()))).collect();
        for call in &mut waiting {
            assert!(poll(call).is_pending(), "waits for a slot");
        }
        assert_eq!(admission.counts().waiting, 3);
        let refused = now(&admission, Kind::Held).err().expect("past the held leases' queue");
        assert!(hint(&refused) <= TTL / 10);
        // Slots given back go to who waits first: the two held leases'
        // calls, then the lease.
        drop(leases);
        let admitted: Vec<Admitted> = waiting
            .iter_mut()
            .map(|call| match poll(call) {
                Poll::Ready(Ok(slot)) => slot,
                _ => panic!("the first waiting take the slots given back"),
            })
            .collect();
        let Poll::Ready(Ok(lease)) = poll(&mut fourth) else { panic!("then the lease") };
        assert_eq!(
            admission.counts(),
            AdmissionCounts {
                admitted: 7,
                refused_held: 1,
                refused_leases: 1,
                most_in_flight: 4,
                waiting: 0,
                batch_pace: SHORTEST_BATCH,
                reading: 0,
            }
        );
        drop((held, admitted, lease));
    }

    /// However short the calls seem, no more than `waiting` wait, half of
    /// it new leases.
    #[test]
    fn the_queue_is_bounded_whatever_the_calls_take() {
        let admission = Admission::new(AdmissionLimits { calls: 2, waiting: 8 }, TTL);
        admission.pace.lock().unwrap().slot_seconds = 0.0;
        let _in_flight: Vec<Admitted> = (0..2).map(|_| now(&admission, Kind::Held).expect("a slot")).collect();
        let mut waiting: Vec<_> = (0..8).map(|_| Box::pin(admission.admit(Kind::Held, CallerKey::default()))).collect();
        for call in &mut waiting {
            assert!(poll(call).is_pending());
        }
        assert!(now(&admission, Kind::Held).is_err());
        assert!(now(&admission, Kind::Lease).is_err());
        assert_eq!(admission.counts().waiting, 8);
    }

    #[test]
    fn a_caller_that_gives_up_waiting_leaves_the_queue() {
        let admission = Admission::new(AdmissionLimits::with_calls(1), TTL);
        let _held = now(&admission, Kind::Held).expect("the one slot");
        let mut waiting = Box::pin(admission.admit(Kind::Held, CallerKey::default()));
        assert!(poll(&mut waiting).is_pending());
        assert_eq!(admission.counts().waiting, 1);
        drop(waiting);
        assert_eq!(admission.counts().waiting, 0);
    }

    #[test]
    fn refused_calls_are_given_turns_one_after_another() {
        let admission = Admission::new(AdmissionLimits::with_calls(4), TTL);
        admission.pace.lock().unwrap().slot_seconds = 4.0;
        let now = Instant::now();
        // A slot is held 4 s on average and there are 3 for leases: a turn every 1.33 s.
        let turns: Vec<Duration> = (0..4).map(|_| admission.turn(Kind::Lease, now)).collect();
        let expected: Vec<Duration> = (1..=4).map(|n| Duration::from_secs_f64(4.0 / 3.0 * f64::from(n))).collect();
        for (turn, expected) in turns.iter().zip(&expected) {
            assert!(turn.abs_diff(*expected) < Duration::from_millis(1), "{turns:?}");
        }
        // Never past the longest pause of the kind: the lease's time.
        let far: Vec<Duration> = (0..100).map(|_| admission.turn(Kind::Lease, now)).collect();
        assert_eq!(far.last(), Some(&TTL));
        // Held leases have their own queue of turns, shorter.
        assert!(admission.turn(Kind::Held, now) <= TTL / 10);
    }

    #[test]
    fn a_report_steps_out_while_checked_and_back_in_ahead_of_new_calls() {
        let admission = Admission::new(AdmissionLimits::with_calls(1), TTL);
        let report = now(&admission, Kind::Held).expect("the one slot");
        let (checked, check) = tokio::sync::oneshot::channel::<()>();
        let mut checking = Box::pin(report.outside(async { check.await.unwrap() }));
        assert!(poll(&mut checking).is_pending(), "counting again");
        // While the report is checked, its slot serves another call.
        let other = now(&admission, Kind::Held).expect("the slot the report left");
        checked.send(()).unwrap();
        assert!(poll(&mut checking).is_pending(), "checked, waiting for a slot");
        // The slot the other call gives back goes to the report, not to a new call.
        other.release();
        let mut lease = Box::pin(admission.admit(Kind::Lease, CallerKey::default()));
        assert!(poll(&mut lease).is_pending(), "a new lease waits behind the report");
        assert_eq!(poll(&mut checking), Poll::Ready(()));
        report.release();
        assert!(matches!(poll(&mut lease), Poll::Ready(Ok(_))));
        let counts = admission.counts();
        assert_eq!((counts.admitted, counts.most_in_flight, counts.waiting), (3, 1, 0), "{counts:?}");
    }

    #[test]
    fn the_pace_follows_how_busy_the_slots_were() {
        let longest = Duration::from_secs(60);
        let pace = |batch: u64, occupancy: f64, refused: bool| {
            let window = PaceWindow { occupancy, refused, backlogged: false };
            next_batch(Duration::from_secs(batch), window, longest).as_secs_f64()
        };
        assert_eq!(pace(4, 0.5, false), 4.0, "half busy: as it was");
        assert_eq!(pace(4, 0.75, false), 6.0, "longer in proportion");
        assert_eq!(pace(4, 0.3, false), 2.4, "shorter in proportion");
        assert_eq!(pace(4, 12.0, false), 8.0, "at most twice at once");
        assert_eq!(pace(4, 0.0, false), 2.0, "at most half at once");
        assert_eq!(pace(4, 0.1, true), 8.0, "calls refused: a full house");
        assert_eq!(pace(1, 0.0, false), 1.0, "never under the shortest");
        assert_eq!(pace(50, 1.0, false), 60.0, "never over the longest");
        let full = PaceWindow { occupancy: 9.0, refused: true, backlogged: false };
        assert_eq!(next_batch(Duration::from_secs(1), full, Duration::ZERO), SHORTEST_BATCH);
        // Workers waiting with leases in hand: shorter, however full the house.
        let backlogged = PaceWindow { backlogged: true, ..full };
        assert_eq!(next_batch(Duration::from_secs(8), backlogged, longest), Duration::from_secs(4));
    }

    /// A fleet of `workers` whose batches last the pace makes two calls a
    /// batch; each holds one of 32 slots for 20 ms. From batches of a
    /// second (20,000 calls a second for 10,000 workers, twelve times what
    /// the slots take) the pace settles where about half the slots are busy.
    #[test]
    fn a_fleets_pace_settles_with_half_the_slots_busy() {
        let (slots, call_seconds, longest) = (32.0, 0.02, Duration::from_secs(300));
        for workers in [10.0, 1_000.0, 10_000.0] {
            let mut batch = SHORTEST_BATCH;
            for _ in 0..40 {
                let calls_per_second = 2.0 * workers / batch.as_secs_f64();
                let occupancy = calls_per_second * call_seconds / slots;
                batch =
                    next_batch(batch, PaceWindow { occupancy, refused: occupancy > 1.0, backlogged: false }, longest);
            }
            let occupancy = 2.0 * workers / batch.as_secs_f64() * call_seconds / slots;
            if batch == SHORTEST_BATCH {
                assert!(occupancy <= TARGET_OCCUPANCY, "{workers} workers: {occupancy}");
            } else {
                assert!((occupancy - TARGET_OCCUPANCY).abs() < 0.01, "{workers} workers: {occupancy} at {batch:?}");
            }
        }
    }

    #[test]
    fn the_coordinator_sets_its_pace_from_the_calls_it_admitted() {
        let admission = Admission::new(AdmissionLimits::with_calls(10), TTL);
        let start = admission.fleet.lock().unwrap().since;
        assert_eq!(admission.batch_pace_at(start), SHORTEST_BATCH, "at first: the worker's own second");
        // 2,000 calls of 20 ms in 2 s on 10 slots: busy twice over.
        admission.busy_micros.store(2_000 * 20_000, Ordering::Relaxed);
        assert_eq!(admission.batch_pace_at(start + Duration::from_secs(1)), SHORTEST_BATCH, "within the window");
        assert_eq!(admission.batch_pace_at(start + PACE_WINDOW), 2 * SHORTEST_BATCH);
        // A call refused in the next window: longer again, up to a quarter of the TTL.
        admission.refused[Kind::Lease as usize].store(1, Ordering::Relaxed);
        let mut at = start + PACE_WINDOW;
        for _ in 0..10 {
            at += PACE_WINDOW;
            admission.refused[Kind::Lease as usize].fetch_add(1, Ordering::Relaxed);
            admission.batch_pace_at(at);
        }
        assert_eq!(admission.counts().batch_pace, TTL / 4);
        // Jobs leased and most of them heartbeated: a backlog, half as long.
        admission.leased(100);
        admission.heartbeated(40);
        at += PACE_WINDOW;
        assert_eq!(admission.batch_pace_at(at), TTL / 8);
        // Idle from then on: back to a second.
        for _ in 0..10 {
            at += PACE_WINDOW;
            admission.batch_pace_at(at);
        }
        assert_eq!(admission.counts().batch_pace, SHORTEST_BATCH);
    }
}
