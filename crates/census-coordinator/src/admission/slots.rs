//! Admission's slots, and who gets one that is given back: a report
//! stepping back in after its check first, then the callers in turn, one
//! call each, each caller's calls in the order they came. So a caller's
//! flood waits behind its own calls, never in front of another caller's:
//! with one semaphore for everyone (first come, first served), a worker
//! that sent 2,000 reports at once filled every slot and the whole queue,
//! and an honest worker's report waited behind all of them (issue 44: its
//! results fell from about 6,000 a second to 75).
//!
//! A caller is its credential as the call presents it ([`CallerKey`]), read
//! before anything touches the store; a call without one, or with a
//! malformed one, is refused before admission (`auth::presented`).

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::{LazyLock, Mutex};

use tokio::sync::oneshot;

use super::Kind;

/// Who a call is, for admission: a digest of the credential it presents
/// (keyed afresh in every process, so it tells nothing of the token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct CallerKey(u64);

impl CallerKey {
    /// The key of a call presenting `credential` (its `authorization`
    /// header), or of every call that presents none.
    pub(crate) fn of(credential: Option<&[u8]>) -> CallerKey {
        static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);
        CallerKey(credential.map_or(0, |bytes| KEY.hash_one(bytes)))
    }
}

/// What a call in flight holds: a call slot, a new lease's slot besides,
/// and whose call it is.
#[derive(Debug)]
pub(super) struct Permits {
    lease: bool,
    caller: CallerKey,
}

/// Where a call waiting for a slot stands, for the bound on its wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// Calls that will have a slot before this one: reports stepping back
    /// in, the caller's own calls waiting, and, of every other caller with
    /// calls waiting, as many as the caller's own plus one (their turns).
    pub ahead: usize,
    /// The caller's own calls waiting.
    pub mine: usize,
    /// Other callers with calls waiting.
    pub others: usize,
    /// Calls waiting, all callers together.
    pub waiting: usize,
}

/// The slots: how many are free, and the calls waiting for one.
pub(super) struct Slots {
    state: Mutex<State>,
}

struct State {
    free_calls: usize,
    free_leases: usize,
    in_flight: usize,
    /// Numbers the waiting calls in the order they came, and the callers'
    /// turns in the order they were given.
    next: u64,
    /// Reports stepping back in after their check: they go first.
    back_in: BTreeMap<u64, (CallerKey, oneshot::Sender<Permits>)>,
    callers: HashMap<CallerKey, Caller>,
    /// The callers with calls of each kind waiting, by their turn: a
    /// caller's turn is taken when it starts waiting and again each time
    /// one of its calls has had a slot and more wait.
    turns: [BTreeMap<u64, CallerKey>; 2],
    /// Callers with calls waiting.
    callers_waiting: usize,
    /// Calls waiting, reports stepping back in included.
    waiting: usize,
}

#[derive(Default)]
struct Caller {
    waiting: [BTreeMap<u64, oneshot::Sender<Permits>>; 2],
    /// The caller's turn, while it has calls waiting.
    turn: Option<u64>,
    in_flight: usize,
}

impl Caller {
    fn waiting(&self) -> usize {
        self.waiting[0].len() + self.waiting[1].len()
    }
}

/// A place in the queue, given up when dropped: a call granted a slot it
/// never took (its caller gone) gives the slot back.
pub(super) struct Place<'a> {
    slots: &'a Slots,
    ticket: u64,
    /// `None`: a report stepping back in.
    of: Option<(Kind, CallerKey)>,
    granted: oneshot::Receiver<Permits>,
}

impl Place<'_> {
    /// Waits for the slot.
    pub(super) async fn granted(mut self) -> Permits {
        (&mut self.granted).await.expect("a place is granted or removed, never dropped by the slots")
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.slots.remove(self.ticket, self.of);
        if let Ok(permits) = self.granted.try_recv() {
            self.slots.give_back(permits);
        }
    }
}

