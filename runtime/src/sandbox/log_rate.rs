//! Each operator's share of the host's log: a token bucket per operator (or per tenant) over the
//! worker log lines (and printed output) the host writes for it, so no flood buries the others'.
//!
//! A call's own budget (`logLines`, `logKib`) bounds what one call may send, and crossing it fails
//! the call. This bounds what an operator's calls together put in the host's log: an operator
//! whose thousand resources each log a full budget per call would otherwise write a million lines
//! per resync, rotating every other operator's lines out of the pod log. Lines over the rate are
//! not written, counted (`wasmpilot_worker_log_lines_dropped_total`), and summed up in one host
//! line per operator at most every [`REPORT_EVERY`]. The worker sees no difference: its call, and
//! so its decision and a replay of it, does not depend on what the host's log took.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often an operator whose lines are being dropped gets a line saying how many.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The host's per-operator log rate: lines per second on average, and the burst an operator
/// may send at once (a call's whole log budget, so one call's lines are never cut).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRateLimit {
    pub lines_per_second: u32,
    pub burst: u32,
}

/// The buckets of every operator that called a worker, created at its first call.
pub struct LogRates {
    limit: Option<LogRateLimit>,
    operators: Mutex<HashMap<String, Arc<LogRate>>>,
}

impl LogRates {
    /// `None`: every line is written (the offline tools, or `--worker-log-lines-per-second 0`).
    pub fn new(limit: Option<LogRateLimit>) -> Self {
        LogRates {
            limit: limit.filter(|l| l.lines_per_second > 0),
            operators: Mutex::new(HashMap::new()),
        }
    }

    /// The bucket of `share` (the operator, or its tenant's `tenant:<name>`) for a call of
    /// `operator`, whose dropped lines count as its own (`None` when the host's log is not rate
    /// limited).
    pub fn of(&self, share: &str, operator: &str) -> Option<LogShare> {
        let limit = self.limit?;
        let rate = {
            let mut shares = self.operators.lock().unwrap_or_else(|p| p.into_inner());
            match shares.get(share) {
                Some(rate) => rate.clone(),
                None => {
                    let rate = Arc::new(LogRate::new(share, limit, Instant::now()));
                    shares.insert(share.to_string(), rate.clone());
                    rate
                }
            }
        };
        Some(LogShare {
            rate,
            dropped_total: crate::metrics::METRICS
                .worker_log_lines_dropped
                .get_or_create(&crate::metrics::OperatorLabels {
                    operator: operator.to_string(),
                })
                .clone(),
        })
    }
}

/// One call's view of its share: the bucket, and the calling operator's
/// `wasmpilot_worker_log_lines_dropped_total`.
pub struct LogShare {
    rate: Arc<LogRate>,
    dropped_total: prometheus_client::metrics::counter::Counter,
}

impl LogShare {
    /// Whether the host's log takes one more line of this operator now; a dropped line is
    /// counted for the operator, and the share's drops are reported (a host log line naming the
    /// operator or its tenant) when due.
    pub fn admit(&self) -> bool {
        let written = self.rate.admit();
        if !written {
            self.dropped_total.inc();
        }
        written
    }
}

/// One share's bucket: an operator's, or its tenant's.
pub struct LogRate {
    /// Who the reports name: the operator, or `tenant <name>`.
    share: String,
    limit: LogRateLimit,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    refilled: Instant,
    /// Lines dropped since the last report, and when that report was.
    unreported: u64,
    reported: Option<Instant>,
}

/// What the host's log does with one line.
#[derive(Debug, PartialEq, Eq)]
enum Admission {
    /// Write it; first report `dropped` lines dropped before it, if any.
    Write { dropped: u64 },
    /// Drop it; report `dropped` lines (this one included) now, if any.
    Drop { dropped: u64 },
}

