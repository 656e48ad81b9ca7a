//! Changes to the cluster's RBAC objects, watched (metadata only) so that the operators' cached
//! access answers are asked again at their next use, seconds after an admin revokes a grant.
//!
//! Without this watch (a host not allowed to list RBAC objects) an answer is trusted for
//! [`crate::controller::grants::GRANTS_RECHECK`], as before.

use futures::StreamExt;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::core::PartialObjectMeta;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How many RBAC changes the host has seen: an answer asked before the latest is asked again.
#[derive(Clone, Default, Debug)]
pub struct RbacChanges(Arc<AtomicU64>);

impl RbacChanges {
    /// The count of changes seen so far.
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// One more change (or a gap in the watch, in which one may have been missed).
    pub fn changed(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// Watches Roles, RoleBindings, ClusterRoles and ClusterRoleBindings with `client` until
    /// the tasks are aborted; a kind the host may not list is left to the periodic recheck
    /// (logged once).
    pub fn watch(&self, client: &Client) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(watch_kind(
                Api::<PartialObjectMeta<Role>>::all(client.clone()),
                self.clone(),
            )),
            tokio::spawn(watch_kind(
                Api::<PartialObjectMeta<RoleBinding>>::all(client.clone()),
                self.clone(),
            )),
            tokio::spawn(watch_kind(
                Api::<PartialObjectMeta<ClusterRole>>::all(client.clone()),
                self.clone(),
            )),
            tokio::spawn(watch_kind(
                Api::<PartialObjectMeta<ClusterRoleBinding>>::all(client.clone()),
                self.clone(),
            )),
        ]
    }
}

async fn watch_kind<K>(api: Api<PartialObjectMeta<K>>, changes: RbacChanges)
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    let kind = K::kind(&Default::default()).to_string();
    let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default())
        .backoff(crate::controller::schedule::watch_backoff()));
    let mut warned = false;
    while let Some(event) = events.next().await {
        match event {
            // A list (the first, or after a gap) may hide a change: answers are asked again.
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::Init) => {
                changes.changed();
            }
            Ok(_) => {}
            Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 403 => {
                tracing::warn!(%kind, "the host may not list {kind}s: an operator's revoked grant is noticed within the periodic recheck (grant list and watch on rbac.authorization.k8s.io, deploy/rbac.yaml)");
                return;
            }
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(%kind, error = %crate::error_report::Brief(&e), "watching RBAC objects");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_counted_and_shared() {
        let changes = RbacChanges::default();
        let seen = changes.clone();
        assert_eq!(seen.current(), 0);
        changes.changed();
        changes.changed();
        assert_eq!(seen.current(), 2);
    }
}
