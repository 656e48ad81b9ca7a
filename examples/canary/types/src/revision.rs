//! The revision of a pod template: what tells one version of the target Deployment from the next.

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// A short, stable hash of a pod template (64-bit FNV-1a of its JSON, 16 hex digits).
///
/// The template is serialized through its k8s-openapi type, so field order is fixed and the
/// hash depends only on the content. Templates read back from the API server carry its
/// defaults; compare revisions of templates read the same way (the target, as an input).
pub fn revision(template: &PodTemplateSpec) -> String {
    // Serializing a k8s-openapi type to JSON cannot fail (no maps with non-string keys).
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    format!("{:016x}", fnv1a(&bytes))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": { "labels": { "app": "web", "tier": "front" } },
            "spec": { "containers": [{ "name": "web", "image": image }] },
        }))
        .unwrap()
    }

    #[test]
    fn known_fnv1a_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn same_content_same_revision_other_content_other_revision() {
        let a = revision(&template("web:1"));
        assert_eq!(a.len(), 16);
        assert_eq!(a, revision(&template("web:1")));
        assert_ne!(a, revision(&template("web:2")));
        // Label order in the source does not matter: labels are a sorted map.
        let reordered: PodTemplateSpec = serde_json::from_value(json!({
            "spec": { "containers": [{ "image": "web:1", "name": "web" }] },
            "metadata": { "labels": { "tier": "front", "app": "web" } },
        }))
        .unwrap();
        assert_eq!(a, revision(&reordered));
    }
}
