//! Confinement of stdio servers (`sandbox:` in a declaration, on by default;
//! `docs/sandbox.md`).
//!
//! A confined server runs under a Landlock allowlist: it reads the system (`/usr`,
//! `/etc` without its secrets, ...), the workspace, the location of its command (and
//! its interpreter's install), its own home and private tmp; it writes only to the
//! declared `write:` paths (default the workspace), its own home and tmp. Everything
//! else (the host's secret stores, the runtime home outside its own directory, other
//! servers' homes) is unreadable, whatever path, link or `..` it uses. It has user and
//! IPC namespaces of its own, and a network namespace whose only way out is the egress
//! proxy ([`egress`]) unless `network: host`; `deny:` paths are masked in a mount
//! namespace. `no_new_privs` and a seccomp filter hold in every mode.
//!
//! The rules are applied by the [`launcher`]: the runtime's own binary, started in the
//! server's place, confines itself and then `exec`s the server (`spawn.rs` is the
//! runtime's side). A host without what the rules need does not start the server: the
//! error names what is missing (fail closed).
//!
//! Adversary: the server (its code, its package, whatever it downloads), running as the
//! operator. Bound: what Landlock (ABI 6), the namespaces, seccomp and `no_new_privs`
//! enforce on the host's kernel.

use serde::Serialize;

mod confine;
pub mod egress;
pub mod launcher;
mod rules;
mod spawn;

pub use confine::Prepared;
pub(crate) use confine::policy_digest;
pub(crate) use rules::base_stamp;
pub use rules::{Rules, SECRET_STORES};
pub(crate) use spawn::spawn;
pub use spawn::{Confinement, HANDSHAKE_TIMEOUT, Launchers, launcher_path};

/// How a confined server may reach the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// The default: a network namespace of its own, whose only way out is the
    /// runtime's egress proxy (HTTP and HTTPS through `HTTP_PROXY`/`HTTPS_PROXY`),
    /// which applies the host's URL policy with DNS pinning to every request.
    Proxy,
    /// No network at all: an empty network namespace, and no sockets.
    None,
    /// The host's network, unconfined (explicit, shown in every preview).
    Host,
}

impl Network {
    /// The word a declaration and a preview use.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Proxy => "proxy",
            Network::None => "none",
            Network::Host => "host",
        }
    }
}

/// A declaration's `sandbox:` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Sandbox {
    /// `sandbox: off`: the server runs with the operator's authority.
    Off,
    /// Confined.
    Confined {
        /// Paths it may write (relative to the workspace, or absolute); default `.`.
        write: Vec<String>,
        /// More paths it may read (relative to the workspace, or absolute).
        read: Vec<String>,
        /// Paths hidden from it, inside what it may read or write (masked in a mount
        /// namespace of its own: a directory shows empty and unreadable, a file empty
        /// and read-only).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        deny: Vec<String>,
        /// Its network.
        network: Network,
    },
}

impl Sandbox {
    /// Reads `sandbox:`: `off`, or a mapping with `filesystem: {write, read}` and
    /// `network: host | none`. An error names the field and the fix, never the value.
    ///
    /// # Errors
    /// `(field, message)` of the first problem.
    pub fn parse(value: &serde_yaml::Value) -> Result<Sandbox, (String, String)> {
        use serde_yaml::Value;
        let bad = |field: &str, message: &str| Err((field.to_string(), message.to_string()));
        match value {
            Value::String(s) if s == "off" => return Ok(Sandbox::Off),
            Value::Bool(false) => return Ok(Sandbox::Off),
            Value::Mapping(_) => {}
            _ => {
                return bad(
                    "sandbox",
                    "write `sandbox: off`, or a mapping with `filesystem:` and `network:`",
                );
            }
        }
        let mut write = vec![".".to_string()];
        let mut read = Vec::new();
        let mut deny = Vec::new();
        let mut network = Network::Proxy;
        for (key, item) in value.as_mapping().into_iter().flatten() {
            match key.as_str() {
                Some("filesystem") => {
                    let Value::Mapping(fs) = item else {
                        return bad(
                            "sandbox.filesystem",
                            "must be a mapping with `write:` and `read:` lists",
                        );
                    };
                    for (k, list) in fs {
                        let field = match k.as_str() {
                            Some(f @ ("write" | "read" | "deny")) => f,
                            _ => {
                                return bad(
                                    "sandbox.filesystem",
                                    "takes `write:`, `read:` and `deny:` only",
                                );
                            }
                        };
                        let paths = paths_of(list).ok_or((
                            format!("sandbox.filesystem.{field}"),
                            "must be a list of paths (relative to the workspace, or absolute)"
                                .into(),
                        ))?;
                        match field {
                            "write" => write = paths,
                            "read" => read = paths,
                            _ => deny = paths,
                        }
                    }
                }
                Some("network") => {
                    network = match item.as_str() {
                        Some("proxy") => Network::Proxy,
                        Some("none") => Network::None,
                        Some("host") => Network::Host,
                        _ => return bad("sandbox.network", "must be `proxy`, `none` or `host`"),
                    };
                }
                _ => {
                    return bad("sandbox", "takes `filesystem:` and `network:` only");
                }
            }
        }
        Ok(Sandbox::Confined {
            write,
            read,
            deny,
            network,
        })
    }

