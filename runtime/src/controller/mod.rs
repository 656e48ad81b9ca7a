//! The cluster side: the `manager` loads WasmOperators into a `context` each, `watch` runs one
//! controller per operator over shared `informers` (their caches an `object_index`; requeueing the resources a change concerns, found through `selector_index`),
//! `schedule` paces retries, `reconcile` runs one [`crate::pipeline`] step on the cluster
//! (`cluster_effects`, its `own_writes` waking nothing), `live_evidence` hands its worker call to
//! the record sink and the `shadow` lane, `output_cycles` finds operators creating each
//! other's resources, `leader` elects the active host, `buckets` shares
//! the resources among active replicas (each watch's `deletion_log` covering handover gaps), and
//! `watch_health` reports a failing watch on its WasmOperator; `admin_consent` checks the admin's
//! grant of each WasmOperator before it loads.

pub mod admin_consent;
pub mod buckets;
pub mod cache_charges;
pub mod cluster_effects;
pub mod context;
pub mod deletion_log;
pub mod finalizer;
pub mod grants;
pub mod informers;
pub mod leader;
pub mod live_evidence;
pub mod manager;
pub mod object_index;
pub mod operator_removal;
pub mod output_cycles;
pub mod own_writes;
pub mod phase_gauges;
pub mod rbac_changes;
pub mod reconcile;
pub mod schedule;
pub mod selector_index;
pub mod shadow;
pub mod watch;
pub mod watch_connections;
pub mod watch_health;
pub mod write_budget;

#[cfg(test)]
mod mock_api_tests;
#[cfg(test)]
mod reconcile_tests;
#[cfg(test)]
mod status_shapes_tests;
#[cfg(any(test, feature = "testing"))]
pub mod test_operator;
