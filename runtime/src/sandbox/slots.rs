//! The host's worker slots (and the module cache's fetch and compile slots), shared fairly
//! between operators: a freed slot goes to the operator next in turn among those waiting (round
//! robin), not to whoever asked first.
//!
//! With first-come slots, an operator whose many resources run slow workers fills the queue,
//! and another operator's call waits behind all of them. Here it waits for at most one slot to
//! free (a running call ends within its deadline) before its operator's turn comes. Within one
//! operator, calls are served in the order they asked.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A number of slots handed out per operator in turn.
#[derive(Clone)]
pub struct FairSlots {
    inner: Arc<Mutex<SlotState>>,
}

struct SlotState {
    free: usize,
    /// Per operator, its waiting calls, oldest first.
    waiting: HashMap<String, VecDeque<oneshot::Sender<WorkerSlot>>>,
    /// The operators with waiting calls, in the order their turn comes.
    turns: VecDeque<String>,
    closed: bool,
}

/// A held slot: given back (to the next operator in turn) when dropped.
pub struct WorkerSlot {
    /// `None` once disarmed (a slot that could not be handed over, already accounted for).
    slots: Option<Arc<Mutex<SlotState>>>,
}

/// The slots were closed (the host is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the host is shutting down")]
pub struct SlotsClosed;

impl FairSlots {
    pub fn new(slots: usize) -> FairSlots {
        FairSlots {
            inner: Arc::new(Mutex::new(SlotState {
                free: slots.max(1),
                waiting: HashMap::new(),
                turns: VecDeque::new(),
                closed: false,
            })),
        }
    }

    fn lock(slots: &Mutex<SlotState>) -> std::sync::MutexGuard<'_, SlotState> {
        slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a call of `operator`: at once when one is free and no one waits, else when
    /// its operator's turn comes.
    pub async fn acquire(&self, operator: &str) -> Result<WorkerSlot, SlotsClosed> {
        let receiver = {
            let mut state = Self::lock(&self.inner);
            if state.closed {
                return Err(SlotsClosed);
            }
            if state.free > 0 && state.turns.is_empty() {
                state.free -= 1;
                return Ok(WorkerSlot {
                    slots: Some(self.inner.clone()),
                });
            }
            let (sender, receiver) = oneshot::channel();
            let queue = state.waiting.entry(operator.to_string()).or_default();
            queue.push_back(sender);
            if queue.len() == 1 {
                state.turns.push_back(operator.to_string());
            }
            receiver
        };
        // A waiter dropped (its reconcile cancelled) with a slot already sent drops the slot,
        // which goes on to the next in turn.
        receiver.await.map_err(|_| SlotsClosed)
    }

    /// Refuses every waiting and later call.
    pub fn close(&self) {
        let mut state = Self::lock(&self.inner);
        state.closed = true;
        state.waiting.clear();
        state.turns.clear();
    }

    /// Calls waiting for a slot, per operator (for metrics and tests).
    pub fn waiting(&self) -> HashMap<String, usize> {
        let state = Self::lock(&self.inner);
        state
            .waiting
            .iter()
            .map(|(op, q)| (op.clone(), q.len()))
            .collect()
    }
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        // Handed on under the lock: the next in turn gets it, or it is free again.
        let Some(slots) = self.slots.take() else {
            return;
        };
        let mut state = FairSlots::lock(&slots);
        while let Some(operator) = state.turns.pop_front() {
            let Some(queue) = state.waiting.get_mut(&operator) else {
                continue;
            };
            let mut given = false;
            while let Some(sender) = queue.pop_front() {
                let slot = WorkerSlot {
                    slots: Some(slots.clone()),
                };
                match sender.send(slot) {
                    Ok(()) => {
                        given = true;
                        break;
                    }
                    // That call gave up waiting: the slot comes back, disarmed (its drop must
                    // not take this lock again), and goes to the next.
                    Err(mut returned) => returned.slots = None,
                }
            }
            let more = !queue.is_empty();
            if more {
                state.turns.push_back(operator);
            } else {
                state.waiting.remove(&operator);
            }
            if given {
                return;
            }
        }
        state.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Runs `calls` (operator, label) each holding a slot for `hold`, and returns the labels in
    /// the order they got one.
    async fn order(slots: usize, calls: &[(&str, &str)], hold: Duration) -> Vec<String> {
        let fair = FairSlots::new(slots);
        let served = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (operator, label) in calls {
            let fair = fair.clone();
            let served = served.clone();
            let (operator, label) = (operator.to_string(), label.to_string());
            tasks.push(tokio::spawn(async move {
                let slot = fair.acquire(&operator).await.expect("open");
                served.lock().expect("lock").push(label);
                tokio::time::sleep(hold).await;
                drop(slot);
            }));
            // Each asks after the one before (the order they wait in is the order written).
            tokio::task::yield_now().await;
        }
        for t in tasks {
            t.await.expect("task");
        }
        let order = served.lock().expect("lock").clone();
        order
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_operator_is_served_at_the_next_free_slot_not_after_a_busy_ones_queue() {
        let fair = FairSlots::new(2);
        let hold = Duration::from_millis(900);
        let started = tokio::time::Instant::now();
        let mut busy = Vec::new();
        for _ in 0..10 {
            let fair = fair.clone();
            busy.push(tokio::spawn(async move {
                let slot = fair.acquire("busy").await.expect("open");
                tokio::time::sleep(hold).await;
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        let slot = fair.acquire("quick").await.expect("open");
        let waited = started.elapsed();
        drop(slot);
        assert!(
            waited <= hold,
            "served when the first busy calls ended ({waited:?}), not after the 8 queued before it (first come: {:?})",
            hold * 5
        );
        for b in busy {
            b.await.expect("task");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn operators_take_turns_and_each_keeps_its_order() {
        let calls = [
            ("a", "a1"),
            ("a", "a2"),
            ("a", "a3"),
            ("b", "b1"),
            ("b", "b2"),
            ("c", "c1"),
        ];
        let served = order(1, &calls, Duration::from_millis(10)).await;
        assert_eq!(served, ["a1", "a2", "b1", "c1", "a3", "b2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_passes_its_turn_on() {
        let fair = FairSlots::new(1);
        let held = fair.acquire("a").await.expect("free");
        let gave_up = tokio::time::timeout(Duration::from_millis(5), fair.acquire("b")).await;
        assert!(gave_up.is_err(), "no slot free");
        let waiting = {
            let fair = fair.clone();
            tokio::spawn(async move { fair.acquire("c").await.map(|_| ()) })
        };
        tokio::task::yield_now().await;
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("c is served, not stuck behind b")
            .expect("task")
            .expect("open");
        assert!(
            fair.acquire("d").await.is_ok(),
            "and the slot is free again"
        );
    }
}
