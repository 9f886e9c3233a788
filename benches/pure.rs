//! The pure hot functions: `policy/url`, `redact/views_4k`, `naming/800_tools`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::naming::{Names, ServerTools, assign};
use demiurge_mcp::net::{Answer, UrlPolicy};
use demiurge_mcp::redact::Redactor;

fn policy(c: &mut Criterion) {
    let policy = UrlPolicy::with_trusted(["10.0.0.0/8".parse().unwrap()]);
    let answer = Answer::Addresses(vec![
        "93.184.216.34".parse().unwrap(),
        "2606:2800:220:1:248:1893:25c8:1946".parse().unwrap(),
    ]);
    c.bench_function("policy/url", |b| {
        b.iter(|| {
            let target = policy
                .target(black_box("https://user:pw@mcp.example.com:8443/mcp?x=1"))
                .unwrap();
            policy.decide(&target, &answer)
        })
    });
}

fn redact(c: &mut Criterion) {
    let r = Redactor::new().with_secrets([
        ("API_TOKEN", "tok-1234567890"),
        ("OTHER", "another-secret-value"),
    ]);
    let mut text = String::new();
    while text.len() < 4096 {
        text.push_str(
            "line with ordinary words, a url https://example.com/x and tok-1234567890 in it\n",
        );
    }
    c.bench_function("redact/views_4k", |b| {
        b.iter(|| r.text_views(black_box(&text)))
    });
}

fn naming(c: &mut Criterion) {
    let tools: Vec<Vec<String>> = (0..16)
        .map(|s| (0..50).map(|t| format!("tool_{s}_{t}")).collect())
        .collect();
    let ids: Vec<String> = (0..16).map(|s| format!("server-{s}")).collect();
    c.bench_function("naming/800_tools", |b| {
        b.iter(|| {
            let servers: Vec<ServerTools<'_>> = ids
                .iter()
                .zip(&tools)
                .map(|(id, t)| ServerTools {
                    server_id: id,
                    tools: t.iter().map(String::as_str).collect(),
                    kept: false,
                })
                .collect();
            assign(&servers, &Names::default())
        })
    });
}

criterion_group!(benches, policy, redact, naming);
criterion_main!(benches);
