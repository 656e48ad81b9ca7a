//! The operator's finalizer on its resources: added before the first phase runs; on deletion the
//! finalizer worker runs once (until it reports done), then the host removes only its own entry.

use crate::pipeline::ReconcileError;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a finalized resource is remembered: far longer than the watch takes to bring its
/// deletion, so a reconcile from a cache that still shows the finalizer does not run it again.
const REMEMBER_FINALIZED: Duration = Duration::from_secs(600);

/// The resources (by uid) whose finalizer worker reported done in this host. A reconcile of one
/// of them only removes the finalizer: the worker runs once per deletion, however many events
/// (its own status write among them) arrive before the object is gone.
#[derive(Default)]
pub struct FinalizedResources(Mutex<HashMap<String, Instant>>);

impl FinalizedResources {
    pub fn contains(&self, uid: &str) -> bool {
        self.0
            .lock()
            .map(|m| {
                m.get(uid)
                    .is_some_and(|at| at.elapsed() < REMEMBER_FINALIZED)
            })
            .unwrap_or(false)
    }

    pub fn insert(&self, uid: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|_, at| at.elapsed() < REMEMBER_FINALIZED);
            m.insert(uid.to_string(), Instant::now());
        }
    }
}

/// Whether `obj` carries finalizer `name`.
pub fn has(obj: &DynamicObject, name: &str) -> bool {
    obj.finalizers().iter().any(|f| f == name)
}

/// Adds finalizer `name` (a JSON patch that appends to the list the object has, so a
/// concurrent change of the list makes it fail instead of dropping another finalizer).
pub async fn add(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    name: &str,
) -> Result<(), ReconcileError> {
    let patch = if obj.finalizers().is_empty() {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [name]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": name},
        ])
    };
    json_patch_meta(api, &obj.name_any(), patch)
        .await
        .map_err(|source| ReconcileError::Api {
            action: "adding the finalizer",
            source,
        })
}

/// Removes finalizer `name`, and only it. An object that is already gone, or no longer carries
/// it, is success: the deletion went ahead. A stale list (the test fails) is read again once.
pub async fn remove(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    name: &str,
) -> Result<(), ReconcileError> {
    let mut current = obj.finalizers().to_vec();
    for attempt in 0..2 {
        let Some(index) = current.iter().position(|f| f == name) else {
            return Ok(());
        };
        let patch = json!([
            {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": name},
            {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
        ]);
        match json_patch_meta(api, &obj.name_any(), patch).await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            // The test failed: the cached list is not the object's any more.
            Err(kube::Error::Api(s)) if s.code == 422 && attempt == 0 => {
                match api.get_opt(&obj.name_any()).await {
                    Ok(Some(fresh)) if fresh.uid() == obj.uid() => {
                        current = fresh.finalizers().to_vec()
                    }
                    Ok(_) => return Ok(()),
                    Err(source) => {
                        return Err(ReconcileError::Api {
                            action: "reading the resource to remove the finalizer",
                            source,
                        })
                    }
                }
            }
            Err(source) => {
                return Err(ReconcileError::Api {
                    action: "removing the finalizer",
                    source,
                })
            }
        }
    }
    Err(ReconcileError::Finalizer(format!(
        "the finalizers of the resource kept changing while removing {name}; retrying"
    )))
}

async fn json_patch_meta(
    api: &Api<DynamicObject>,
    name: &str,
    patch: serde_json::Value,
) -> Result<(), kube::Error> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    api.patch::<DynamicObject>(name, &PatchParams::default(), &Patch::Json(patch))
        .await
        .map(|_| ())
}
