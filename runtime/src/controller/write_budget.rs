//! Each tenant's share of the host's writes: a token bucket per tenant (a grant's
//! `spec.tenant`, else the operator) over the objects its operators apply and delete and the
//! statuses they write, so one team's write storm waits on its own bucket, not on another's.
//!
//! A reconcile whose writes exceed what its tenant's bucket holds waits (its decision stands);
//! nothing is dropped. Waits are counted in `wasmpilot_writes_delayed_total{operator}`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Writes per second per tenant a host allows by default (`--writes-per-second-per-tenant`).
pub const DEFAULT_WRITES_PER_SECOND: u32 = 500;

/// The host's write budget: per tenant, `per_second` writes on average, bursts of twice that.
#[derive(Default)]
pub struct WriteBudget {
    /// 0: no bound.
    per_second: u32,
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Bucket>>>>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl WriteBudget {
    /// `per_second` writes per tenant (0: unbounded).
    pub fn new(per_second: u32) -> Self {
        WriteBudget {
            per_second,
            tenants: Mutex::default(),
        }
    }

    fn burst(&self) -> f64 {
        f64::from(self.per_second) * 2.0
    }

    fn bucket(&self, tenant: &str) -> Arc<tokio::sync::Mutex<Bucket>> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        tenants
            .entry(tenant.to_string())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Bucket {
                    tokens: self.burst(),
                    refilled: Instant::now(),
                }))
            })
            .clone()
    }

    /// Waits until `tenant` may make `writes` more writes (a batch larger than a burst goes out
    /// once the bucket holds a burst, and its rest is owed); returns how long it slept for
    /// them (zero when the bucket held them).
    /// Waiters of one tenant are served in turn; another tenant's never wait for them.
    pub async fn take(&self, tenant: &str, writes: usize) -> Duration {
        if self.per_second == 0 || writes == 0 {
            return Duration::ZERO;
        }
        let bucket = self.bucket(tenant);
        let mut b = bucket.lock().await;
        let started = Instant::now();
        let rate = f64::from(self.per_second);
        let refill = |b: &mut Bucket| {
            let now = Instant::now();
            b.tokens =
                (b.tokens + now.duration_since(b.refilled).as_secs_f64() * rate).min(self.burst());
            b.refilled = now;
        };
        refill(&mut b);
        let need = (writes as f64).min(self.burst());
        let mut waited = Duration::ZERO;
        if b.tokens < need {
            tokio::time::sleep(Duration::from_secs_f64((need - b.tokens) / rate)).await;
            refill(&mut b);
            waited = started.elapsed();
        }
        // The whole batch is charged: past a burst the bucket goes into debt, which the
        // tenant's next writes wait out.
        b.tokens -= writes as f64;
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tenant_past_its_burst_waits_and_another_does_not() {
        let budget = WriteBudget::new(100);
        assert_eq!(budget.take("team-a", 200).await, Duration::ZERO, "a burst");
        // The bucket is empty: 50 more writes wait half a second.
        let waited = budget.take("team-a", 50).await;
        assert!(
            (Duration::from_millis(490)..=Duration::from_millis(510)).contains(&waited),
            "{waited:?}"
        );
        assert_eq!(
            budget.take("team-b", 150).await,
            Duration::ZERO,
            "another tenant's bucket is its own"
        );
        // A batch larger than a burst waits for one burst, not forever.
        let waited = budget.take("team-a", 10_000).await;
        assert!(
            waited <= Duration::from_secs(2) + Duration::from_millis(10),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_bound_never_waits() {
        let budget = WriteBudget::new(0);
        for _ in 0..10 {
            assert_eq!(budget.take("t", 10_000).await, Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_holds_over_time() {
        let budget = WriteBudget::new(50);
        let started = Instant::now();
        // 100 (burst) + 500 more at 50/s: 10 s.
        for _ in 0..60 {
            budget.take("t", 10).await;
        }
        let took = started.elapsed();
        assert!(
            (Duration::from_millis(9_900)..=Duration::from_millis(10_100)).contains(&took),
            "{took:?}"
        );
    }
}
