//! Kubernetes' rules for names (RFC 1123 labels and subdomains), checked on what a definition or
//! a worker names before anything is sent, so a bad name is refused with the field it came from.

/// An RFC 1123 label of at most 63 bytes: the rule for namespaces and API versions.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_label_part(name)
}

/// An RFC 1123 subdomain of at most 253 bytes: the rule for most object names and API groups.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_label_part)
}

fn is_label_part(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !part.starts_with('-')
        && !part.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(is_dns_label("team-a") && is_dns_label("v1alpha1"));
        assert!(!is_dns_label("a.b") && !is_dns_label("-a") && !is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("networking.istio.io") && is_dns_subdomain("m.v1"));
        assert!(!is_dns_subdomain("a..b") && !is_dns_subdomain("Modules"));
        assert!(!is_dns_subdomain(&"a".repeat(254)) && !is_dns_subdomain(""));
    }
}
