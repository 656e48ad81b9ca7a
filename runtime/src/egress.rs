//! Where the host connects for an operator (its module URLs, its Prometheus): public addresses
//! only, unless the admin's `--allow-fetch-from` names more; redirects stay on the same host.
//!
//! A definition is hostile input: a URL naming loopback, a link-local address (the cloud
//! metadata service at 169.254.169.254) or a cluster-internal one would make the host fetch
//! what the operator could not reach itself. Every address a name resolves to is checked (so a
//! name resolving to a forbidden address is refused too), IP literals before connecting, and
//! every redirect's target; the system's proxy settings are not used for these requests.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// A fetch the policy does not allow.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum EgressRefused {
    #[error("{}{class} address {ip}, which the host does not fetch from for an operator (an admin allows it with `wasmpilot run --allow-fetch-from {ip}`)", if *host == ip.to_string() { String::new() } else { format!("{host} is ") })]
    Address {
        host: String,
        ip: IpAddr,
        class: &'static str,
    },
    #[error("a redirect from {from} to another host ({to}) is not followed")]
    OtherHost { from: String, to: String },
}

/// A host could not be checked against the policy, or was refused.
#[derive(Debug, thiserror::Error)]
pub enum EgressCheckError {
    #[error("{0}")]
    Refused(#[from] EgressRefused),
    #[error("looking up {host}: {source}")]
    Lookup {
        host: String,
        #[source]
        source: std::io::Error,
    },
}

/// An `--allow-fetch-from` value that is not an address or a CIDR block.
#[derive(Debug, thiserror::Error)]
#[error(
    "--allow-fetch-from {value:?}: not an IP address or CIDR block (e.g. 10.0.0.0/8, 127.0.0.1)"
)]
pub struct AllowParseError {
    value: String,
}

/// Which addresses the host may connect to for an operator.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    /// Blocks allowed beyond public addresses: (network, prefix length).
    allowed: Vec<(IpAddr, u8)>,
    /// Every address (the CLI tools, on the user's own machine with the user's reach).
    any: bool,
}

impl EgressPolicy {
    /// Public addresses, and the blocks `allow` names (`10.0.0.0/8`, `127.0.0.1`, `::1`).
    pub fn allowing(allow: &[String]) -> Result<EgressPolicy, AllowParseError> {
        let allowed = allow
            .iter()
            .filter(|v| !v.trim().is_empty())
            .map(|v| parse_block(v.trim()).ok_or_else(|| AllowParseError { value: v.clone() }))
            .collect::<Result<_, _>>()?;
        Ok(EgressPolicy {
            allowed,
            any: false,
        })
    }

    /// This policy and the blocks `more` names besides (an operator's grant's `allowFetchFrom`).
    pub fn widened(&self, more: &[String]) -> Result<EgressPolicy, AllowParseError> {
        let mut widened = self.clone();
        widened
            .allowed
            .extend(EgressPolicy::allowing(more)?.allowed);
        Ok(widened)
    }

    /// Every address allowed: for the CLI tools (`simulate`, `plan`, …), which fetch with the
    /// user's own reach. The host (`wasmpilot run`) never uses it.
    pub fn unrestricted() -> EgressPolicy {
        EgressPolicy {
            allowed: Vec::new(),
            any: true,
        }
    }

