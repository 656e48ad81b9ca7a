//! An admin's consent to run a WasmOperator: the cluster-scoped `WasmOperatorGrant` of its name,
//! made for its uid, listing the sensitive kinds it may use (checked with `--require-operator-grants`).
//!
//! The WasmOperator is its author's; the grant is the admin's. A name alone proves nothing: an
//! operator deleted and made again under its name (by anyone who may create WasmOperators) has
//! a new uid, and the grant made for the old one does not cover it.

use crate::crd::{WasmOperator, WasmOperatorGrant};
use crate::definition::{same_kind, sensitive_uses};
use kube::{Api, ResourceExt};

/// Why a WasmOperator runs without an admin's consent.
#[derive(Debug, thiserror::Error)]
pub enum ConsentError {
    #[error("no WasmOperatorGrant {operator}: an admin reviews this operator and grants it (`wasmpilot grant {operator}`); until then it does not run")]
    Missing { operator: String },
    #[error("the WasmOperatorGrant {operator} was made for another WasmOperator of this name (uid {granted}), not this one (uid {uid}): an operator made again under a granted name is not granted; an admin reviews it and grants it anew (`wasmpilot grant {operator}`)")]
    ForAnother {
        operator: String,
        granted: String,
        uid: String,
    },
    #[error("the WasmOperatorGrant {operator} does not list these kinds in spec.sensitiveKinds: {uses}; an admin who consents adds them (`wasmpilot grant {operator}`)")]
    SensitiveNotGranted { operator: String, uses: String },
    #[error("could not read the WasmOperatorGrant {operator}: {}", crate::error_report::api_text(.source))]
    Unreadable {
        operator: String,
        #[source]
        source: kube::Error,
    },
}

impl ConsentError {
    /// The `Ready` condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ConsentError::Missing { .. } => "GrantMissing",
            ConsentError::ForAnother { .. } => "GrantForAnotherOperator",
            ConsentError::SensitiveNotGranted { .. } => "SensitiveKindNotGranted",
            ConsentError::Unreadable { .. } => "GrantUnreadable",
        }
    }

    /// Only a grant that could not be read is asked again by itself; the others wait for the
    /// grant (or the WasmOperator) to change.
    pub fn retry(&self) -> bool {
        matches!(self, ConsentError::Unreadable { .. })
    }
}

/// Whether `grant` (the one named as `op`, if any) consents to `op` as it is now.
pub fn check(grant: Option<&WasmOperatorGrant>, op: &WasmOperator) -> Result<(), ConsentError> {
    let operator = op.name_any();
    let Some(grant) = grant else {
        return Err(ConsentError::Missing { operator });
    };
    let uid = op.metadata.uid.clone().unwrap_or_default();
    if grant.spec.operator_uid != uid || uid.is_empty() {
        return Err(ConsentError::ForAnother {
            operator,
            granted: crate::worker_text::bound_owned(grant.spec.operator_uid.clone(), 128),
            uid,
        });
    }
    let mut missing: Vec<String> = sensitive_uses(&op.spec)
        .into_iter()
        .filter(|(kind, _, _)| {
            !grant
                .spec
                .sensitive_kinds
                .iter()
                .any(|g| same_kind(g, kind))
        })
        .map(|(kind, field, _)| format!("{} {} ({field})", kind.api_version, kind.kind))
        .collect();
    missing.dedup();
    if !missing.is_empty() {
        return Err(ConsentError::SensitiveNotGranted {
            operator,
            uses: crate::worker_text::bound_owned(
                missing.join(", "),
                crate::worker_text::MESSAGE_BYTES / 2,
            ),
        });
    }
    Ok(())
}

/// Reads `op`'s grant and checks it.
pub async fn consent(
    grants: &Api<WasmOperatorGrant>,
    op: &WasmOperator,
) -> Result<(), ConsentError> {
    let grant =
        grants
            .get_opt(&op.name_any())
            .await
            .map_err(|source| ConsentError::Unreadable {
                operator: op.name_any(),
                source,
            })?;
    check(grant.as_ref(), op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{KindRef, WasmOperatorGrantSpec};

    fn operator(uid: &str, sensitive: bool) -> WasmOperator {
        let mut spec: crate::crd::WasmOperatorSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "example.com/v1", "kind": "Thing"},
            "phases": [{"name": "Start", "initial": true, "final": true}]}))
        .expect("a spec");
        if sensitive {
            let secret = KindRef::new("v1", "Secret");
            spec.allow_sensitive_kinds = vec![secret.clone()];
            spec.finalizer = serde_json::from_value(serde_json::json!({
                "module": {"file": {"path": "f.wasm"}},
                "inputs": [{"name": "s", "apiVersion": "v1", "kind": "Secret"}]}))
            .ok();
        }
        let mut op = WasmOperator::new("payments", spec);
        op.metadata.uid = Some(uid.into());
        op
    }

    fn grant(uid: &str, kinds: &[(&str, &str)]) -> WasmOperatorGrant {
        WasmOperatorGrant::new(
            "payments",
            WasmOperatorGrantSpec {
                operator_uid: uid.into(),
                sensitive_kinds: kinds.iter().map(|(v, k)| KindRef::new(*v, *k)).collect(),
            },
        )
    }

    #[test]
    fn only_a_grant_for_this_uid_listing_its_sensitive_kinds_consents() {
        let reason = |r: Result<(), ConsentError>| r.err().map(|e| e.reason());
        assert_eq!(
            reason(check(None, &operator("u1", false))),
            Some("GrantMissing")
        );
        assert_eq!(
            reason(check(Some(&grant("u1", &[])), &operator("u1", false))),
            None
        );
        let squatted = check(Some(&grant("u1", &[])), &operator("u2", false));
        assert_eq!(reason(squatted), Some("GrantForAnotherOperator"));
        // The author asks for Secrets (allowSensitiveKinds); the admin did not consent.
        let asked = check(Some(&grant("u1", &[])), &operator("u1", true));
        let Err(e) = asked else { panic!("consented") };
        assert_eq!(e.reason(), "SensitiveKindNotGranted");
        assert!(
            e.to_string()
                .contains("v1 Secret (spec.finalizer.inputs[0])"),
            "{e}"
        );
        assert_eq!(
            reason(check(
                Some(&grant("u1", &[("v1", "Secret")])),
                &operator("u1", true)
            )),
            None
        );
        let mut no_uid = operator("", false);
        no_uid.metadata.uid = None;
        assert_eq!(
            reason(check(Some(&grant("", &[])), &no_uid)),
            Some("GrantForAnotherOperator"),
            "an object without a uid is never granted"
        );
    }
}
