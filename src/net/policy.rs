//! The URL policy: pure and synchronous (std, `url` and `ipnet` only).
//!
//! [`UrlPolicy::target`] parses a URL with WHATWG rules (legacy IPv4 forms, unicode
//! dots, IDNA UTS-46, percent-encoded hosts) and checks what can be checked without DNS;
//! [`UrlPolicy::decide`] then checks every resolved address. The result is a
//! [`Verdict`] (allowed with its target and addresses, or blocked with a [`Block`]);
//! its [`AuditView`] holds the origin and the checked addresses only: never userinfo,
//! path, query or fragment.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::Serialize;

/// Why a URL or an address is refused. Every variant has a stable snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Block {
    /// Not a URL at all.
    InvalidUrl,
    /// Not http or https.
    UnsupportedScheme,
    /// A URL without a host (`http:/path`, `https://:443`).
    MissingHost,
    /// A host that is neither an IP address nor a valid DNS name.
    InvalidHost,
    /// A port out of range.
    InvalidPort,
    /// A cloud metadata endpoint (address or name).
    Metadata,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 224/4, ff00::/8.
    Multicast,
    /// 0.0.0.0/8, ::.
    Unspecified,
    /// 255.255.255.255.
    Broadcast,
    /// Reserved and other non-globally-routable special-purpose ranges.
    Reserved,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32: reserved for examples,
    /// never a real server.
    Documentation,
    /// 198.18/15, 2001:2::/48: reserved for benchmark labs.
    Benchmarking,
    /// 10/8, 172.16/12, 192.168/16, fc00::/7 (a trusted network may allow them).
    Private,
    /// 127/8, ::1 (a trusted network may allow them).
    Loopback,
    /// 100.64/10 (a trusted network may allow it).
    Cgnat,
    /// `localhost` and `*.localhost` (a trusted network covering the answers may allow it).
    LocalhostName,
    /// The resolver failed.
    DnsError,
    /// The resolver answered nothing.
    DnsEmpty,
    /// The resolver's answer was not usable.
    DnsMalformed,
}

impl Block {
    /// The snake_case reason of the audit view.
    pub fn as_str(self) -> &'static str {
        match self {
            Block::InvalidUrl => "invalid_url",
            Block::UnsupportedScheme => "unsupported_scheme",
            Block::MissingHost => "missing_host",
            Block::InvalidHost => "invalid_host",
            Block::InvalidPort => "invalid_port",
            Block::Metadata => "metadata",
            Block::LinkLocal => "link_local",
            Block::Multicast => "multicast",
            Block::Unspecified => "unspecified",
            Block::Broadcast => "broadcast",
            Block::Reserved => "reserved",
            Block::Documentation => "documentation",
            Block::Benchmarking => "benchmarking",
            Block::Private => "private",
            Block::Loopback => "loopback",
            Block::Cgnat => "cgnat",
            Block::LocalhostName => "localhost",
            Block::DnsError => "dns_error",
            Block::DnsEmpty => "dns_empty",
            Block::DnsMalformed => "dns_malformed",
        }
    }

    /// Whether a host-injected trusted network may allow it.
    pub fn trustable(self) -> bool {
        matches!(
            self,
            Block::Private | Block::Loopback | Block::Cgnat | Block::LocalhostName
        )
    }
}

/// The host of a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name (ASCII, lowercase, IDNA-mapped, no trailing dot).
    Name(String),
    /// A literal address.
    Ip(IpAddr),
}

/// Where a request would go: scheme, host, port. Nothing else of the URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// Name or literal address.
    pub host: Host,
    /// Port (explicit or the scheme's default).
    pub port: u16,
    explicit_port: bool,
}

impl Target {
    /// The host as written in a URL (`[::1]` for IPv6).
    pub fn hostname(&self) -> String {
        match &self.host {
            Host::Name(n) => n.clone(),
            Host::Ip(IpAddr::V4(a)) => a.to_string(),
            Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
        }
    }

    /// The host for TLS SNI and certificate checks (no brackets).
    pub fn server_name(&self) -> String {
        match &self.host {
            Host::Name(n) => n.clone(),
            Host::Ip(a) => a.to_string(),
        }
    }

    /// `scheme://host[:port]`, the port only when explicit in the URL.
    pub fn origin(&self) -> String {
        if self.explicit_port {
            format!("{}://{}:{}", self.scheme, self.hostname(), self.port)
        } else {
            format!("{}://{}", self.scheme, self.hostname())
        }
    }

    /// The value of the HTTP `Host` header.
    pub fn host_header(&self) -> String {
        if self.explicit_port {
            format!("{}:{}", self.hostname(), self.port)
        } else {
            self.hostname()
        }
    }