    /// Whether `ip` may be connected to; `Err` names its class.
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), EgressRefused> {
        let ip = canonical(ip);
        if self.any {
            return Ok(());
        }
        match special_class(ip) {
            None => Ok(()),
            Some(_)
                if self
                    .allowed
                    .iter()
                    .any(|(net, len)| in_block(ip, *net, *len)) =>
            {
                Ok(())
            }
            Some(class) => Err(EgressRefused::Address {
                host: host.to_string(),
                ip,
                class,
            }),
        }
    }

    /// Checks a URL whose host is an IP literal (a name is checked when it is resolved).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), EgressRefused> {
        let host = url.host_str().unwrap_or_default();
        let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        else {
            return Ok(());
        };
        self.check_ip(&ip.to_string(), ip)
    }

    /// Checks every address `host` (a name or an IP literal, `[::1]` too) resolves to now:
    /// for clients this policy cannot resolve for (the OCI client), checked just before use.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<(), EgressCheckError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(self.check_ip(host, ip)?);
        }
        let found = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|source| EgressCheckError::Lookup {
                host: host.to_string(),
                source,
            })?;
        for addr in found {
            self.check_ip(host, addr.ip())?;
        }
        Ok(())
    }

    /// A reqwest client builder that resolves names through this policy, follows redirects
    /// only to the same host (at most `max_redirects`, each checked as `also` says) and uses no
    /// proxy.
    pub fn client_builder(
        &self,
        max_redirects: usize,
        also: impl Fn(&reqwest::Url) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
            + Send
            + Sync
            + 'static,
    ) -> reqwest::ClientBuilder {
        self.client_builder_redirecting(Redirects::SameHost, max_redirects, also)
    }

    /// [`EgressPolicy::client_builder`], following redirects as `redirects` says: to another
    /// host too for a registry's blobs (their CDN), whose addresses this policy checks as it
    /// resolves them, and which reqwest sends no credentials to.
    pub fn client_builder_redirecting(
        &self,
        redirects: Redirects,
        max_redirects: usize,
        also: impl Fn(&reqwest::Url) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
            + Send
            + Sync
            + 'static,
    ) -> reqwest::ClientBuilder {
        let policy = self.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let from = attempt.previous().first().cloned();
            let to = attempt.url().clone();
            if attempt.previous().len() > max_redirects {
                return attempt.error(TooManyRedirects(max_redirects));
            }
            if let (Some(from), Redirects::SameHost) = (from, redirects) {
                if from.host_str() != to.host_str() {
                    return attempt.error(EgressRefused::OtherHost {
                        from: from.host_str().unwrap_or_default().to_string(),
                        to: to.host_str().unwrap_or_default().to_string(),
                    });
                }
            }
            if let Err(e) = policy.check_url(&to) {
                return attempt.error(e);
            }
            match also(&to) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        reqwest::Client::builder()
            .redirect(redirects)
            .no_proxy()
            .dns_resolver(Arc::new(PolicyResolver {
                policy: self.clone(),
            }))
    }
}

/// Where a client follows redirects to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redirects {
    /// Only to the host first asked (module URLs, Prometheus).
    SameHost,
    /// To any host whose addresses the policy allows (a registry's blob storage).
    AnyAllowedHost,
}

/// More redirects than allowed.
#[derive(Debug, thiserror::Error)]
#[error("more than {0} redirects")]
pub struct TooManyRedirects(pub usize);

/// Resolves with the system's resolver, then keeps only the addresses the policy allows.
struct PolicyResolver {
    policy: EgressPolicy,
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check_ip(&host, a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused.get_or_insert(e);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(e)) => Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// What makes an address not public, if anything.
fn special_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("a loopback")
    } else if ip.is_link_local() {
        Some("a link-local")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("a private (cluster-internal)")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 {
        Some("an unroutable")
    } else if a >= 240
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || (a == 198 && (b & 0xfe) == 18)
    {
        Some("a reserved")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip.is_loopback() {
        Some("a loopback")
    } else if (s[0] & 0xffc0) == 0xfe80 {
        Some("a link-local")
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        // Unique local addresses, and the deprecated site-local block.
        Some("a private (cluster-internal)")
    } else if ip.is_unspecified() || ip.is_multicast() {
        Some("an unroutable")
    } else if s[..6] == [0; 6] || (s[..4] == [0x100, 0, 0, 0]) {
        // IPv4-compatible (::/96, deprecated) and the discard block (100::/64).
        Some("an unroutable")
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        // NAT64 for local use (64:ff9b:1::/48): a translator inside the network.
        Some("a private (cluster-internal)")
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        // Well-known NAT64 (64:ff9b::/96): the IPv4 address it reaches decides.
        special_v4(v4(s[6], s[7]))
    } else if s[0] == 0x2002 {
        // 6to4 (2002::/16): the IPv4 address of the relay's other end decides.
        special_v4(v4(s[1], s[2]))
    } else if s[0] == 0x2001 && s[1] == 0 {
        // Teredo (2001::/32): a tunnel whose IPv4 end is hidden.
        Some("a tunnelled (Teredo)")
    } else if s[0] == 0x2001 && s[1] == 0xdb8 {
        Some("a reserved")
    } else {
        None
    }
}

fn parse_block(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a.parse::<IpAddr>().ok()?, Some(l.parse::<u8>().ok()?)),
        None => (text.parse::<IpAddr>().ok()?, None),
    };
    let addr = canonical(addr);
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some((addr, len))
}

