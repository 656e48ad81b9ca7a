//! The shared caches charged to the operators that read them: every object a cache holds counts
//! for each operator whose inputs or outputs it serves, and once for its tenant.
//!
//! Published as `wasmpilot_cached_objects_charged{operator}` (alert `WasmpilotOperatorCacheLarge`)
//! and `wasmpilot_tenant_cached_objects{tenant}` for the grants' tenants (alert
//! `WasmpilotTenantCacheLarge`), so an admin sees whose reads the host's memory holds.

use crate::controller::context::OperatorContext;
use std::collections::{BTreeMap, HashMap, HashSet};

/// How often the charges are counted.
pub const CHARGE_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// One running operator's caches: each (its address, the objects it holds).
pub fn held(ctx: &OperatorContext) -> Vec<(usize, usize)> {
    ctx.inputs.held().chain(ctx.outputs.held()).collect()
}

/// A running operator as charged: its name, its tenant (its grant's `spec.tenant`; `None`: a
/// tenant of its own, charged as the operator) and what it holds ([`held`]).
pub type Reader = (String, Option<String>, Vec<(usize, usize)>);

/// Charges per operator and per named tenant.
pub type Charges = (BTreeMap<String, usize>, BTreeMap<String, usize>);

/// What each operator and each tenant is charged, from the running operators (name, tenant,
/// [`held`]): a cache shared by two operators of one tenant counts once for the tenant.
pub fn charges(running: &[Reader]) -> Charges {
    let mut per_operator = BTreeMap::new();
    let mut tenant_caches: HashMap<&str, HashSet<usize>> = HashMap::new();
    let mut per_tenant: BTreeMap<String, usize> = BTreeMap::new();
    for (name, tenant, held) in running {
        per_operator.insert(name.clone(), held.iter().map(|(_, n)| n).sum());
        let Some(tenant) = tenant else { continue };
        let seen = tenant_caches.entry(tenant.as_str()).or_default();
        let total = per_tenant.entry(tenant.clone()).or_default();
        for (cache, objects) in held {
            if seen.insert(*cache) {
                *total += objects;
            }
        }
    }
    (per_operator, per_tenant)
}

/// Sets each running operator's `wasmpilot_watches_charged` (the caches it reads, one watch each).
pub fn publish_watches(running: &[Reader]) {
    for (name, _, held) in running {
        crate::metrics::METRICS
            .watches_charged
            .get_or_create(&crate::metrics::OperatorLabels {
                operator: name.clone(),
            })
            .set(held.len() as i64);
    }
}

/// Sets the gauges to `charges`, dropping those of operators and tenants no longer running.
pub fn publish((per_operator, per_tenant): &Charges, before: &mut Charges) {
    let m = &crate::metrics::METRICS;
    for gone in before.0.keys().filter(|k| !per_operator.contains_key(*k)) {
        m.cached_objects_charged
            .remove(&crate::metrics::OperatorLabels {
                operator: gone.clone(),
            });
    }
    for gone in before.1.keys().filter(|k| !per_tenant.contains_key(*k)) {
        m.tenant_cached_objects
            .remove(&crate::metrics::TenantLabels {
                tenant: gone.clone(),
            });
    }
    for gone in before.0.keys().filter(|k| !per_operator.contains_key(*k)) {
        m.watches_charged.remove(&crate::metrics::OperatorLabels {
            operator: gone.clone(),
        });
    }
    for (operator, n) in per_operator {
        m.cached_objects_charged
            .get_or_create(&crate::metrics::OperatorLabels {
                operator: operator.clone(),
            })
            .set(*n as i64);
    }
    for (tenant, n) in per_tenant {
        m.tenant_cached_objects
            .get_or_create(&crate::metrics::TenantLabels {
                tenant: tenant.clone(),
            })
            .set(*n as i64);
    }
    *before = (per_operator.clone(), per_tenant.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_operator_pays_for_what_it_reads_and_a_tenant_once_per_cache() {
        // Caches 1 (1,000 objects) and 2 (10): a1 and a2 of team-a share cache 1; b reads it too.
        let running = vec![
            (
                "a1".to_string(),
                Some("team-a".to_string()),
                vec![(1, 1000), (2, 10)],
            ),
            (
                "a2".to_string(),
                Some("team-a".to_string()),
                vec![(1, 1000)],
            ),
            ("b".to_string(), None, vec![(1, 1000)]),
        ];
        let (per_operator, per_tenant) = charges(&running);
        assert_eq!(per_operator["a1"], 1010);
        assert_eq!(per_operator["a2"], 1000);
        assert_eq!(per_operator["b"], 1000);
        assert_eq!(
            per_tenant["team-a"], 1010,
            "cache 1 counted once for team-a"
        );
        assert_eq!(
            per_tenant.keys().collect::<Vec<_>>(),
            ["team-a"],
            "an operator without a tenant is charged as itself only"
        );
    }
}
