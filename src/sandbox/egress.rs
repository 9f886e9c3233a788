//! The egress proxy of a server confined with `network: proxy`: the only way out of its
//! network namespace. It listens on the namespace's loopback (the launcher hands the
//! runtime that socket) and takes HTTP proxy requests: `CONNECT host:port` (HTTPS and
//! any TLS) and absolute-form `GET http://host/...` (plain HTTP). Every target goes
//! through the host's [`UrlPolicy`](crate::net::UrlPolicy) with DNS pinning, exactly as
//! an HTTP server's requests do: the name is resolved by the runtime, every answer
//! must pass, and the connection goes to an address that passed. Each decision is
//! reported (`mcp.url_decision` with phase `egress`); a refusal answers 403 before any
//! socket is opened. The runtime never uses a proxy of its own environment.
//!
//! Adversary: the confined server, which writes what it likes to the proxy. Bounds: a
//! request head of at most [`MAX_HEAD`] bytes, read within [`HEAD_TIMEOUT`]; at most
//! [`MAX_TUNNELS`] open tunnels per server (more wait for the accept); connects
//! within the HTTP client's connect timeout. A plain HTTP request is one per
//! connection (`Connection: close`), so a second request cannot ride a checked socket
//! to another host's name.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::net::client::{CONNECT_TIMEOUT, DecisionHook, NetContext};
use crate::net::policy::Verdict;

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a request head may take to arrive.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most tunnels open at once for one server.
pub const MAX_TUNNELS: usize = 64;
/// Most tunnels open at once for every server of this process.
pub const MAX_TUNNELS_IN_ALL: usize = 256;
/// Refusals reported (events, CLI lines) per connection; later ones are refused all
/// the same, silently.
pub const MAX_REPORTED_REFUSALS: usize = 64;
/// A tunnel that carries nothing either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

static ALL_TUNNELS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_TUNNELS_IN_ALL);

/// What the proxy of one connection needs: the runtime's policy, resolver and the
/// hook that reports each decision.
#[derive(Clone)]
pub struct Egress {
    /// Policy and resolver (the HTTP servers' own).
    pub net: Arc<NetContext>,
    /// Called with every decision, in order.
    pub on_decision: DecisionHook,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").finish_non_exhaustive()
    }
}

/// Points a confined server's HTTP clients at the proxy: `HTTP_PROXY`, `HTTPS_PROXY`,
/// `ALL_PROXY` and their lower-case forms, `NODE_USE_ENV_PROXY` for Node's own
/// `fetch`; no `NO_PROXY` (nothing is reachable directly).
pub fn proxy_environment(env: &mut std::collections::BTreeMap<String, String>) {
    let url = format!("http://127.0.0.1:{}", super::launcher::PROXY_PORT);
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.insert(name.into(), url.clone());
        env.insert(name.to_ascii_lowercase(), url.clone());
    }
    env.remove("NO_PROXY");
    env.remove("no_proxy");
    env.insert("NODE_USE_ENV_PROXY".into(), "1".into());
}

/// Ends the proxy when dropped (with its server's process).
#[derive(Debug)]
pub struct Running(tokio::task::AbortHandle);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `listener` (the runtime's is inside the server's namespace) until the
/// returned guard drops. Call it within a tokio runtime.
///
/// # Errors
/// When the listener cannot be made non-blocking or registered with tokio.
pub fn serve(listener: std::net::TcpListener, egress: Egress) -> std::io::Result<Running> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_TUNNELS));
    let task = tokio::spawn(async move {
        let mut tunnels = tokio::task::JoinSet::new();
        loop {
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let Ok(shared) = ALL_TUNNELS.acquire().await else {
                return;
            };
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors, say: a pause, not a spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let egress = egress.clone();
            tunnels.spawn(async move {
                let (_permit, _shared) = (permit, shared);
                let _ = handle(stream, &egress).await;
            });
            // Finished tunnels are reaped as they go; aborting this task ends the rest.
            while tunnels.try_join_next().is_some() {}
        }
    });
    Ok(Running(task.abort_handle()))
}