impl Slots {
    /// `calls` slots, of which `leases` may be held by new leases.
    pub(super) fn new(calls: usize, leases: usize) -> Slots {
        Slots {
            state: Mutex::new(State {
                free_calls: calls,
                free_leases: leases,
                in_flight: 0,
                next: 0,
                back_in: BTreeMap::new(),
                callers: HashMap::new(),
                turns: [BTreeMap::new(), BTreeMap::new()],
                callers_waiting: 0,
                waiting: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("never poisoned")
    }

    /// A slot free now for a call of `kind`, if any: then nobody waits who
    /// could take it.
    pub(super) fn take(&self, kind: Kind, caller: CallerKey) -> Option<Permits> {
        let mut state = self.state();
        let lease = kind == Kind::Lease;
        (state.free_calls > 0 && (!lease || state.free_leases > 0)).then(|| state.grant(lease, caller))
    }

    /// A place in the queue for a call of `kind` from `caller`, if `fits`
    /// its position.
    pub(super) fn queue(
        &self,
        kind: Kind,
        caller: CallerKey,
        fits: impl FnOnce(Position) -> bool,
    ) -> Option<Place<'_>> {
        let mut state = self.state();
        let mine = state.callers.get(&caller).map_or(0, Caller::waiting);
        let others = state.callers_waiting - usize::from(mine > 0);
        let position = Position {
            ahead: state.back_in.len() + mine + (state.waiting - state.back_in.len() - mine).min((mine + 1) * others),
            mine,
            others,
            waiting: state.waiting,
        };
        if !fits(position) {
            return None;
        }
        let (ticket, reply) = state.ticket();
        state.enter(caller, kind, ticket, reply.0);
        Some(Place { slots: self, ticket, of: Some((kind, caller)), granted: reply.1 })
    }

    /// A call slot for a report stepping back in: free now, or the first
    /// given back.
    pub(super) fn back_in(&self, caller: CallerKey) -> Result<Permits, Place<'_>> {
        let mut state = self.state();
        if state.free_calls > 0 && state.back_in.is_empty() {
            return Ok(state.grant(false, caller));
        }
        let (ticket, reply) = state.ticket();
        state.back_in.insert(ticket, (caller, reply.0));
        Err(Place { slots: self, ticket, of: None, granted: reply.1 })
    }

    /// A call leaves its slot: the slot goes to the next call waiting.
    pub(super) fn give_back(&self, permits: Permits) {
        let mut state = self.state();
        state.release(permits);
        state.dispatch();
    }

    /// A place given up: its call leaves the queue (if it is still there).
    fn remove(&self, ticket: u64, of: Option<(Kind, CallerKey)>) {
        let mut state = self.state();
        let removed = match of {
            None => state.back_in.remove(&ticket).is_some(),
            Some((kind, caller)) => {
                let Some(entry) = state.callers.get_mut(&caller) else { return };
                let removed = entry.waiting[kind as usize].remove(&ticket).is_some();
                if removed {
                    state.left_queue(caller);
                    state.forget_if_idle(caller);
                }
                removed
            }
        };
        state.waiting -= usize::from(removed);
    }

    /// Calls in flight, and calls waiting.
    pub(super) fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.in_flight, state.waiting)
    }
}

impl State {
    fn ticket(&mut self) -> (u64, (oneshot::Sender<Permits>, oneshot::Receiver<Permits>)) {
        self.next += 1;
        self.waiting += 1;
        (self.next, oneshot::channel())
    }

    fn grant(&mut self, lease: bool, caller: CallerKey) -> Permits {
        self.free_calls -= 1;
        self.free_leases -= usize::from(lease);
        self.in_flight += 1;
        self.callers.entry(caller).or_default().in_flight += 1;
        Permits { lease, caller }
    }

    fn release(&mut self, permits: Permits) {
        self.free_calls += 1;
        self.free_leases += usize::from(permits.lease);
        self.in_flight -= 1;
        if let Some(caller) = self.callers.get_mut(&permits.caller) {
            caller.in_flight -= 1;
            self.forget_if_idle(permits.caller);
        }
    }

    /// A caller with nothing in flight and nothing waiting is forgotten, so
    /// the map holds only the callers present.
    fn forget_if_idle(&mut self, caller: CallerKey) {
        if self.callers.get(&caller).is_some_and(|entry| entry.in_flight == 0 && entry.waiting() == 0) {
            self.callers.remove(&caller);
        }
    }