impl LogRate {
    fn new(share: &str, limit: LogRateLimit, now: Instant) -> Self {
        let share = match share.strip_prefix("tenant:") {
            Some(tenant) => format!("tenant {tenant}"),
            None => share.to_string(),
        };
        LogRate {
            share,
            limit,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(limit.burst.max(1)),
                refilled: now,
                unreported: 0,
                reported: None,
            }),
        }
    }

    /// Whether the host's log takes one more line of this share now; the drops are reported
    /// (a host log line naming the share) when due.
    fn admit(&self) -> bool {
        let admission = self.admit_at(Instant::now());
        let (written, dropped) = match admission {
            Admission::Write { dropped } => (true, dropped),
            Admission::Drop { dropped } => (false, dropped),
        };
        if dropped > 0 {
            tracing::warn!(
                share = %self.share,
                dropped,
                lines_per_second = self.limit.lines_per_second,
                "worker log lines not written: the operator's workers log faster than the host's \
                 log takes from one operator (--worker-log-lines-per-second)"
            );
        }
        written
    }

    fn admit_at(&self, now: Instant) -> Admission {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + elapsed * f64::from(self.limit.lines_per_second))
            .min(f64::from(self.limit.burst.max(1)));
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            let dropped = std::mem::take(&mut b.unreported);
            if dropped > 0 {
                b.reported = Some(now);
            }
            return Admission::Write { dropped };
        }
        b.unreported += 1;
        let due = b
            .reported
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_EVERY);
        if due {
            b.reported = Some(now);
            Admission::Drop {
                dropped: std::mem::take(&mut b.unreported),
            }
        } else {
            Admission::Drop { dropped: 0 }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(lines_per_second: u32, burst: u32, start: Instant) -> LogRate {
        LogRate::new(
            "flood",
            LogRateLimit {
                lines_per_second,
                burst,
            },
            start,
        )
    }

    #[test]
    fn a_burst_passes_then_lines_pass_at_the_rate() {
        let t0 = Instant::now();
        let r = rate(10, 100, t0);
        let written = (0..150)
            .filter(|_| matches!(r.admit_at(t0), Admission::Write { .. }))
            .count();
        assert_eq!(written, 100, "the burst, then nothing at the same instant");
        // Half a second refills 5 lines.
        let later = t0 + Duration::from_millis(500);
        let written = (0..20)
            .filter(|_| matches!(r.admit_at(later), Admission::Write { .. }))
            .count();
        assert_eq!(written, 5);
        // A long pause refills at most the burst.
        let much_later = later + Duration::from_secs(3600);
        let written = (0..1000)
            .filter(|_| matches!(r.admit_at(much_later), Admission::Write { .. }))
            .count();
        assert_eq!(written, 100);
    }

    #[test]
    fn drops_are_reported_once_per_interval_and_when_lines_pass_again() {
        let t0 = Instant::now();
        let r = rate(1, 1, t0);
        assert_eq!(r.admit_at(t0), Admission::Write { dropped: 0 });
        // The first drop is reported at once; the next within the interval are only counted.
        assert_eq!(r.admit_at(t0), Admission::Drop { dropped: 1 });
        assert_eq!(r.admit_at(t0), Admission::Drop { dropped: 0 });
        assert_eq!(r.admit_at(t0), Admission::Drop { dropped: 0 });
        // The next line written reports the two counted since.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.admit_at(t1), Admission::Write { dropped: 2 });
        // A flood of 10 lines every 150 ms for 15 s at 1 line per second: every line is either
        // written or reported dropped, and the drops are reported at most once per interval.
        let (mut written, mut dropped, mut reports) = (0u64, 0u64, 0u32);
        let mut t = t1;
        for _ in 0..100 {
            t += Duration::from_millis(150);
            for _ in 0..10 {
                match r.admit_at(t) {
                    Admission::Write { dropped: d } => {
                        written += 1;
                        dropped += d;
                        reports += u32::from(d > 0);
                    }
                    Admission::Drop { dropped: d } => {
                        dropped += d;
                        reports += u32::from(d > 0);
                    }
                }
            }
        }
        assert!(
            (14..=15).contains(&written),
            "{written} written in 15 s at 1 per second"
        );
        // What is still unreported comes with the next line written.
        match r.admit_at(t + Duration::from_secs(5)) {
            Admission::Write { dropped: d } => dropped += d,
            other => panic!("a line after a pause is written: {other:?}"),
        }
        assert_eq!(written + dropped, 1000);
        assert!(
            reports <= 15 * 2 + 1,
            "{reports} reports in 15 s: about one per written line or interval"
        );
    }

    #[test]
    fn operators_have_buckets_of_their_own_and_no_limit_means_none() {
        let rates = LogRates::new(Some(LogRateLimit {
            lines_per_second: 1,
            burst: 1,
        }));
        let a = rates.of("a", "a").expect("limited");
        assert!(a.admit());
        assert!(!a.admit(), "a's bucket is empty");
        let b = rates.of("b", "b").expect("limited");
        assert!(b.admit(), "b's bucket is its own");
        assert!(Arc::ptr_eq(
            &a.rate,
            &rates.of("a", "a").expect("limited").rate
        ));
        assert!(LogRates::new(None).of("a", "a").is_none());
        let zero = LogRateLimit {
            lines_per_second: 0,
            burst: 1000,
        };
        assert!(LogRates::new(Some(zero)).of("a", "a").is_none());
    }

    #[test]
    fn a_tenant_shares_one_bucket_and_each_operator_counts_its_own_drops() {
        let rates = LogRates::new(Some(LogRateLimit {
            lines_per_second: 1,
            burst: 1,
        }));
        let dropped = |operator: &str| {
            crate::metrics::METRICS
                .worker_log_lines_dropped
                .get_or_create(&crate::metrics::OperatorLabels {
                    operator: operator.to_string(),
                })
                .get()
        };
        let (t1, t2) = (dropped("tenant-test-t1"), dropped("tenant-test-t2"));
        let one = rates.of("tenant:team", "tenant-test-t1").expect("limited");
        let two = rates.of("tenant:team", "tenant-test-t2").expect("limited");
        assert!(Arc::ptr_eq(&one.rate, &two.rate), "one bucket per tenant");
        assert_eq!(one.rate.share, "tenant team");
        assert!(one.admit());
        assert!(!two.admit(), "t2 finds its tenant's bucket empty");
        assert_eq!(dropped("tenant-test-t1"), t1);
        assert_eq!(dropped("tenant-test-t2"), t2 + 1, "the drop is t2's");
    }
}
