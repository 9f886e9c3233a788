//! The URL policy, table-driven (200+ cases) plus property tests of the audit view.

use std::net::IpAddr;

use demiurge_mcp::net::{Answer, AuditView, Host, UrlPolicy};
use proptest::prelude::*;

/// A global address used as the DNS answer when a case names none.
const GLOBAL: &str = "93.184.216.34";

enum Dns {
    /// Answer with these addresses.
    Ips(&'static [&'static str]),
    Error,
    Malformed,
}

fn decide(url: &str, dns: &Dns, trusted: &[&str]) -> AuditView {
    let policy = UrlPolicy::with_trusted(trusted.iter().map(|n| n.parse().unwrap()));
    let target = match policy.target(url) {
        Ok(t) => t,
        Err(verdict) => return verdict.audit(),
    };
    let answer = match (&target.host, dns) {
        (Host::Ip(ip), _) => Answer::Addresses(vec![*ip]),
        (Host::Name(_), Dns::Ips(ips)) => {
            Answer::Addresses(ips.iter().map(|s| s.parse::<IpAddr>().unwrap()).collect())
        }
        (Host::Name(_), Dns::Error) => Answer::Error,
        (Host::Name(_), Dns::Malformed) => Answer::Malformed,
    };
    policy.decide(&target, &answer).audit()
}

fn global() -> Dns {
    Dns::Ips(&[GLOBAL])
}

