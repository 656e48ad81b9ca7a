//! Lease-based leader election: of several hosts, only the holder of a `coordination.k8s.io`
//! Lease runs controllers; the others wait and take over once the Lease expires.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::time::Duration;

/// Timing of the election, as in client-go: renew well within the lease duration.
#[derive(Clone, Debug)]
pub struct LeaseTiming {
    /// How long a Lease stays valid after its last renewal.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// How often a candidate tries to acquire.
    pub retry_every: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            retry_every: Duration::from_secs(2),
        }
    }
}

/// One candidate for the Lease `name` in `namespace`.
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
}

/// Why this host stopped leading.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipLost {
    #[error("Lease {name} is now held by {holder}")]
    TakenOver { name: String, holder: String },
    #[error("could not renew Lease {name} within its {duration:?} duration: {last_error}")]
    RenewTimedOut {
        name: String,
        duration: Duration,
        last_error: String,
    },
}

enum Attempt {
    Acquired,
    HeldBy(String),
}

impl LeaderElection {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: LeaseTiming,
    ) -> Self {
        LeaderElection {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this host holds the Lease.
    pub async fn acquire(&self) {
        let mut last_holder = String::new();
        loop {
            match self.try_acquire().await {
                Ok(Attempt::Acquired) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired leadership");
                    return;
                }
                Ok(Attempt::HeldBy(holder)) => {
                    if holder != last_holder {
                        tracing::info!(lease = %self.name, %holder, "another host leads; waiting");
                        last_holder = holder;
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %crate::error_report::Brief(&e), "could not read or write the Lease; retrying")
                }
            }
            tokio::time::sleep(self.timing.retry_every).await;
        }
    }

    /// Renews the Lease until leadership is lost; returns why.
    pub async fn hold(&self) -> LeadershipLost {
        let mut last_renewed = std::time::Instant::now();
        loop {
            tokio::time::sleep(self.timing.renew_every).await;
            match self.try_acquire().await {
                Ok(Attempt::Acquired) => last_renewed = std::time::Instant::now(),
                Ok(Attempt::HeldBy(holder)) => {
                    return LeadershipLost::TakenOver {
                        name: self.name.clone(),
                        holder,
                    }
                }
                Err(e) => {
                    if last_renewed.elapsed() >= self.timing.lease_duration {
                        return LeadershipLost::RenewTimedOut {
                            name: self.name.clone(),
                            duration: self.timing.lease_duration,
                            last_error: e.to_string(),
                        };
                    }
                    tracing::warn!(lease = %self.name, error = %crate::error_report::Brief(&e), "could not renew the Lease; retrying");
                }
            }
        }
    }

    /// Gives the Lease up (on shutdown), so another host takes over at once.
    pub async fn release(&self) {
        if let Ok(mut lease) = self.api.get(&self.name).await {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() == Some(&self.identity) {
                spec.holder_identity = None;
                spec.renew_time = None;
                if let Err(e) = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    tracing::warn!(lease = %self.name, error = %crate::error_report::Brief(&e), "could not release the Lease");
                } else {
                    tracing::info!(lease = %self.name, "released leadership");
                }
            }
        }
    }

    /// Takes or renews the Lease if it is free, expired or ours; writes are conditional on the
    /// resourceVersion read, so two candidates never both succeed.
    async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let now = jiff::Timestamp::now();
        let duration_secs = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Acquired),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Attempt::HeldBy("(a concurrent candidate)".into()))
                }
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !expired(spec, now) {
            return Ok(Attempt::HeldBy(holder));
        }
        if !ours {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(duration_secs);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Acquired),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Ok(Attempt::HeldBy("(a concurrent candidate)".into()))
            }
            Err(e) => Err(e),
        }
    }
}

/// A Lease whose last renewal is older than its duration.
fn expired(spec: &LeaseSpec, now: jiff::Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else {
        return true;
    };
    let duration =
        jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    renewed
        .checked_add(duration)
        .map(|until| until < now)
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_follows_renew_time_and_duration() {
        let now = jiff::Timestamp::now();
        let mut spec = LeaseSpec {
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        assert!(expired(&spec, now), "never renewed");
        spec.renew_time = Some(MicroTime(now - jiff::SignedDuration::from_secs(5)));
        assert!(!expired(&spec, now));
        spec.renew_time = Some(MicroTime(now - jiff::SignedDuration::from_secs(16)));
        assert!(expired(&spec, now));
    }
}