    /// Whether two targets are the same origin (scheme, host, port).
    pub fn same_origin(&self, other: &Target) -> bool {
        self.scheme == other.scheme && self.host == other.host && self.port == other.port
    }
}

/// What the policy decided about one request: allowed, with the target and the
/// addresses a connection may use, or blocked with its reason. Decisions are values,
/// never text: callers match on them; people read the [`AuditView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The request may proceed to one of these addresses.
    Allowed {
        /// Where it goes.
        target: Target,
        /// Every address DNS gave (each passed): a connection may use any of them.
        addresses: Vec<IpAddr>,
    },
    /// The request must not be sent.
    Blocked {
        /// The rule that refused it.
        block: Block,
        /// As much of the target as could be parsed.
        target: Option<Target>,
        /// The addresses that were checked, when DNS answered.
        resolved: Vec<IpAddr>,
    },
}

impl Verdict {
    fn blocked(block: Block, target: Option<&Target>, resolved: &[IpAddr]) -> Self {
        Verdict::Blocked {
            block,
            target: target.cloned(),
            resolved: resolved.to_vec(),
        }
    }

    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allowed { .. })
    }

    /// The reason, when blocked.
    pub fn block(&self) -> Option<Block> {
        match self {
            Verdict::Blocked { block, .. } => Some(*block),
            Verdict::Allowed { .. } => None,
        }
    }

    /// The safe audit view: origin and addresses, never more of the URL.
    pub fn audit(&self) -> AuditView {
        let (allowed, reason, target, addresses) = match self {
            Verdict::Allowed { target, addresses } => (true, "allowed", Some(target), addresses),
            Verdict::Blocked {
                block,
                target,
                resolved,
            } => (false, block.as_str(), target.as_ref(), resolved),
        };
        AuditView {
            allowed,
            reason,
            target: target.map(Target::origin).unwrap_or_default(),
            scheme: target.map(|t| t.scheme.to_string()).unwrap_or_default(),
            hostname: target.map(Target::hostname).unwrap_or_default(),
            port: target.map_or(0, |t| t.port),
            resolved_addresses: addresses.iter().map(IpAddr::to_string).collect(),
        }
    }
}

/// What the audit of one decision shows (`mcp.url_decision` events, `url-check`): the
/// origin and the addresses checked, never userinfo, path, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditView {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// `allowed` or a [`Block`] name.
    pub reason: &'static str,
    /// `scheme://host[:port]`, empty when the URL did not parse.
    pub target: String,
    /// `http`/`https`, empty when unknown.
    pub scheme: String,
    /// Host as in a URL, empty when unknown.
    pub hostname: String,
    /// Port, 0 when unknown.
    pub port: u16,
    /// Every address checked (all of them must pass).
    pub resolved_addresses: Vec<String>,
}

/// What DNS said about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The A/AAAA addresses.
    Addresses(Vec<IpAddr>),
    /// The resolver failed (NXDOMAIN, timeout, ...).
    Error,
    /// The resolver answered with something unusable.
    Malformed,
}

/// The host's URL policy. Manifests cannot change it; a host may add trusted networks
/// that allow private, loopback, CGNAT and `localhost` targets, never metadata,
/// link-local, multicast, unspecified or reserved ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UrlPolicy {
    trusted: Vec<IpNet>,
}

impl UrlPolicy {
    /// The default, fail-closed policy.
    pub fn new() -> Self {
        Self::default()
    }

    /// A policy trusting `networks` for private, loopback, CGNAT and localhost targets.
    pub fn with_trusted(networks: impl IntoIterator<Item = IpNet>) -> Self {
        UrlPolicy {
            trusted: networks.into_iter().map(|n| n.trunc()).collect(),
        }
    }

    /// Parses `url` and checks what needs no DNS: scheme, host syntax, port, metadata
    /// names, literal addresses.
    ///
    /// # Errors
    /// A blocked [`Verdict`] (with whatever of the target could be parsed).
    #[allow(clippy::result_large_err)] // a refusal carries its target; not a hot path
    pub fn target(&self, url: &str) -> Result<Target, Verdict> {
        let target = parse_target(url)?;
        if let Host::Name(name) = &target.host
            && is_metadata_name(name)
        {
            return Err(Verdict::blocked(Block::Metadata, Some(&target), &[]));
        }
        if let Host::Ip(ip) = target.host {
            let v = self.decide(&target, &Answer::Addresses(vec![ip]));
            if !v.is_allowed() {
                return Err(v);
            }
        }
        Ok(target)
    }