    /// What a stdio server without `sandbox:` gets unless its host says otherwise:
    /// writes to the workspace, reads the system and the workspace, and the network
    /// only through the egress proxy.
    pub fn confined_default() -> Sandbox {
        Sandbox::Confined {
            write: vec![".".into()],
            read: Vec::new(),
            deny: Vec::new(),
            network: Network::Proxy,
        }
    }

    /// One line for a preview: what the server is confined to (`None`: nothing
    /// declared, so the default applies).
    pub fn describe(sandbox: Option<&Sandbox>) -> String {
        match sandbox {
            None => format!(
                "{} (the default; declare `sandbox:` to change it)",
                Sandbox::describe(Some(&Sandbox::confined_default()))
            ),
            Some(Sandbox::Off) => "off: the server runs with your authority".into(),
            Some(Sandbox::Confined {
                write,
                read,
                deny,
                network,
            }) => {
                // Each path quoted as JSON: a path cannot pass for the line's own words.
                let quoted = |paths: &[String]| {
                    paths
                        .iter()
                        .map(|p| serde_json::to_string(p).unwrap_or_default())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let git = if write.iter().any(|w| w == "." || w == "./") {
                    " (the workspace includes .git: a server that writes hooks or config there runs code at your next git command)"
                } else {
                    ""
                };
                let mut text = format!(
                    "confined: writes {}{git}; reads the system, the workspace{}{}; network {}",
                    quoted(write),
                    if read.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", quoted(read))
                    },
                    if deny.is_empty() {
                        String::new()
                    } else {
                        format!("; hides {}", quoted(deny))
                    },
                    match network {
                        Network::Proxy => "through the egress proxy (the URL policy)",
                        Network::None => "none",
                        Network::Host => "unconfined (host)",
                    }
                );
                text.retain(|c| !c.is_control());
                text
            }
        }
    }
}

fn paths_of(value: &serde_yaml::Value) -> Option<Vec<String>> {
    value
        .as_sequence()?
        .iter()
        .map(|v| {
            let s = v.as_str()?;
            (!s.trim().is_empty() && !s.contains('\0')).then(|| s.to_string())
        })
        .collect()
}

/// The kind of refused access that lines of a server's stderr report, if any: what a
/// process refused by Landlock (`EACCES`), seccomp (`EPERM`, `EACCES` for sockets) or
/// a read-only mount (`EROFS`) usually prints. Only the kind is returned, never the
/// server's words.
pub fn refusal_reported(lines: &[String]) -> Option<&'static str> {
    const KINDS: &[(&str, &str)] = &[
        ("permission denied", "permission_denied"),
        ("eacces", "permission_denied"),
        ("operation not permitted", "operation_not_permitted"),
        ("eperm", "operation_not_permitted"),
        ("read-only file system", "read_only"),
        ("erofs", "read_only"),
    ];
    // An errno name counts as a word of its own (`EACCES:`), not inside another.
    let says = |line: &str, words: &str| {
        line.match_indices(words).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + words.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
        })
    };
    lines.iter().find_map(|line| {
        let line = line.to_lowercase();
        KINDS
            .iter()
            .find(|(words, _)| says(&line, words))
            .map(|(_, kind)| *kind)
    })
}

/// Why a confined server cannot start on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sandbox cannot be applied on this host: {0}; the server was not started (declare `sandbox: off`, reviewed, to run it unconfined)"
)]
pub struct Unavailable(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Sandbox, (String, String)> {
        Sandbox::parse(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn refusals_reported_on_stderr_are_told_by_kind_only() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (said, kind) in [
            (
                "Error: EACCES: permission denied, open '/home/x/.cache/y'",
                "permission_denied",
            ),
            (
                "PermissionError: [Errno 13] Permission denied: '/srv/data'",
                "permission_denied",
            ),
            ("bind: Operation not permitted", "operation_not_permitted"),
            (
                "Error: EPERM: operation not permitted, mkdir",
                "operation_not_permitted",
            ),
            ("OSError: [Errno 30] Read-only file system", "read_only"),
        ] {
            assert_eq!(refusal_reported(&lines(&["starting", said])), Some(kind));
        }
        for quiet in [
            &[][..],
            &["listening on stdio"],
            &["Error: ENOENT: no such file"],
        ] {
            assert_eq!(refusal_reported(&lines(quiet)), None);
        }
    }

    #[test]
    fn declarations_parse_and_bad_ones_name_the_field() {
        assert_eq!(parse("off").unwrap(), Sandbox::Off);
        assert_eq!(
            parse("{network: none}").unwrap(),
            Sandbox::Confined {
                write: vec![".".into()],
                read: vec![],
                deny: vec![],
                network: Network::None
            }
        );
        assert_eq!(
            parse("{filesystem: {write: [data], read: [/opt/models]}}").unwrap(),
            Sandbox::Confined {
                write: vec!["data".into()],
                read: vec!["/opt/models".into()],
                deny: vec![],
                network: Network::Proxy
            }
        );
        for (yaml, field) in [
            ("on", "sandbox"),
            ("{network: everything}", "sandbox.network"),
            ("{filesystem: {deny: x}}", "sandbox.filesystem.deny"),
            ("{filesystem: {hide: [x]}}", "sandbox.filesystem"),
            ("{filesystem: {write: data}}", "sandbox.filesystem.write"),
            ("{filesystem: {write: [\"\"]}}", "sandbox.filesystem.write"),
            ("{extra: 1}", "sandbox"),
        ] {
            assert_eq!(parse(yaml).unwrap_err().0, field, "{yaml}");
        }
    }
}
