//! The resolver of the `http` capability client: the call-time half of the address rule (see
//! [`flexrun_core::capability::endpoint`]), so the address checked is the address connected to.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::AddressGuard;

/// The `http` capability client's resolver: resolves with `lookup`, then refuses the whole name
/// if any address it resolved to is refused by `guard` — not only that address, so a name that
/// mixes a public address with the metadata service is a configuration to fix, not a coin toss.
/// The client connects only to addresses this returns, so nothing can change between the check
/// and the connect.
pub struct GuardedResolver {
    lookup: Arc<dyn Resolve>,
    guard: AddressGuard,
}

impl GuardedResolver {
    /// Checks what the system resolver (`getaddrinfo`) answers.
    pub fn system(guard: AddressGuard) -> Self {
        Self::new(Arc::new(SystemLookup), guard)
    }

    /// Checks what `lookup` answers (tests resolve names to chosen addresses with it).
    pub fn new(lookup: Arc<dyn Resolve>, guard: AddressGuard) -> Self {
        Self { lookup, guard }
    }

    /// The addresses this resolver lets through.
    pub fn guard(&self) -> AddressGuard {
        self.guard
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let guard = self.guard;
        let lookup = self.lookup.resolve(name);
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = lookup.await?.collect();
            for address in &addresses {
                guard.check(Some(&host), address.ip())?;
            }
            let addresses: Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

/// The system resolver, as reqwest's default uses it (`getaddrinfo` on the blocking pool).
/// Port 0 lets the client put in the URL's port.
struct SystemLookup;

impl Resolve for SystemLookup {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addresses: Addrs = Box::new(addresses.into_iter());
            Ok(addresses)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::{IpAddr, Ipv4Addr};

    use crate::capability::RefusedAddress;

    #[test]
    fn resolved_addresses_are_checked() {
        let refuse = AddressGuard::default();
        let metadata = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
        let refused = refuse.check(Some("metadata.test"), metadata).unwrap_err();
        assert_eq!(refused, RefusedAddress::Resolved { host: "metadata.test".into(), address: metadata });
        assert!(
            refused.to_string().starts_with("`metadata.test` resolves to 169.254.169.254, a link-local"),
            "{refused}"
        );
        assert!(refuse.check(Some("link.test"), "fe80::1".parse().unwrap()).is_err());
        assert!(refuse.check(Some("mapped.test"), "::ffff:169.254.169.254".parse().unwrap()).is_err());
        assert!(refuse.check(Some("localhost"), IpAddr::V4(Ipv4Addr::LOCALHOST)).is_ok());
        assert!(refuse.check(Some("localhost"), "::1".parse().unwrap()).is_ok());
        assert!(AddressGuard { allow_link_local: true }.check(Some("metadata.test"), metadata).is_ok());
    }

    /// Names resolved from a table, never from DNS.
    struct Table(HashMap<&'static str, Vec<IpAddr>>);

    impl Resolve for Table {
        fn resolve(&self, name: Name) -> Resolving {
            let found: Vec<SocketAddr> =
                self.0.get(name.as_str()).into_iter().flatten().map(|ip| SocketAddr::new(*ip, 0)).collect();
            Box::pin(async move {
                let addresses: Addrs = Box::new(found.into_iter());
                Ok(addresses)
            })
        }
    }

    async fn resolve(resolver: &GuardedResolver, name: &str) -> Result<Vec<SocketAddr>, String> {
        match resolver.resolve(name.parse().unwrap()).await {
            Ok(addresses) => Ok(addresses.collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_with_any_refused_address() {
        let table = Table(HashMap::from([
            ("metadata.test", vec!["169.254.169.254".parse().unwrap()]),
            ("mixed.test", vec!["127.0.0.1".parse().unwrap(), "fe80::1".parse().unwrap()]),
            ("local.test", vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]),
        ]));
        let resolver = GuardedResolver::new(Arc::new(table), AddressGuard::default());
        let refused = resolve(&resolver, "metadata.test").await.unwrap_err();
        assert!(refused.contains("`metadata.test` resolves to 169.254.169.254"), "{refused}");
        let refused = resolve(&resolver, "mixed.test").await.unwrap_err();
        assert!(refused.contains("fe80::1"), "{refused}");
        assert_eq!(resolve(&resolver, "local.test").await.unwrap().len(), 2);
    }
}