    /// Decides a target given what DNS answered (for a literal address, the address
    /// itself). Every answer must pass; the first failure decides the reason.
    pub fn decide(&self, target: &Target, answer: &Answer) -> Verdict {
        let addrs = match answer {
            Answer::Error => return Verdict::blocked(Block::DnsError, Some(target), &[]),
            Answer::Malformed => return Verdict::blocked(Block::DnsMalformed, Some(target), &[]),
            Answer::Addresses(a) if a.is_empty() => {
                return Verdict::blocked(Block::DnsEmpty, Some(target), &[]);
            }
            Answer::Addresses(a) => a,
        };
        if let Host::Name(name) = &target.host {
            if is_metadata_name(name) {
                return Verdict::blocked(Block::Metadata, Some(target), addrs);
            }
            // A localhost name is allowed only when every answer is in a trusted network.
            if is_localhost_name(name) && !addrs.iter().all(|a| self.is_trusted(*a)) {
                return Verdict::blocked(Block::LocalhostName, Some(target), addrs);
            }
        }
        for &addr in addrs {
            if let Some(block) = classify(addr)
                && !(block.trustable() && self.is_trusted(addr))
            {
                return Verdict::blocked(block, Some(target), addrs);
            }
        }
        Verdict::Allowed {
            target: target.clone(),
            addresses: addrs.to_vec(),
        }
    }

    fn is_trusted(&self, addr: IpAddr) -> bool {
        let addr = canonical(addr);
        self.trusted.iter().any(|n| n.contains(&addr))
    }
}

/// An IPv4-mapped IPv6 address is its IPv4 address.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

