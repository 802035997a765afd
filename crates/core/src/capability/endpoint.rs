//! Where `http` capabilities may point, and which addresses their calls may reach.
//!
//! Two rules, checked at two moments:
//!
//! - **At registration**, an endpoint must fall under an allowed URL prefix
//!   (`http_capabilities.allowed_url_prefixes`), compared as parsed URLs — scheme, host and port
//!   equal, path below the prefix's path at a segment boundary — because a string prefix lets
//!   `http://localhost` admit `http://localhost.evil.example`. An endpoint whose host is a literal
//!   link-local or cloud-metadata address is refused.
//! - **At call time**, the addresses a host name resolves to are checked by the HTTP client's
//!   resolver (the server's `GuardedResolver`), so the address checked is the address connected to: a name
//!   that was harmless at registration cannot later lead to the metadata service.
//!
//! Link-local and metadata addresses are refused because they are where cloud instances keep
//! their credentials (169.254.169.254 and friends); an operator who really means to call one sets
//! `http_capabilities.allow_link_local = true`.
//!
//! This module imports nothing else of flexrun: the settings parse their prefixes with it.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use serde::Deserialize;
use url::{Host, Url};

/// AWS's instance metadata service on IPv6 (Nitro instances). It is not link-local, so it is
/// named here; its IPv4 twin, 169.254.169.254, is covered by the link-local range.
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// One entry of `http_capabilities.allowed_url_prefixes`, parsed once when the settings load.
///
/// An endpoint falls under it when scheme, host and port are equal (a missing port is the
/// scheme's default: 80 for http, 443 for https) and the endpoint's path is the entry's path or
/// continues it with `/` (`/tools` and `/tools/` both allow `/tools` and `/tools/x`, not
/// `/toolsx`). Hosts are compared as the URL parser normalises them (lowercase names, IDNA,
/// canonical IP addresses): a name never matches an address, nor a subdomain its parent. The
/// endpoint's query string and fragment are not compared.
///
/// Below a prefix's path, an encoded `/` or `\` (`%2F`, `%5C`) is refused: the parser leaves
/// `/tools/..%2Fadmin` one segment under `/tools`, but a server or proxy that decodes it before
/// resolving dot segments serves `/admin`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct UrlPrefix {
    /// The entry as parsed (normalised), for messages.
    url: Url,
    /// The entry's path without its trailing `/`; empty for the root.
    path: String,
}

/// Why an entry of `http_capabilities.allowed_url_prefixes` is refused. The messages leave room
/// for the settings loader to append which entry of which key it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlPrefixError {
    #[error("allowed URL prefix `{entry}` is not a URL ({reason}; write e.g. \"https://tools.internal/\")")]
    NotAUrl { entry: String, reason: url::ParseError },
    #[error("allowed URL prefix `{entry}` is not an http(s) URL (scheme `{scheme}`)")]
    Scheme { entry: String, scheme: String },
    #[error("allowed URL prefix `{entry}` has credentials (no endpoint may have them)")]
    Credentials { entry: String },
    #[error("allowed URL prefix `{entry}` has a query string or fragment (a prefix is scheme, host, port and path)")]
    QueryOrFragment { entry: String },
}

impl UrlPrefix {
    pub fn parse(entry: &str) -> Result<Self, UrlPrefixError> {
        let url = Url::parse(entry).map_err(|reason| UrlPrefixError::NotAUrl { entry: entry.into(), reason })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UrlPrefixError::Scheme { entry: entry.into(), scheme: url.scheme().into() });
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlPrefixError::Credentials { entry: entry.into() });
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(UrlPrefixError::QueryOrFragment { entry: entry.into() });
        }
        let path = url.path().trim_end_matches('/').to_string();
        Ok(Self { url, path })
    }

    /// Whether `endpoint` falls under this prefix (see the type's documentation).
    pub fn allows(&self, endpoint: &Url) -> bool {
        endpoint.scheme() == self.url.scheme()
            && endpoint.host() == self.url.host()
            && endpoint.port_or_known_default() == self.url.port_or_known_default()
            && endpoint.path().strip_prefix(self.path.as_str()).is_some_and(|rest| {
                (rest.is_empty() || rest.starts_with('/')) && (self.path.is_empty() || !has_encoded_separator(rest))
            })
    }

    /// The address the entry names, when its host is one.
    pub fn address(&self) -> Option<IpAddr> {
        host_address(&self.url)
    }
}

impl TryFrom<String> for UrlPrefix {
    type Error = UrlPrefixError;

    fn try_from(entry: String) -> Result<Self, Self::Error> {
        Self::parse(&entry)
    }
}

impl fmt::Display for UrlPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.url.fmt(f)
    }
}

/// Whether `path` holds a percent-encoded `/` or `\`, which some servers decode into a separator.
fn has_encoded_separator(path: &str) -> bool {
    path.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && (w[1..].eq_ignore_ascii_case(b"2f") || w[1..].eq_ignore_ascii_case(b"5c")))
}

/// The address a URL's host is, when it is a literal address rather than a name.
fn host_address(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
        Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
        Host::Domain(_) => None,
    }
}