/// One request: its head read, its target decided, then a tunnel or one forwarded request.
async fn handle(mut client: TcpStream, egress: &Egress) -> std::io::Result<()> {
    let Ok(Ok((head, rest))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await
    else {
        return refuse(
            &mut client,
            400,
            "the request head is too large, cut or late",
        )
        .await;
    };
    let Some(request) = Request::parse(&head) else {
        return refuse(&mut client, 400, "not an HTTP proxy request").await;
    };
    let verdict = egress.net.check_url(&request.url).await;
    let audit = verdict.audit();
    (egress.on_decision)(&audit);
    let (target, addresses) = match verdict {
        Verdict::Allowed { target, addresses } => (target, addresses),
        Verdict::Blocked { block, .. } => {
            let reason = format!("blocked by the runtime's URL policy ({})", block.as_str());
            return refuse(&mut client, 403, &reason).await;
        }
    };
    let mut upstream = None;
    for address in addresses {
        let socket = SocketAddr::new(address, target.port);
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(socket)).await
        {
            upstream = Some(stream);
            break;
        }
    }
    let Some(mut upstream) = upstream else {
        return refuse(&mut client, 502, "the target did not accept a connection").await;
    };
    match request.forward {
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await?;
        }
        Some(head) => upstream.write_all(head.as_bytes()).await?,
    }
    upstream.write_all(&rest).await?;
    relay(client, upstream).await;
    Ok(())
}

/// Copies both ways until either side closes or nothing moves for [`IDLE_TIMEOUT`].
async fn relay(client: TcpStream, upstream: TcpStream) {
    let (from_client, to_client) = client.into_split();
    let (from_upstream, to_upstream) = upstream.into_split();
    let idle = Arc::new(tokio::sync::Notify::new());
    let pump = |mut from: tokio::net::tcp::OwnedReadHalf,
                mut to: tokio::net::tcp::OwnedWriteHalf,
                idle: Arc<tokio::sync::Notify>| async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if to.write_all(&buffer[..n]).await.is_err() {
                break;
            }
            idle.notify_one();
        }
        let _ = to.shutdown().await;
    };
    let up = pump(from_client, to_upstream, Arc::clone(&idle));
    let down = pump(from_upstream, to_client, Arc::clone(&idle));
    let watch = async {
        while tokio::time::timeout(IDLE_TIMEOUT, idle.notified())
            .await
            .is_ok()
        {}
    };
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = watch => {}
    }
    // The halves drop with the pumps: both sockets close.
}