#[allow(clippy::result_large_err)]
fn parse_target(raw: &str) -> Result<Target, Verdict> {
    let url = url::Url::parse(raw.trim()).map_err(|e| {
        let block = match e {
            url::ParseError::InvalidPort => Block::InvalidPort,
            url::ParseError::EmptyHost => Block::MissingHost,
            url::ParseError::IdnaError
            | url::ParseError::InvalidIpv4Address
            | url::ParseError::InvalidIpv6Address
            | url::ParseError::InvalidDomainCharacter => Block::InvalidHost,
            _ => Block::InvalidUrl,
        };
        Verdict::blocked(block, None, &[])
    })?;
    let scheme = match url.scheme() {
        "http" => "http",
        "https" => "https",
        _ => return Err(Verdict::blocked(Block::UnsupportedScheme, None, &[])),
    };
    let port = url
        .port_or_known_default()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    let explicit_port = url.port().is_some();
    let host = match url.host() {
        None => return Err(Verdict::blocked(Block::MissingHost, None, &[])),
        Some(url::Host::Ipv4(a)) => Host::Ip(IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => Host::Ip(IpAddr::V6(a)),
        Some(url::Host::Domain(_)) if port == 0 => {
            return Err(Verdict::blocked(Block::InvalidPort, None, &[]));
        }
        Some(url::Host::Domain(d)) => {
            let name = d.strip_suffix('.').unwrap_or(d).to_ascii_lowercase();
            let target = Target {
                scheme,
                host: Host::Name(name.clone()),
                port,
                explicit_port,
            };
            if !is_dns_name(&name) {
                return Err(Verdict::blocked(Block::InvalidHost, Some(&target), &[]));
            }
            return Ok(target);
        }
    };
    if port == 0 {
        return Err(Verdict::blocked(Block::InvalidPort, None, &[]));
    }
    Ok(Target {
        scheme,
        host,
        port,
        explicit_port,
    })
}

/// LDH labels of 1 to 63 characters, at most 253 in all; `_` is tolerated inside a
/// label (seen in real service names), a label never starts or ends with `-`.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        // A name made only of digits and dots would be an IPv4 form the URL parser
        // already took; anything left that looks numeric is refused.
        && !name.split('.').next_back().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` (lowercase, no trailing dot) is a cloud metadata name.
pub fn is_metadata_name(name: &str) -> bool {
    matches!(
        name,
        "metadata.google.internal" | "metadata.goog" | "metadata"
    ) || name.ends_with(".metadata.google.internal")
        || name.ends_with(".metadata.goog")
}

/// Whether `name` (lowercase, no trailing dot) is a `localhost` name.
pub fn is_localhost_name(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost") || name == "localhost.localdomain"
}

const METADATA_V4: [Ipv4Addr; 6] = [
    Ipv4Addr::new(169, 254, 169, 254),
    // Azure's WireServer (instance configuration, and a route to the host's agent):
    // a public address, so no range below would block it.
    Ipv4Addr::new(168, 63, 129, 16),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(169, 254, 170, 23),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

const METADATA_V6: [Ipv6Addr; 3] = [
    // AWS IMDS and its DNS resolver.
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254),
    Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023),
    // GCP's metadata server on IPv6.
    Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254),
];

/// Why an address is not globally routable, or `None` when it is.
pub fn classify(addr: IpAddr) -> Option<Block> {
    match addr {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}

fn in4(a: Ipv4Addr, net: [u8; 4], prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(a) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(a: Ipv4Addr) -> Option<Block> {
    if METADATA_V4.contains(&a) {
        return Some(Block::Metadata);
    }
    let o = a.octets();
    let ranges: &[([u8; 4], u8, Block)] = &[
        ([0, 0, 0, 0], 8, Block::Unspecified),
        ([10, 0, 0, 0], 8, Block::Private),
        ([100, 64, 0, 0], 10, Block::Cgnat),
        ([127, 0, 0, 0], 8, Block::Loopback),
        ([169, 254, 0, 0], 16, Block::LinkLocal),
        ([172, 16, 0, 0], 12, Block::Private),
        ([192, 0, 2, 0], 24, Block::Documentation),
        ([192, 88, 99, 0], 24, Block::Reserved),
        ([192, 168, 0, 0], 16, Block::Private),
        ([198, 18, 0, 0], 15, Block::Benchmarking),
        ([198, 51, 100, 0], 24, Block::Documentation),
        ([203, 0, 113, 0], 24, Block::Documentation),
        ([224, 0, 0, 0], 4, Block::Multicast),
    ];
    if a == Ipv4Addr::BROADCAST {
        return Some(Block::Broadcast);
    }
    // IETF protocol assignments, except the two globally reachable anycast addresses.
    if in4(a, [192, 0, 0, 0], 24) && !matches!(o[3], 9 | 10) {
        return Some(Block::Reserved);
    }
    if in4(a, [240, 0, 0, 0], 4) {
        return Some(Block::Reserved);
    }
    ranges
        .iter()
        .find(|(net, p, _)| in4(a, *net, *p))
        .map(|(_, _, b)| *b)
}

fn in6(a: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(a) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

fn classify_v6(a: Ipv6Addr) -> Option<Block> {
    if METADATA_V6.contains(&a) {
        return Some(Block::Metadata);
    }
    if a.is_unspecified() {
        return Some(Block::Unspecified);
    }
    if a.is_loopback() {
        return Some(Block::Loopback);
    }
    let seg = a.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    // Forms that embed an IPv4 address inherit its verdict.
    if let Some(mapped) = a.to_ipv4_mapped() {
        return classify_v4(mapped);
    }
    if in6(a, [0, 0, 0, 0, 0, 0, 0, 0], 96) {
        // IPv4-compatible (deprecated): ::a.b.c.d.
        return Some(classify_v4(v4(seg[6], seg[7])).unwrap_or(Block::Reserved));
    }
    if in6(a, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return classify_v4(v4(seg[6], seg[7]));
    }
    if in6(a, [0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48) {
        // NAT64 local-use: never globally routable.
        return Some(classify_v4(v4(seg[6], seg[7])).unwrap_or(Block::Reserved));
    }
    if in6(a, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        // 6to4 embeds the IPv4 address in bits 16..48.
        return classify_v4(v4(seg[1], seg[2]));
    }
    if in6(a, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32) {
        // Teredo: server in bits 32..64, client (inverted) in bits 96..128.
        let server = v4(seg[2], seg[3]);
        let client = v4(!seg[6], !seg[7]);
        return classify_v4(server)
            .or(classify_v4(client))
            .or(Some(Block::Reserved));
    }
    let ranges: &[([u16; 8], u32, Block)] = &[
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Block::LinkLocal),
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Block::Multicast),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Block::Private),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Block::Reserved),
        ([0x2001, 0x0db8, 0, 0, 0, 0, 0, 0], 32, Block::Documentation),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Block::Documentation),
        ([0x2001, 0x0002, 0, 0, 0, 0, 0, 0], 48, Block::Benchmarking),
        ([0x0100, 0, 0, 0, 0, 0, 0, 0], 64, Block::Reserved),
        ([0x0100, 0, 0, 1, 0, 0, 0, 0], 64, Block::Reserved),
        ([0x2001, 0x0010, 0, 0, 0, 0, 0, 0], 28, Block::Reserved),
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, Block::Reserved),
    ];
    if let Some((_, _, b)) = ranges.iter().find(|(net, p, _)| in6(a, *net, *p)) {
        return Some(*b);
    }
    // The rest of 2001::/23 is IETF protocol assignments; a few are globally reachable.
    if in6(a, [0x2001, 0, 0, 0, 0, 0, 0, 0], 23) {
        let global = in6(a, [0x2001, 1, 0, 0, 0, 0, 0, 1], 128)
            || in6(a, [0x2001, 1, 0, 0, 0, 0, 0, 2], 128)
            || in6(a, [0x2001, 3, 0, 0, 0, 0, 0, 0], 32)
            || in6(a, [0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48)
            || in6(a, [0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28)
            || in6(a, [0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28);
        return (!global).then_some(Block::Reserved);
    }
    // Only 2000::/3 is global unicast; everything else is reserved.
    if !in6(a, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return Some(Block::Reserved);
    }
    None
}