/// Whether `address` is link-local (169.254.0.0/16, fe80::/10, or an IPv4-mapped IPv6 form of
/// the former) or a cloud metadata address outside those ranges (AWS's fd00:ec2::254).
pub fn is_link_local_or_metadata(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_link_local(),
            None => v6.is_unicast_link_local() || v6 == AWS_METADATA_V6,
        },
    }
}

/// A call refused because of the address it would connect to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefusedAddress {
    /// The URL names the address itself.
    #[error(
        "{address} is a link-local or cloud-metadata address; flexrun does not call those unless \
         `http_capabilities.allow_link_local = true`"
    )]
    Literal { address: IpAddr },
    /// The URL's host name resolved to the address.
    #[error(
        "`{host}` resolves to {address}, a link-local or cloud-metadata address; flexrun does not \
         call those unless `http_capabilities.allow_link_local = true`"
    )]
    Resolved { host: String, address: IpAddr },
}

/// Which addresses `http` capability calls may reach (`http_capabilities.allow_link_local`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressGuard {
    pub allow_link_local: bool,
}

impl AddressGuard {
    /// Refuses `address` (which `host` resolved to, if it was a name) unless it may be called.
    pub fn check(self, host: Option<&str>, address: IpAddr) -> Result<(), RefusedAddress> {
        if self.allow_link_local || !is_link_local_or_metadata(address) {
            return Ok(());
        }
        Err(match host {
            Some(host) => RefusedAddress::Resolved { host: host.to_string(), address },
            None => RefusedAddress::Literal { address },
        })
    }

    /// Refuses a URL whose host is a literal refused address. Names are checked when they are
    /// resolved, by the server's `GuardedResolver`: the HTTP client resolves only names, never addresses.
    pub fn check_url(self, url: &Url) -> Result<(), RefusedAddress> {
        host_address(url).map_or(Ok(()), |address| self.check(None, address))
    }
}

/// Which endpoints an `http` capability may be registered with (`http_capabilities` in the
/// configuration).
#[derive(Debug, Clone, Default)]
pub struct EndpointAllowlist {
    /// An endpoint must fall under one of these; empty allows any http(s) URL.
    pub allowed_url_prefixes: Vec<UrlPrefix>,
    /// Literal link-local and metadata addresses are refused unless allowed here.
    pub addresses: AddressGuard,
}