fn in_block(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// Makes ring the process-wide rustls provider (kube uses ring too); the HTTP clients for OCI
/// registries, URLs and Prometheus are built without a provider of their own. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &EgressPolicy, ip: &str) -> Option<&'static str> {
        let ip: IpAddr = ip.parse().expect("ip");
        match policy.check_ip("h", ip) {
            Ok(()) => None,
            Err(EgressRefused::Address { class, .. }) => Some(class),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn only_public_addresses_by_default() {
        let p = EgressPolicy::default();
        assert_eq!(refused(&p, "169.254.169.254"), Some("a link-local"));
        assert_eq!(refused(&p, "127.0.0.1"), Some("a loopback"));
        assert_eq!(refused(&p, "::1"), Some("a loopback"));
        assert_eq!(refused(&p, "::ffff:127.0.0.1"), Some("a loopback"));
        assert_eq!(
            refused(&p, "10.96.0.1"),
            Some("a private (cluster-internal)")
        );
        assert_eq!(
            refused(&p, "172.20.0.1"),
            Some("a private (cluster-internal)")
        );
        assert_eq!(
            refused(&p, "100.64.0.1"),
            Some("a private (cluster-internal)")
        );
        assert_eq!(refused(&p, "fd00::1"), Some("a private (cluster-internal)"));
        assert_eq!(refused(&p, "fe80::1"), Some("a link-local"));
        assert_eq!(refused(&p, "0.0.0.0"), Some("an unroutable"));
        // Addresses that carry or reach an IPv4 one: NAT64, 6to4, IPv4-compatible; and the
        // deprecated site-local block.
        assert_eq!(refused(&p, "64:ff9b::a9fe:a9fe"), Some("a link-local"));
        assert_eq!(refused(&p, "64:ff9b::7f00:1"), Some("a loopback"));
        assert_eq!(refused(&p, "64:ff9b::5db8:d822"), None);
        assert_eq!(
            refused(&p, "64:ff9b:1::a00:1"),
            Some("a private (cluster-internal)")
        );
        assert_eq!(refused(&p, "2002:a9fe:a9fe::1"), Some("a link-local"));
        assert_eq!(
            refused(&p, "2002:0a00:0001::1"),
            Some("a private (cluster-internal)")
        );
        assert_eq!(refused(&p, "2002:5db8:d822::1"), None);
        assert_eq!(refused(&p, "::a9fe:a9fe"), Some("an unroutable"));
        assert_eq!(refused(&p, "::5db8:d822"), Some("an unroutable"));
        assert_eq!(refused(&p, "fec0::1"), Some("a private (cluster-internal)"));
        assert_eq!(
            refused(&p, "2001:0:4136:e378::1"),
            Some("a tunnelled (Teredo)")
        );
        assert_eq!(refused(&p, "2001:db8::1"), Some("a reserved"));
        assert_eq!(refused(&p, "100::1"), Some("an unroutable"));
        assert_eq!(refused(&p, "93.184.216.34"), None);
        assert_eq!(refused(&p, "2606:2800:220:1::1"), None);
    }

    #[test]
    fn the_admin_allows_blocks() {
        let p = EgressPolicy::allowing(&["127.0.0.1".into(), "10.0.0.0/8".into()]).expect("valid");
        assert_eq!(refused(&p, "127.0.0.1"), None);
        assert_eq!(refused(&p, "127.0.0.2"), Some("a loopback"));
        assert_eq!(refused(&p, "10.200.3.4"), None);
        assert_eq!(refused(&p, "169.254.169.254"), Some("a link-local"));
        assert!(EgressPolicy::allowing(&["10.0.0.0/33".into()]).is_err());
        assert!(EgressPolicy::allowing(&["metadata".into()]).is_err());
    }

    #[test]
    fn ip_literal_urls_are_checked_before_connecting() {
        let p = EgressPolicy::default();
        let url = reqwest::Url::parse("http://169.254.169.254/latest/meta-data").expect("url");
        let e = p.check_url(&url).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "a link-local address 169.254.169.254, which the host does not fetch from for an operator (an admin allows it with `wasmpilot run --allow-fetch-from 169.254.169.254`)"
        );
        let named = reqwest::Url::parse("https://prometheus.example/").expect("url");
        assert!(p.check_url(&named).is_ok(), "names are checked as resolved");
    }
}