/// Reads up to the end of the head; the head, and what came after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    // Where the search for the end resumes: a head dribbled byte by byte is scanned once.
    let mut searched = 0;
    loop {
        let found = buffer[searched..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| searched + at);
        searched = buffer.len().saturating_sub(3);
        if let Some(end) = found {
            let rest = buffer.split_off(end + 4);
            let head = String::from_utf8(buffer)
                .map_err(|_| std::io::Error::other("a head that is not UTF-8"))?;
            return Ok((head, rest));
        }
        if buffer.len() > MAX_HEAD {
            return Err(std::io::Error::other("the head is too large"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("the head was cut short"));
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

async fn refuse(client: &mut TcpStream, status: u16, reason: &str) -> std::io::Result<()> {
    let words = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{reason}\n");
    let response = format!(
        "HTTP/1.1 {status} {words}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

/// A proxy request: the URL whose origin the policy decides and, for plain HTTP, the
/// head to send upstream (origin-form, hop-by-hop and proxy headers dropped).
#[derive(Debug, PartialEq, Eq)]
struct Request {
    url: String,
    forward: Option<String>,
}

impl Request {
    fn parse(head: &str) -> Option<Request> {
        let mut lines = head.split("\r\n");
        let mut words = lines.next()?.split(' ');
        let (method, target, version) = (words.next()?, words.next()?, words.next()?);
        if words.next().is_some() || !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
            return None;
        }
        if !method.bytes().all(|b| b.is_ascii_uppercase()) || method.is_empty() {
            return None;
        }
        if method == "CONNECT" {
            // `host:port` only: no userinfo, path or scheme can hide in an authority.
            if target.is_empty() || target.contains(['/', '@', '?', '#', '\\']) {
                return None;
            }
            // The port is required (`Url` forgets a default one, so read it here).
            let (_, port) = target.rsplit_once(':')?;
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let url = format!("https://{target}");
            url::Url::parse(&url).ok()?;
            return Some(Request { url, forward: None });
        }
        // Absolute form, plain HTTP only (HTTPS goes through CONNECT).
        let parsed = url::Url::parse(target).ok()?;
        if parsed.scheme() != "http" || !parsed.username().is_empty() || parsed.password().is_some()
        {
            return None;
        }
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_string(),
        };
        let mut forward = format!("{method} {path} {version}\r\n");
        for line in lines.filter(|l| !l.is_empty()) {
            let name = line.split(':').next().unwrap_or_default().trim();
            let hop = [
                "connection",
                "proxy-connection",
                "proxy-authorization",
                "keep-alive",
                "host",
            ];
            if hop.iter().any(|h| name.eq_ignore_ascii_case(h)) {
                continue;
            }
            forward.push_str(line);
            forward.push_str("\r\n");
        }
        let host = parsed.host_str()?;
        match parsed.port() {
            Some(port) => forward.push_str(&format!("Host: {host}:{port}\r\n")),
            None => forward.push_str(&format!("Host: {host}\r\n")),
        }
        forward.push_str("Connection: close\r\n\r\n");
        Some(Request {
            url: target.to_string(),
            forward: Some(forward),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn requests_parse_and_odd_ones_are_refused() {
        let connect =
            Request::parse("CONNECT registry.npmjs.org:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(connect.url, "https://registry.npmjs.org:443");
        assert_eq!(connect.forward, None);
        let get = Request::parse(
            "GET http://127.0.0.1:8080/a?b=1 HTTP/1.1\r\nHost: evil.example\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(get.url, "http://127.0.0.1:8080/a?b=1");
        let forward = get.forward.unwrap();
        assert!(forward.starts_with("GET /a?b=1 HTTP/1.1\r\n"), "{forward}");
        assert!(forward.contains("Host: 127.0.0.1:8080\r\n"), "{forward}");
        assert!(
            !forward.contains("evil.example") && !forward.contains("Proxy-"),
            "{forward}"
        );
        assert!(forward.ends_with("Connection: close\r\n\r\n"), "{forward}");
        for bad in [
            "CONNECT user@host:443 HTTP/1.1\r\n\r\n",
            "CONNECT host HTTP/1.1\r\n\r\n",
            "CONNECT host:443/x HTTP/1.1\r\n\r\n",
            "CONNECT host:443 HTTP/2\r\n\r\n",
            "GET /relative HTTP/1.1\r\n\r\n",
            "GET https://host/ HTTP/1.1\r\n\r\n",
            "GET http://user:pw@host/ HTTP/1.1\r\n\r\n",
            "GET file:///etc/passwd HTTP/1.1\r\n\r\n",
            "get http://host/ HTTP/1.1\r\n\r\n",
            "GET http://host/ HTTP/1.1 extra\r\n\r\n",
        ] {
            assert_eq!(Request::parse(bad), None, "{bad}");
        }
    }
}

#[cfg(test)]
mod relay_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain request and a `CONNECT` tunnel through the proxy reach a trusted loopback
    /// server, and a refused target gets its 403 without a connection.
    #[tokio::test]
    async fn the_proxy_relays_what_it_allows_and_refuses_the_rest() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = server.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = server.accept().await {
                tokio::spawn(async move {
                    let mut head = [0u8; 1024];
                    let _ = s.read(&mut head).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                        .await;
                });
            }
        });
        let net = crate::net::NetContext::new(
            crate::net::UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]),
            Arc::new(crate::net::StaticResolver::new()),
            &[],
        )
        .unwrap();
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_port = proxy.local_addr().unwrap().port();
        let _running = super::serve(
            proxy,
            super::Egress {
                net: Arc::new(net),
                on_decision: Arc::new(|_| {}),
            },
        )
        .unwrap();
        let ask = |request: String| async move {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", proxy_port))
                .await
                .unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            let mut answer = vec![0u8; 4096];
            let mut got = Vec::new();
            while !String::from_utf8_lossy(&got).contains("hello")
                && !String::from_utf8_lossy(&got).contains("policy")
            {
                let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut answer))
                    .await
                    .expect("the proxy answers")
                    .unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&answer[..n]);
            }
            String::from_utf8_lossy(&got).into_owned()
        };
        let plain = ask(format!(
            "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\nProxy-Connection: Keep-Alive\r\n\r\n"
        ))
        .await;
        assert!(plain.ends_with("hello"), "{plain}");
        let tunnel = ask(format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"
        ))
        .await;
        assert!(
            tunnel.starts_with("HTTP/1.1 200 Connection established") && tunnel.ends_with("hello"),
            "{tunnel}"
        );
        let refused = ask(format!("GET http://127.0.0.2:{port}/ HTTP/1.1\r\n\r\n")).await;
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    }
}