    /// `caller` starts waiting with a call of `kind` numbered `ticket`.
    fn enter(&mut self, caller: CallerKey, kind: Kind, ticket: u64, reply: oneshot::Sender<Permits>) {
        self.next += 1;
        let new_turn = self.next;
        let entry = self.callers.entry(caller).or_default();
        if entry.waiting() == 0 {
            self.callers_waiting += 1;
        }
        let turn = *entry.turn.get_or_insert(new_turn);
        entry.waiting[kind as usize].insert(ticket, reply);
        self.turns[kind as usize].insert(turn, caller);
    }

    /// A call of `caller` left the queue: its caller leaves the turns of the
    /// kinds it no longer waits for.
    fn left_queue(&mut self, caller: CallerKey) {
        let Some(entry) = self.callers.get_mut(&caller) else { return };
        let Some(turn) = entry.turn else { return };
        for kind in [Kind::Held, Kind::Lease] {
            if entry.waiting[kind as usize].is_empty() {
                self.turns[kind as usize].remove(&turn);
            }
        }
        if entry.waiting() == 0 {
            entry.turn = None;
            self.callers_waiting -= 1;
        }
    }

    /// Hands free slots to the calls waiting: reports stepping back in
    /// first; then the caller whose turn came first among those with a call
    /// that may take the slot (a new lease only while a lease's slot is
    /// free), its calls about held leases before its new leases; its turn
    /// then goes behind every other caller's.
    fn dispatch(&mut self) {
        while self.free_calls > 0 {
            if let Some((_, (caller, reply))) = self.back_in.pop_first() {
                self.waiting -= 1;
                let permits = self.grant(false, caller);
                if let Err(permits) = reply.send(permits) {
                    self.release(permits);
                }
                continue;
            }
            let held = self.turns[Kind::Held as usize].first_key_value().map(|(turn, caller)| (*turn, *caller));
            let lease = self.turns[Kind::Lease as usize].first_key_value().map(|(turn, caller)| (*turn, *caller));
            let (kind, caller) = match (held, lease.filter(|_| self.free_leases > 0)) {
                (Some(held), Some(lease)) if lease.0 < held.0 => (Kind::Lease, lease.1),
                (Some(held), _) => (Kind::Held, held.1),
                (None, Some(lease)) => (Kind::Lease, lease.1),
                (None, None) => return,
            };
            let reply = self.take_turn(kind, caller);
            let permits = self.grant(kind == Kind::Lease, caller);
            if let Err(permits) = reply.send(permits) {
                self.release(permits);
            }
        }
    }