/// (url, expected reason) with a global DNS answer and no trusted network.
const PLAIN: &[(&str, &str)] = &[
    // Schemes.
    ("http://example.com/", "allowed"),
    ("https://example.com/mcp", "allowed"),
    ("HTTPS://EXAMPLE.COM/mcp", "allowed"),
    ("https:example.com/x", "allowed"),
    ("ftp://example.com/", "unsupported_scheme"),
    ("file:///etc/passwd", "unsupported_scheme"),
    ("gopher://example.com/", "unsupported_scheme"),
    ("ws://example.com/", "unsupported_scheme"),
    ("wss://example.com/", "unsupported_scheme"),
    ("javascript:alert(1)", "unsupported_scheme"),
    ("data:text/plain,hi", "unsupported_scheme"),
    ("mailto:a@example.com", "unsupported_scheme"),
    ("unix:/var/run/x.sock", "unsupported_scheme"),
    // Malformed.
    ("", "invalid_url"),
    ("not a url", "invalid_url"),
    ("://example.com", "invalid_url"),
    ("http://", "missing_host"),
    // WHATWG: a special scheme skips extra slashes, so the host is `path`.
    ("http:///path", "allowed"),
    ("http://[::1", "invalid_host"),
    ("http://[1:2:3]/", "invalid_host"),
    ("http://[::ffff:999.0.0.1]/", "invalid_host"),
    ("http://exa mple.com/", "invalid_host"),
    ("http://exa$mple.com/", "invalid_host"),
    ("http://exa!mple.com/", "invalid_host"),
    ("http://-example.com/", "invalid_host"),
    ("http://example-.com/", "invalid_host"),
    ("http://example..com/", "invalid_host"),
    ("http://a.b.c.d.1/", "invalid_host"),
    ("http://1.2.3.4.5/", "invalid_host"),
    ("http://256.1.1.1/", "invalid_host"),
    ("http://0x100000000/", "invalid_host"),
    // Ports.
    ("http://example.com:0/", "invalid_port"),
    ("http://example.com:65535/", "allowed"),
    ("http://example.com:65536/", "invalid_port"),
    ("http://example.com:99999999/", "invalid_port"),
    ("http://example.com:-1/", "invalid_port"),
    ("http://example.com:8443/", "allowed"),
    ("http://8.8.8.8:0/", "invalid_port"),
    // Loopback in every legacy IPv4 form.
    ("http://127.0.0.1/", "loopback"),
    ("http://127.1/", "loopback"),
    ("http://127.0.1/", "loopback"),
    ("http://0x7f.1/", "loopback"),
    ("http://0x7f.0.0.1/", "loopback"),
    ("http://0x7f000001/", "loopback"),
    ("http://2130706433/", "loopback"),
    ("http://0177.0.0.1/", "loopback"),
    ("http://0177.1/", "loopback"),
    ("http://017700000001/", "loopback"),
    ("http://127.0.0.1./", "loopback"),
    ("http://127.255.255.254/", "loopback"),
    ("http://１２７.０.０.１/", "loopback"),
    ("http://127。0。0。1/", "loopback"),
    ("http://127．0．0．1/", "loopback"),
    ("http://127｡0｡0｡1/", "loopback"),
    ("http://%31%32%37.0.0.1/", "loopback"),
    ("http://0x7F.0x00.0x00.0x01/", "loopback"),
    // Metadata in every form.
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://0xa9fea9fe/", "metadata"),
    ("http://2852039166/", "metadata"),
    ("http://0251.0376.0251.0376/", "metadata"),
    ("http://169.254.43518/", "metadata"),
    ("http://0xA9.0xFE.0xA9.0xFE/", "metadata"),
    ("http://169.254.170.2/v2/credentials", "metadata"),
    ("http://169.254.170.23/", "metadata"),
    ("http://100.100.100.200/", "metadata"),
    ("http://192.0.0.192/", "metadata"),
    // Azure's WireServer, a public address, in literal, legacy and embedded forms.
    ("http://168.63.129.16/machine?comp=goalstate", "metadata"),
    ("http://168.63.129.16:32526/", "metadata"),
    ("http://0xa83f8110/", "metadata"),
    ("http://2822734096/", "metadata"),
    ("http://0250.077.0201.020/", "metadata"),
    ("http://168.63.33040/", "metadata"),
    ("http://１６８.６３.１２９.１６/", "metadata"),
    ("http://[::ffff:168.63.129.16]/", "metadata"),
    ("http://[::ffff:a83f:8110]/", "metadata"),
    ("http://[64:ff9b::a83f:8110]/", "metadata"),
    ("http://[2002:a83f:8110::1]/", "metadata"),
    ("http://168.63.129.17/", "allowed"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://[fd00:ec2::23]/", "metadata"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[::ffff:a9fe:a9fe]/", "metadata"),
    (
        "http://metadata.google.internal/computeMetadata/v1/",
        "metadata",
    ),
    ("http://METADATA.GOOGLE.INTERNAL./", "metadata"),
    ("http://metadata.goog/", "metadata"),
    ("http://computeMetadata.metadata.goog/", "metadata"),
    ("http://a.b.metadata.goog./", "metadata"),
    ("http://[fd20:ce::254]/", "metadata"),
    ("http://[FD20:00CE:0:0:0:0:0:254]/", "metadata"),
    ("http://[::ffff:100.100.100.200]/", "metadata"),
    ("http://metadata/", "metadata"),
    ("http://ｍｅｔａｄａｔａ.google.internal/", "metadata"),
    // Private, CGNAT, link-local, multicast, unspecified, broadcast, reserved.
    ("http://10.0.0.1/", "private"),
    ("http://10.255.255.255/", "private"),
    ("http://012.0.0.1/", "private"),
    ("http://167772161/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://172.31.255.255/", "private"),
    ("http://172.32.0.1/", "allowed"),
    ("http://172.15.255.255/", "allowed"),
    ("http://192.168.1.1/", "private"),
    ("http://0xc0a80101/", "private"),
    ("http://100.64.0.1/", "cgnat"),
    ("http://100.127.255.255/", "cgnat"),
    ("http://100.128.0.1/", "allowed"),
    ("http://169.254.1.1/", "link_local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://239.255.255.250/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://0.1.2.3/", "unspecified"),
    ("http://255.255.255.255/", "broadcast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://250.1.2.3/", "reserved"),
    ("http://192.0.0.1/", "reserved"),
    ("http://192.0.0.9/", "allowed"),
    ("http://192.0.0.10/", "allowed"),
    ("http://192.88.99.1/", "reserved"),
    ("http://192.0.2.1/", "documentation"),
    ("http://198.51.100.7/", "documentation"),
    ("http://203.0.113.9/", "documentation"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://198.19.255.255/", "benchmarking"),
    ("http://198.20.0.1/", "allowed"),
    ("http://8.8.8.8/", "allowed"),
    ("http://1.1.1.1/", "allowed"),
    ("http://0x08080808/", "allowed"),
    // IPv6.
    ("http://[::1]/", "loopback"),
    ("http://[0:0:0:0:0:0:0:1]/", "loopback"),
    ("http://[::]/", "unspecified"),
    ("http://[fe80::1]/", "link_local"),
    ("http://[febf::1]/", "link_local"),
    ("http://[fec0::1]/", "reserved"),
    ("http://[fc00::1]/", "private"),
    ("http://[fd12:3456::1]/", "private"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[ff0e::1]/", "multicast"),
    ("http://[2001:db8::1]/", "documentation"),
    ("http://[3fff::1]/", "documentation"),
    ("http://[2001:2::1]/", "benchmarking"),
    ("http://[100::1]/", "reserved"),
    ("http://[2001:10::1]/", "reserved"),
    ("http://[2001:100::1]/", "reserved"),
    ("http://[5f00::1]/", "reserved"),
    ("http://[4000::1]/", "reserved"),
    ("http://[1::1]/", "reserved"),
    ("http://[2606:4700:4700::1111]/", "allowed"),
    ("http://[2001:4860:4860::8888]/", "allowed"),
    ("http://[2001:20::1]/", "allowed"),
    ("http://[2001:1::1]/", "allowed"),
    // IPv6 embedding IPv4.
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[::ffff:7f00:1]/", "loopback"),
    ("http://[::ffff:10.0.0.1]/", "private"),
    ("http://[::ffff:8.8.8.8]/", "allowed"),
    ("http://[::127.0.0.1]/", "loopback"),
    ("http://[::8.8.8.8]/", "reserved"),
    ("http://[::10.1.1.1]/", "private"),
    ("http://[64:ff9b::7f00:1]/", "loopback"),
    ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),
    ("http://[64:ff9b::808:808]/", "allowed"),
    ("http://[64:ff9b:1::808:808]/", "reserved"),
    ("http://[64:ff9b:1::a00:1]/", "private"),
    ("http://[2002:7f00:1::]/", "loopback"),
    ("http://[2002:a9fe:a9fe::1]/", "metadata"),
    ("http://[2002:c0a8:101::1]/", "private"),
    ("http://[2002:808:808::1]/", "allowed"),
    (
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
        "documentation",
    ),
    ("http://[2001:0:7f00:1:0:0:f7f7:f7f7]/", "loopback"),
    ("http://[2001:0:808:808:0:0:f7f7:f7f7]/", "reserved"),
    // Names.
    ("http://localhost/", "localhost"),
    ("http://LOCALHOST:8080/", "localhost"),
    ("http://localhost./", "localhost"),
    ("http://api.localhost/", "localhost"),
    ("http://localhost.localdomain/", "localhost"),
    ("http://ＬＯＣＡＬＨＯＳＴ/", "localhost"),
    ("http://localhost。/", "localhost"),
    ("http://ex%61mple.com/", "allowed"),
    ("http://ＥＸＡＭＰＬＥ.com/", "allowed"),
    ("http://bücher.example/", "allowed"),
    ("http://xn--bcher-kva.example/", "allowed"),
    ("http://_dmarc.example.com/", "allowed"),
    ("http://a.b.c.d.e.f.example.com/", "allowed"),
    ("http://example.com./", "allowed"),
    // Userinfo tricks: the host is what comes after the last @.
    ("http://127.0.0.1@example.com/", "allowed"),
    ("http://example.com@127.0.0.1/", "loopback"),
    ("http://user:pass@169.254.169.254/", "metadata"),
    ("http://example.com:80@10.0.0.1/", "private"),
    ("http://example.com#@127.0.0.1/", "allowed"),
    ("http://example.com?@127.0.0.1/", "allowed"),
    ("http://example.com\\@127.0.0.1/", "allowed"),
    ("http://a@b@127.0.0.1/", "loopback"),
    ("http://%40@127.0.0.1/", "loopback"),
    ("http://user@[::1]/", "loopback"),
];

#[test]
fn the_plain_table_holds() {
    let mut failures = Vec::new();
    for (url, expected) in PLAIN {
        let d = decide(url, &global(), &[]);
        if d.reason != *expected {
            failures.push(format!("{url:?}: expected {expected}, got {}", d.reason));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// (url, DNS answer, expected reason).
fn dns_cases() -> Vec<(&'static str, Dns, &'static str)> {
    vec![
        ("http://mcp.test/", Dns::Ips(&["93.184.216.34"]), "allowed"),
        (
            "http://mcp.test/",
            Dns::Ips(&["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]),
            "allowed",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["93.184.216.34", "10.0.0.1"]),
            "private",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["10.0.0.1", "93.184.216.34"]),
            "private",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["93.184.216.34", "127.0.0.1"]),
            "loopback",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["93.184.216.34", "169.254.169.254"]),
            "metadata",
        ),
        ("http://mcp.test/", Dns::Ips(&["::1"]), "loopback"),
        (
            "http://mcp.test/",
            Dns::Ips(&["::ffff:127.0.0.1"]),
            "loopback",
        ),
        ("http://mcp.test/", Dns::Ips(&["fe80::1"]), "link_local"),
        (
            "http://mcp.test/",
            Dns::Ips(&["2002:7f00:1::1"]),
            "loopback",
        ),
        ("http://mcp.test/", Dns::Ips(&["64:ff9b::a00:1"]), "private"),
        ("http://mcp.test/", Dns::Ips(&["0.0.0.0"]), "unspecified"),
        ("http://mcp.test/", Dns::Ips(&["224.0.0.251"]), "multicast"),
        ("http://mcp.test/", Dns::Ips(&["100.64.1.1"]), "cgnat"),
        (
            "http://mcp.test/",
            Dns::Ips(&["100.100.100.200"]),
            "metadata",
        ),
        ("http://mcp.test/", Dns::Ips(&["fd00:ec2::254"]), "metadata"),
        (
            "http://mcp.test/",
            Dns::Ips(&["198.18.0.1"]),
            "benchmarking",
        ),
        ("http://mcp.test/", Dns::Ips(&["240.0.0.1"]), "reserved"),
        ("http://mcp.test/", Dns::Ips(&[]), "dns_empty"),
        ("http://mcp.test/", Dns::Error, "dns_error"),
        ("http://mcp.test/", Dns::Malformed, "dns_malformed"),
        (
            "http://metadata.google.internal/",
            Dns::Ips(&["8.8.8.8"]),
            "metadata",
        ),
        (
            "http://localhost/",
            Dns::Ips(&["127.0.0.1", "::1"]),
            "localhost",
        ),
        ("http://localhost/", Dns::Ips(&["8.8.8.8"]), "localhost"),
        ("http://rebind.test/", Dns::Ips(&["192.168.0.1"]), "private"),
        // A literal IP ignores DNS entirely.
        ("http://8.8.8.8/", Dns::Error, "allowed"),
        ("http://127.0.0.1/", Dns::Ips(&["8.8.8.8"]), "loopback"),
    ]
}

#[test]
fn every_dns_answer_must_pass() {
    let mut failures = Vec::new();
    for (url, dns, expected) in dns_cases() {
        let d = decide(url, &dns, &[]);
        if d.reason != expected {
            failures.push(format!("{url:?}: expected {expected}, got {}", d.reason));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// (url, DNS answer, trusted networks, expected reason).
fn trusted_cases() -> Vec<(&'static str, Dns, &'static [&'static str], &'static str)> {
    vec![
        // A trusted network never unblocks a metadata address, however it is reached.
        (
            "http://[fd20:ce::254]/",
            global(),
            &["fc00::/7"],
            "metadata",
        ),
        ("http://[fd20:ce::254]/", global(), &["::/0"], "metadata"),
        (
            "http://gcp.example.test/",
            Dns::Ips(&["fd20:ce::254"]),
            &["fc00::/7"],
            "metadata",
        ),
        (
            "http://x.metadata.goog/",
            global(),
            &["0.0.0.0/0"],
            "metadata",
        ),
        // Azure's WireServer: never unblocked, as a literal or as a DNS answer.
        (
            "http://168.63.129.16/",
            global(),
            &["0.0.0.0/0"],
            "metadata",
        ),
        (
            "http://azure.example.test/",
            Dns::Ips(&["168.63.129.16"]),
            &["168.63.0.0/16", "0.0.0.0/0"],
            "metadata",
        ),
        (
            "http://azure.example.test/",
            Dns::Ips(&["93.184.216.34", "::ffff:168.63.129.16"]),
            &["::/0"],
            "metadata",
        ),
        (
            "http://127.0.0.1:8080/",
            global(),
            &["127.0.0.0/8"],
            "allowed",
        ),
        ("http://127.1/", global(), &["127.0.0.0/8"], "allowed"),
        ("http://127.0.0.2/", global(), &["127.0.0.1/32"], "loopback"),
        ("http://[::1]/", global(), &["127.0.0.0/8"], "loopback"),
        ("http://[::1]/", global(), &["::1/128"], "allowed"),
        (
            "http://[::ffff:127.0.0.1]/",
            global(),
            &["127.0.0.0/8"],
            "allowed",
        ),
        (
            "http://localhost/",
            Dns::Ips(&["127.0.0.1"]),
            &["127.0.0.0/8"],
            "allowed",
        ),
        (
            "http://localhost/",
            Dns::Ips(&["127.0.0.1", "::1"]),
            &["127.0.0.0/8"],
            "localhost",
        ),
        (
            "http://localhost/",
            Dns::Ips(&["127.0.0.1", "::1"]),
            &["127.0.0.0/8", "::1/128"],
            "allowed",
        ),
        (
            "http://localhost/",
            Dns::Ips(&["8.8.8.8"]),
            &["127.0.0.0/8"],
            "localhost",
        ),
        ("http://10.1.2.3/", global(), &["10.0.0.0/8"], "allowed"),
        ("http://10.1.2.3/", global(), &["192.168.0.0/16"], "private"),
        (
            "http://192.168.7.7/",
            global(),
            &["192.168.0.0/16"],
            "allowed",
        ),
        (
            "http://100.64.0.9/",
            global(),
            &["100.64.0.0/10"],
            "allowed",
        ),
        (
            "http://100.100.100.200/",
            global(),
            &["100.64.0.0/10"],
            "metadata",
        ),
        ("http://[fd12::1]/", global(), &["fc00::/7"], "allowed"),
        (
            "http://[fd00:ec2::254]/",
            global(),
            &["fc00::/7"],
            "metadata",
        ),
        (
            "http://169.254.169.254/",
            global(),
            &["169.254.0.0/16"],
            "metadata",
        ),
        (
            "http://169.254.1.1/",
            global(),
            &["169.254.0.0/16"],
            "link_local",
        ),
        ("http://[fe80::1]/", global(), &["fe80::/10"], "link_local"),
        ("http://224.0.0.1/", global(), &["224.0.0.0/4"], "multicast"),
        ("http://0.0.0.0/", global(), &["0.0.0.0/8"], "unspecified"),
        ("http://240.0.0.1/", global(), &["240.0.0.0/4"], "reserved"),
        (
            "http://192.0.2.1/",
            global(),
            &["192.0.2.0/24"],
            "documentation",
        ),
        (
            "http://198.18.0.1/",
            global(),
            &["198.18.0.0/15"],
            "benchmarking",
        ),
        (
            "http://255.255.255.255/",
            global(),
            &["0.0.0.0/0"],
            "broadcast",
        ),
        ("http://10.0.0.1/", global(), &["0.0.0.0/0"], "allowed"),
        (
            "http://169.254.169.254/",
            global(),
            &["0.0.0.0/0"],
            "metadata",
        ),
        ("http://[::1]/", global(), &["::/0"], "allowed"),
        ("http://[ff02::1]/", global(), &["::/0"], "multicast"),
        (
            "http://metadata.google.internal/",
            Dns::Ips(&["10.0.0.1"]),
            &["0.0.0.0/0"],
            "metadata",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["10.0.0.1", "127.0.0.1"]),
            &["10.0.0.0/8"],
            "loopback",
        ),
        (
            "http://mcp.test/",
            Dns::Ips(&["10.0.0.1", "127.0.0.1"]),
            &["10.0.0.0/8", "127.0.0.0/8"],
            "allowed",
        ),
        ("http://mcp.test/", Dns::Error, &["0.0.0.0/0"], "dns_error"),
        (
            "http://mcp.test/",
            Dns::Ips(&[]),
            &["0.0.0.0/0"],
            "dns_empty",
        ),
    ]
}

#[test]
fn trusted_networks_allow_only_what_they_may() {
    let mut failures = Vec::new();
    for (url, dns, trusted, expected) in trusted_cases() {
        let d = decide(url, &dns, trusted);
        if d.reason != expected {
            failures.push(format!(
                "{url:?} trusting {trusted:?}: expected {expected}, got {}",
                d.reason
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn there_are_at_least_two_hundred_cases() {
    assert!(PLAIN.len() + dns_cases().len() + trusted_cases().len() >= 200);
}

#[test]
fn the_audit_view_is_the_origin_and_addresses_only() {
    let d = decide(
        "https://alice:s3cret@Example.COM:8443/p/a/t/h?token=abc#frag",
        &global(),
        &[],
    );
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "allowed": true, "reason": "allowed", "target": "https://example.com:8443",
            "scheme": "https", "hostname": "example.com", "port": 8443,
            "resolved_addresses": [GLOBAL]
        })
    );
    let d = decide("http://u:p@[::1]:9/x", &global(), &[]);
    assert_eq!(d.target, "http://[::1]:9");
    assert_eq!(d.hostname, "[::1]");
    assert!(!d.allowed);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC*") {
        let _ = decide(&s, &global(), &[]);
        let _ = decide(&format!("http://{s}"), &global(), &["10.0.0.0/8"]);
    }

    #[test]
    fn the_audit_view_never_holds_userinfo_path_query_or_fragment(
        user in "[a-z]{3,8}", pass in "[A-Za-z0-9]{6,12}", path in "[a-z]{4,10}",
        query in "[a-z]{4,10}", frag in "[a-z]{4,10}",
        host in prop_oneof![Just("example.com".to_string()), Just("127.0.0.1".to_string()), Just("[::1]".to_string()), "[a-z]{3,10}\\.test"],
        port in proptest::option::of(1u16..),
    ) {
        let marker = |s: &str| format!("zq{s}qz");
        let port = port.map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!("https://{}:{}@{host}{port}/{}?k={}#{}", marker(&user), marker(&pass), marker(&path), marker(&query), marker(&frag));
        let d = decide(&url, &global(), &[]);
        let view = serde_json::to_string(&d).unwrap();
        for part in [&user, &pass, &path, &query, &frag] {
            prop_assert!(!view.contains(&marker(part)), "{} leaks in {}", part, view);
        }
    }

    #[test]
    fn allowed_decisions_hold_only_globally_routable_addresses(
        a in any::<[u8; 4]>(), b in any::<u128>(), trust_private in any::<bool>(),
    ) {
        let v4 = std::net::Ipv4Addr::from(a).to_string();
        let v6 = std::net::Ipv6Addr::from(b).to_string();
        let trusted: &[&str] = if trust_private { &["10.0.0.0/8", "fc00::/7", "127.0.0.0/8"] } else { &[] };
        let policy = UrlPolicy::with_trusted(trusted.iter().map(|n| n.parse().unwrap()));
        for ip in [v4, v6] {
            let addr: IpAddr = ip.parse().unwrap();
            let target = policy.target("http://mcp.test/").unwrap();
            let d = policy.decide(&target, &Answer::Addresses(vec![addr]));
            if d.is_allowed() {
                let class = demiurge_mcp::net::policy::classify(addr);
                prop_assert!(class.is_none() || (class.unwrap().trustable() && trust_private), "{addr} allowed as {class:?}");
            }
        }
    }
}