impl EndpointAllowlist {
    /// Whether `endpoint` falls under an allowed prefix (any, when none is configured).
    pub fn allows(&self, endpoint: &Url) -> bool {
        self.allowed_url_prefixes.is_empty() || self.allowed_url_prefixes.iter().any(|prefix| prefix.allows(endpoint))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allows(prefix: &str, endpoint: &str) -> bool {
        UrlPrefix::parse(prefix).unwrap().allows(&Url::parse(endpoint).unwrap())
    }

    #[test]
    fn a_prefix_is_a_host_not_the_start_of_one() {
        assert!(allows("http://localhost", "http://localhost/score"));
        assert!(!allows("http://localhost", "http://localhost.evil.example/score"));
        assert!(!allows("http://localhost", "http://localhost.evil.example"));
        assert!(!allows("https://tools.internal/", "https://evil.tools.internal/"));
        assert!(!allows("https://tools.internal/", "https://tools.internal.evil.example/"));
        // Names compare case-insensitively, as the URL parser lowercases them.
        assert!(allows("https://Tools.Internal/", "https://tools.internal/x"));
        // A name never matches an address, even the one it resolves to.
        assert!(!allows("http://localhost/", "http://127.0.0.1/"));
    }

    #[test]
    fn ports_must_be_equal_with_defaults_made_explicit() {
        assert!(!allows("http://localhost", "http://localhost:8080/score"));
        assert!(!allows("http://localhost:8080", "http://localhost:8081/"));
        assert!(allows("http://localhost:8080/", "http://localhost:8080/score"));
        assert!(allows("http://tools", "http://tools:80/x"));
        assert!(allows("http://tools:80/", "http://tools/x"));
        assert!(allows("https://tools", "https://tools:443/x"));
        assert!(allows("https://tools:443", "https://tools/x"));
        assert!(!allows("https://tools", "https://tools:80/x"));
    }

    #[test]
    fn schemes_must_be_equal() {
        assert!(!allows("https://tools/", "http://tools/x"));
        assert!(!allows("http://tools/", "https://tools/x"));
        assert!(!allows("http://tools:443/", "https://tools/x"), "same port, other scheme");
    }

    #[test]
    fn paths_match_at_segment_boundaries() {
        for prefix in ["http://tools/api", "http://tools/api/"] {
            assert!(allows(prefix, "http://tools/api"), "{prefix}");
            assert!(allows(prefix, "http://tools/api/"), "{prefix}");
            assert!(allows(prefix, "http://tools/api/score/v2"), "{prefix}");
            assert!(!allows(prefix, "http://tools/apix"), "{prefix}");
            assert!(!allows(prefix, "http://tools/ap"), "{prefix}");
            assert!(!allows(prefix, "http://tools/"), "{prefix}");
            // Dot segments are resolved before matching.
            assert!(!allows(prefix, "http://tools/api/../admin"), "{prefix}");
            assert!(!allows(prefix, "http://tools/api/%2e%2e/admin"), "{prefix}");
            // An encoded separator, which a server may decode before resolving dot segments.
            for encoded in ["..%2fadmin", "..%2Fadmin", "..%5cadmin", "x/..%5C..%5Cadmin", "%2F"] {
                assert!(!allows(prefix, &format!("http://tools/api/{encoded}")), "{prefix} {encoded}");
            }
            assert!(allows(prefix, "http://tools/api/a%20b%2"), "{prefix}: other escapes are left alone");
        }
        // Under the root, nothing is above: any path is allowed.
        assert!(allows("http://tools/", "http://tools/..%2fadmin"));
        assert!(allows("http://tools", "http://tools/anything"));
        assert!(allows("http://tools/", "http://tools"));
        assert!(!allows("http://tools/Api", "http://tools/api"), "paths are case-sensitive");
    }

    #[test]
    fn endpoint_queries_and_fragments_are_not_compared() {
        assert!(allows("http://tools/api", "http://tools/api?x=1"));
        assert!(allows("http://tools/api", "http://tools/api/score?x=/../admin#frag"));
        assert!(!allows("http://tools/api", "http://tools/apix?/api"));
    }

    #[test]
    fn ipv6_and_ipv4_literals_match_exactly() {
        assert!(allows("http://[::1]:8080/", "http://[::1]:8080/x"));
        assert!(allows("http://[::1]:8080/", "http://[0:0:0:0:0:0:0:1]:8080/x"), "one address, two spellings");
        assert!(!allows("http://[::1]:8080/", "http://[::1]:8081/x"));
        assert!(!allows("http://[::1]/", "http://127.0.0.1/x"));
        assert!(allows("http://127.0.0.1:9000/", "http://127.0.0.1:9000/x"));
        assert!(!allows("http://127.0.0.1/", "http://127.0.0.10/x"));
        assert!(!allows("http://127.0.0.1/", "http://127.0.0.1.evil.example/x"));
        // An IPv4-mapped IPv6 address is another host than the IPv4 address.
        assert!(!allows("http://127.0.0.1/", "http://[::ffff:127.0.0.1]/x"));
        assert!(allows("http://[::ffff:127.0.0.1]/", "http://[::ffff:7f00:1]/x"));
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        assert!(matches!(UrlPrefix::parse("localhost"), Err(UrlPrefixError::NotAUrl { .. })));
        assert!(matches!(UrlPrefix::parse("tools.internal/api"), Err(UrlPrefixError::NotAUrl { .. })));
        assert!(matches!(UrlPrefix::parse("http://"), Err(UrlPrefixError::NotAUrl { .. })));
        assert!(matches!(UrlPrefix::parse("ftp://tools/"), Err(UrlPrefixError::Scheme { .. })));
        assert!(matches!(UrlPrefix::parse("localhost:8080"), Err(UrlPrefixError::Scheme { .. })));
        assert!(matches!(UrlPrefix::parse("http://u:p@tools/"), Err(UrlPrefixError::Credentials { .. })));
        assert!(matches!(UrlPrefix::parse("http://tools/?a=1"), Err(UrlPrefixError::QueryOrFragment { .. })));
        assert!(matches!(UrlPrefix::parse("http://tools/#x"), Err(UrlPrefixError::QueryOrFragment { .. })));
        let message = UrlPrefix::parse("ftp://tools/").unwrap_err().to_string();
        assert!(message.contains("ftp://tools/") && message.contains("not an http(s) URL"), "{message}");
    }

    #[test]
    fn link_local_and_metadata_addresses_are_recognised() {
        for refused in [
            "169.254.169.254",
            "169.254.0.1",
            "169.254.255.255",
            "fe80::1",
            "febf:ffff::1",
            "::ffff:169.254.169.254",
            "fd00:ec2::254",
        ] {
            assert!(is_link_local_or_metadata(refused.parse().unwrap()), "{refused}");
        }
        for allowed in
            ["127.0.0.1", "10.0.0.1", "169.253.255.255", "169.255.0.1", "::1", "fec0::1", "::ffff:127.0.0.1", "fd00::1"]
        {
            assert!(!is_link_local_or_metadata(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn the_guard_refuses_literal_link_local_hosts_unless_allowed() {
        let refuse = AddressGuard::default();
        let allow = AddressGuard { allow_link_local: true };
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[fd00:ec2::254]/",
        ] {
            let url = Url::parse(url).unwrap();
            let refused = refuse.check_url(&url).unwrap_err();
            assert!(refused.to_string().contains("allow_link_local"), "{refused}");
            assert!(allow.check_url(&url).is_ok(), "{url}");
        }
        for url in ["http://127.0.0.1:8080/", "http://[::1]/", "http://metadata.google.internal/"] {
            assert!(refuse.check_url(&Url::parse(url).unwrap()).is_ok(), "{url}: names are checked when resolved");
        }
    }
}