    /// Takes the first call of `kind` of `caller`, whose turn it is, off the
    /// queue; if more of its calls wait, it takes a new turn, behind the others.
    fn take_turn(&mut self, kind: Kind, caller: CallerKey) -> oneshot::Sender<Permits> {
        self.next += 1;
        let new_turn = self.next;
        let entry = self.callers.get_mut(&caller).expect("the caller in turn is known");
        let (_, reply) = entry.waiting[kind as usize].pop_first().expect("the caller in turn waits");
        let turn = entry.turn.take().expect("a caller waiting has a turn");
        for turns in &mut self.turns {
            turns.remove(&turn);
        }
        self.waiting -= 1;
        if entry.waiting() == 0 {
            self.callers_waiting -= 1;
        } else {
            entry.turn = Some(new_turn);
            for kind in [Kind::Held, Kind::Lease] {
                if !entry.waiting[kind as usize].is_empty() {
                    self.turns[kind as usize].insert(new_turn, caller);
                }
            }
        }
        reply
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(n: u64) -> CallerKey {
        CallerKey(n)
    }

    fn queued<'a>(slots: &'a Slots, kind: Kind, who: u64) -> Place<'a> {
        slots.queue(kind, caller(who), |_| true).expect("a place")
    }

    fn granted(place: &mut Place<'_>) -> Option<Permits> {
        place.granted.try_recv().ok()
    }

    /// One caller's flood waits behind its own calls: a slot given back
    /// goes to the other caller's call, though it came last.
    #[test]
    fn callers_take_turns_for_the_slots_given_back() {
        let slots = Slots::new(2, 2);
        let busy: Vec<Permits> = (0..2).map(|_| slots.take(Kind::Held, caller(1)).expect("free")).collect();
        let mut flood: Vec<Place> = (0..5).map(|_| queued(&slots, Kind::Held, 1)).collect();
        let mut honest = queued(&slots, Kind::Held, 2);
        let mut busy = busy.into_iter();
        slots.give_back(busy.next().unwrap());
        assert!(granted(&mut flood[0]).is_some(), "the flood's first call came first");
        slots.give_back(busy.next().unwrap());
        assert!(granted(&mut honest).is_some(), "then the other caller's turn, before the flood's second");
        assert!(flood[1..].iter_mut().all(|place| granted(place).is_none()));
        assert_eq!(slots.counts(), (2, 4));
    }

    /// Where a call would stand: behind its caller's own calls, and one
    /// turn of each other caller for each of them.
    #[test]
    fn a_call_stands_behind_its_callers_own_and_a_turn_of_each_other() {
        let slots = Slots::new(1, 1);
        let _busy = slots.take(Kind::Held, caller(9)).expect("free");
        let _flood: Vec<Place> = (0..100).map(|_| queued(&slots, Kind::Held, 1)).collect();
        let _other = queued(&slots, Kind::Held, 2);
        let mut seen = None;
        let _new = slots.queue(Kind::Held, caller(3), |position| {
            seen = Some(position);
            true
        });
        assert_eq!(seen, Some(Position { ahead: 2, mine: 0, others: 2, waiting: 101 }));
        let _more = slots.queue(Kind::Held, caller(1), |position| {
            seen = Some(position);
            true
        });
        assert_eq!(seen, Some(Position { ahead: 100 + 1 + 1, mine: 100, others: 2, waiting: 102 }));
    }

    /// A new lease waits for a lease's slot; a call about held leases
    /// behind it takes the call slot that is free meanwhile.
    #[test]
    fn a_held_call_passes_a_lease_waiting_for_a_leases_slot() {
        let slots = Slots::new(2, 1);
        let lease = slots.take(Kind::Lease, caller(1)).expect("the lease's slot");
        let held = slots.take(Kind::Held, caller(1)).expect("the other slot");
        let mut second_lease = queued(&slots, Kind::Lease, 1);
        let mut beat = queued(&slots, Kind::Held, 1);
        slots.give_back(held);
        assert!(granted(&mut second_lease).is_none(), "no lease's slot is free");
        assert!(granted(&mut beat).is_some());
        slots.give_back(lease);
        assert!(granted(&mut second_lease).is_some());
    }

    /// A place given up leaves the queue; a slot granted to a call whose
    /// caller is gone comes back.
    #[test]
    fn places_given_up_leave_and_slots_never_taken_come_back() {
        let slots = Slots::new(1, 1);
        let busy = slots.take(Kind::Held, caller(1)).expect("free");
        let gone = queued(&slots, Kind::Held, 2);
        let mut next = queued(&slots, Kind::Held, 3);
        drop(gone);
        assert_eq!(slots.counts(), (1, 1));
        slots.give_back(busy);
        let permits = granted(&mut next).expect("the slot goes to the call still waiting");
        let late = queued(&slots, Kind::Held, 4);
        slots.give_back(permits);
        // Granted, but the caller goes before it takes the slot.
        drop(late);
        assert_eq!(slots.counts(), (0, 0));
        assert!(slots.take(Kind::Held, caller(5)).is_some(), "the slot is free again");
        assert!(slots.state().callers.len() <= 1, "callers with nothing in flight are forgotten");
    }

    #[test]
    fn reports_stepping_back_in_go_first() {
        let slots = Slots::new(1, 1);
        let busy = slots.take(Kind::Held, caller(1)).expect("free");
        let mut lease = queued(&slots, Kind::Lease, 2);
        let Err(mut report) = slots.back_in(caller(3)) else { panic!("no slot is free") };
        slots.give_back(busy);
        assert!(granted(&mut report).is_some());
        assert!(granted(&mut lease).is_none());
    }
}
