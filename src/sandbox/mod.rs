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

use std::path::{Path, PathBuf};

use serde::Serialize;

pub mod egress;
pub mod launcher;
mod spawn;

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

/// The paths of one confined launch, resolved: what the launcher applies before it
/// becomes the server, beyond what every confined server gets (the system, `/etc`
/// without its secrets, the harmless devices), which the launcher adds itself, ahead
/// of any server ([`Prepared::base`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Readable (and executable) trees.
    pub read: Vec<PathBuf>,
    /// Writable trees (also readable).
    pub write: Vec<PathBuf>,
    /// Existing paths masked from the server (resolved, links followed).
    #[serde(default)]
    pub deny: Vec<PathBuf>,
    /// Its network.
    pub network: Network,
}

/// Where the operator keeps credentials, relative to their home: a tree found for a
/// program (`~/.cargo` above `~/.cargo/bin`) that holds one is never made readable.
pub const SECRET_STORES: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".npmrc",
    ".pypirc",
    ".local/share/keyrings",
    ".password-store",
    ".vault-token",
    ".terraform.d",
    ".config/op",
    ".demiurge",
];

/// Trees every program may read: the system.
const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
    "/snap",
    "/proc",
    "/sys",
    "/run/systemd/resolve",
];

/// Device files a program may read and write. Not the terminal (`/dev/tty`,
/// `/dev/pts`: a server's stdio is pipes, and a terminal would let it type into the
/// operator's shell), not `/dev/shm` (shared memory of the operator's other programs).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/fd",
];

impl Rules {
    /// The rules of `sandbox` for a server started as `command` with `args`, in
    /// `workspace`, with its own `home` and `tmp`, and the host's `path` (the
    /// allowlisted `PATH`, for finding the command and its interpreter). For an
    /// interpreter (`node /x/node_modules/pkg/dist/index.js`), the package its first
    /// absolute file argument (as declared, never interpolated) lies in is readable,
    /// when that is an installed package (under `node_modules` or `site-packages`):
    /// arguments are hashes in a preview, so they may not widen more than that.
    /// A tree found this way that holds any of `protected` (the operator's home, the
    /// runtime home) is left out: `~/bin/tool` does not open `~`.
    #[allow(clippy::too_many_arguments)]
    pub fn of(
        sandbox: &Sandbox,
        command: &str,
        args: &[String],
        workspace: &Path,
        home: &Path,
        tmp: &Path,
        path: Option<&str>,
        protected: &[PathBuf],
    ) -> Result<Option<Rules>, Unavailable> {
        let Sandbox::Confined {
            write,
            read,
            deny,
            network,
        } = sandbox
        else {
            return Ok(None);
        };
        // A relative tree is the workspace's: resolved (links followed) it must stay
        // inside, or a link the server (or the core) planted would move it.
        let real_workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let inside = |field: &str, p: &String| -> Result<PathBuf, Unavailable> {
            let declared = Path::new(p);
            if declared.is_absolute() {
                return Ok(declared.to_path_buf());
            }
            let joined = workspace.join(declared);
            match joined.canonicalize() {
                Ok(real) if real.starts_with(&real_workspace) => Ok(real),
                Ok(_) => Err(Unavailable(format!(
                    "sandbox.filesystem.{field} names a path that resolves outside the workspace (a link)"
                ))),
                // Not there yet: nothing to allow.
                Err(_) => Ok(joined),
            }
        };
        let mut readable = vec![workspace.to_path_buf()];
        for p in read {
            readable.push(inside("read", p)?);
        }
        let mut writable = Vec::new();
        for p in write {
            writable.push(inside("write", p)?);
        }
        let mut found = program_trees(command, path);
        if is_interpreter(command)
            && let Some(script) = args
                .iter()
                .find(|a| Path::new(a).is_absolute() && Path::new(a).is_file())
        {
            found.extend(package_root(Path::new(script)));
        }
        // A found tree that holds, or lies in, a protected one is left out. Each
        // protected path resolved once (most do not exist: that is cheap).
        let protected: Vec<PathBuf> = protected
            .iter()
            .filter(|p| !p.as_os_str().is_empty())
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        found.sort();
        found.dedup();
        found.retain(|tree| {
            let resolved = tree.canonicalize().unwrap_or_else(|_| tree.clone());
            !protected.iter().any(|p| {
                p.starts_with(tree)
                    || p.starts_with(&resolved)
                    || tree.starts_with(p)
                    || resolved.starts_with(p)
            })
        });
        readable.extend(found);
        // What exists now is masked; a path that does not exist hides nothing (a file
        // the server makes there later is its own).
        let hidden = deny
            .iter()
            .filter_map(|p| {
                let declared = Path::new(p);
                let path = if declared.is_absolute() {
                    declared.to_path_buf()
                } else {
                    workspace.join(declared)
                };
                path.canonicalize().ok()
            })
            .collect();
        writable.extend([home.to_path_buf(), tmp.to_path_buf()]);
        Ok(Some(Rules {
            read: readable,
            write: writable,
            deny: hidden,
            network: *network,
        }))
    }
}

/// The entries of `root` but those named in `hidden` (relative paths; a nested one,
/// `ssl/private`, opens its parent entry by entry). Read by each launcher: what is
/// made later is not readable.
fn all_but(root: &Path, hidden: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk_but(root, hidden, &mut |_| {}, &mut |entry| {
        out.push(entry.path())
    });
    out
}

/// Visits what [`all_but`] lists: `on_dir` for `root` and each directory opened entry
/// by entry, `on_entry` for each entry listed.
fn walk_but(
    root: &Path,
    hidden: &[&str],
    on_dir: &mut impl FnMut(&Path),
    on_entry: &mut impl FnMut(&std::fs::DirEntry),
) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    on_dir(root);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if hidden.contains(&name) {
            continue;
        }
        let below: Vec<&str> = hidden
            .iter()
            .filter_map(|h| h.strip_prefix(name)?.strip_prefix('/'))
            .collect();
        if below.is_empty() {
            on_entry(&entry);
        } else {
            walk_but(&entry.path(), &below, on_dir, on_entry);
        }
    }
}

/// A stamp of what the rules every server gets were made from: the directories of
/// `/etc` opened entry by entry (their modification times change when an entry is
/// added, removed or replaced by a rename, as `ldconfig`, `useradd` and editors do)
/// and where each link among the entries leads (`/etc/resolv.conf` into `/run`). A
/// Landlock rule holds the file it was opened on: a launcher made before the stamp
/// changed would refuse its server what the system now reads, and is not used.
pub(crate) fn base_stamp() -> u64 {
    stamp_of(Path::new("/etc"), ETC_SECRETS)
}

/// [`base_stamp`] of `root` opened but for `hidden`.
fn stamp_of(root: &Path, hidden: &[&str]) -> u64 {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut mark = |m: std::io::Result<std::fs::Metadata>| match m {
        Ok(m) => (m.dev(), m.ino(), m.mtime(), m.mtime_nsec()).hash(&mut hasher),
        Err(_) => 0u8.hash(&mut hasher),
    };
    let (mut dirs, mut links) = (Vec::new(), Vec::new());
    walk_but(
        root,
        hidden,
        &mut |dir| dirs.push(dir.to_path_buf()),
        &mut |entry| {
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                links.push(entry.path());
            }
        },
    );
    for path in dirs.into_iter().chain(links) {
        mark(std::fs::metadata(path));
    }
    hasher.finish()
}

/// What the rules every server gets are, as a launcher applies them (the system
/// trees, `/etc`'s secrets, the devices, the refused calls) and the message's
/// protocol: a launcher of another build, which would apply its own lists, refuses to
/// start when the runtime's digest differs from its own.
pub(crate) fn policy_digest() -> &'static str {
    static DIGEST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIGEST.get_or_init(|| {
        let policy = format!(
            "{}|{SYSTEM:?}|{ETC_SECRETS:?}|{DEVICES:?}|{REFUSED:?}|{ON_OTHERS:?}|{NAMESPACES:?}",
            launcher::PROTOCOL
        );
        crate::digest::sha256_hex(policy.as_bytes())[..16].to_string()
    })
}

/// The trees a program needs beyond the system: where its file is (links followed),
/// the install prefix when it lives in a `bin` directory (a venv, nvm, pyenv), the
/// package root above a `node_modules`, and the same for the interpreter its `#!` line
/// names.
fn program_trees(command: &str, path: Option<&str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Some(found) = locate(command, path) else {
        return out;
    };
    let mut add = |file: &Path| {
        for p in [file.to_path_buf(), file.canonicalize().unwrap_or_default()] {
            let Some(dir) = p.parent() else { continue };
            out.push(dir.to_path_buf());
            if dir.file_name().is_some_and(|n| n == "bin")
                && let Some(prefix) = dir.parent()
            {
                out.push(prefix.to_path_buf());
            }
            if let Some(root) = p
                .ancestors()
                .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
                .and_then(Path::parent)
            {
                out.push(root.to_path_buf());
            }
        }
    };
    add(&found);
    if let Some((interpreter, argument)) = shebang(&found) {
        // `#!/usr/bin/env node`: the program env finds on PATH, a bare name only.
        let program = if interpreter.ends_with("/env") {
            argument
                .filter(|name| !name.contains('/'))
                .and_then(|name| locate(&name, path))
        } else {
            Some(PathBuf::from(&interpreter))
        };
        if let Some(program) = program.filter(|p| is_executable(p)) {
            add(&program);
        }
    }
    out.retain(|p| !p.as_os_str().is_empty() && p != Path::new("/"));
    out
}

/// The installation a script belongs to: the directory above its `node_modules`, or
/// its `site-packages`; `None` for a script anywhere else.
fn package_root(script: &Path) -> Option<PathBuf> {
    let canonical = script.canonicalize().ok()?;
    [script, canonical.as_path()].iter().find_map(|p| {
        p.ancestors().find_map(|a| match a.file_name()?.to_str()? {
            "node_modules" => a.parent().map(Path::to_path_buf),
            "site-packages" => Some(a.to_path_buf()),
            _ => None,
        })
    })
}

/// Whether `command` runs a script named by an argument.
fn is_interpreter(command: &str) -> bool {
    let name = Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        base,
        "node" | "nodejs" | "python" | "deno" | "bun" | "ruby" | "perl" | "php" | "sh" | "bash"
    )
}

/// `command` as the spawn finds it: an absolute path as is, a name on `path`. A
/// relative path (`./server.sh`) is the child's cwd's, inside the workspace, which is
/// readable already: nothing to find (and the runtime's own cwd would be the wrong
/// place to look).
fn locate(command: &str, path: Option<&str>) -> Option<PathBuf> {
    if command.contains('/') {
        return Path::new(command)
            .is_absolute()
            .then(|| PathBuf::from(command));
    }
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| p.is_file())
}

/// The interpreter a script's `#!` line names, split as the kernel splits it (space
/// and tab only): the interpreter, and its one argument. Only a regular file is read
/// (a FIFO would hang the reader), and only its first 256 bytes.
fn shebang(file: &Path) -> Option<(String, Option<String>)> {
    use std::io::Read;
    if !std::fs::metadata(file).ok()?.is_file() {
        return None;
    }
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let head = std::str::from_utf8(&head[..n]).ok()?;
    let line = head.strip_prefix("#!")?.split('\n').next()?;
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let interpreter = words.next()?.to_string();
    Some((interpreter, words.next().map(str::to_string)))
}

/// Whether `path` is an existing executable regular file.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Rules made into a Landlock ruleset and seccomp programs, ready to be applied.
pub struct Prepared {
    ruleset: Option<landlock::RulesetCreated>,
    /// The seccomp programs not yet in force.
    filters: Vec<seccompiler::BpfProgram>,
}

/// Every filesystem right but making device nodes (as root, a block device is raw
/// access to a disk, past every rule here), even where writing is allowed.
fn all_access() -> landlock::BitFlags<landlock::AccessFs> {
    use landlock::{ABI, Access, AccessFs};
    AccessFs::from_all(ABI::V3) & !(AccessFs::MakeBlock | AccessFs::MakeChar)
}

/// What no MCP server needs, refused with `EPERM`: tracing or reading other
/// processes, mounts and namespaces, kernel modules and kexec, BPF, the kernel
/// keyring, performance events, `io_uring` (it performs I/O past this filter), file
/// handles (`open_by_handle_at` escapes a directory tree), `userfaultfd`.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_perf_event_open,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_pidfd_getfd,
    libc::SYS_process_madvise,
    libc::SYS_kcmp,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_mount_setattr,
    // Ownership and extended attributes by path: Landlock does not check them, and a
    // server could name the operator's files anywhere.
    libc::SYS_chown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
];

/// Calls refused when they aim at another process (their first argument, a pid, is
/// not 0: the caller itself): limits, priorities and scheduling of the runtime, its
/// reaper or the operator's programs, which the kernel allows the same user.
const ON_OTHERS: &[libc::c_long] = &[
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setattr,
    libc::SYS_migrate_pages,
    libc::SYS_move_pages,
];

/// Trees under `/etc` no server reads: password hashes, the host's SSH keys, VPN and
/// network secrets, sudo rules, TLS private keys.
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "ssh",
    "sudoers",
    "sudoers.d",
    "wireguard",
    "NetworkManager/system-connections",
    "ssl/private",
    "security/opasswd",
    "krb5.keytab",
];

/// The namespace flags `clone` may not carry.
const NAMESPACES: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// The seccomp programs of `rules`: the refused calls and namespace clones with
/// `EPERM`, raw and packet sockets (and with `network: none` every IP socket) with
/// `EACCES`, and `clone3` with `ENOSYS` (its flags cannot be inspected; C libraries
/// then fall back to `clone`).
fn filters(network: Network) -> Result<Vec<seccompiler::BpfProgram>, seccompiler::BackendError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as When,
        SeccompFilter, SeccompRule,
    };
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
    let on = |index: u8, op: Op, value: u64| When::new(index, Len::Dword, op, value);
    let mut refused: std::collections::BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|&call| (call, Vec::new())).collect();
    for &call in ON_OTHERS {
        refused.insert(call, vec![SeccompRule::new(vec![on(0, Op::Ne, 0)?])?]);
    }
    // `setpriority`/`ioprio_set(which, who, ...)`: another process when `who` is not 0.
    for call in [libc::SYS_setpriority, libc::SYS_ioprio_set] {
        refused.insert(call, vec![SeccompRule::new(vec![on(1, Op::Ne, 0)?])?]);
    }
    // `prlimit64(pid, resource, new, old)`: setting (new not NULL) another's limits.
    refused.insert(
        libc::SYS_prlimit64,
        vec![SeccompRule::new(vec![
            on(0, Op::Ne, 0)?,
            When::new(2, Len::Qword, Op::Ne, 0)?,
        ])?],
    );
    let clone_rules = NAMESPACES
        .iter()
        .map(|&flag| {
            let flag = flag as u64;
            SeccompRule::new(vec![on(0, Op::MaskedEq(flag), flag)?])
        })
        .collect::<Result<_, _>>()?;
    refused.insert(libc::SYS_clone, clone_rules);
    // Typing into a terminal (`TIOCSTI`) or driving the console (`TIOCLINUX`), should
    // a terminal descriptor reach the server anyway.
    refused.insert(
        libc::SYS_ioctl,
        [libc::TIOCSTI, libc::TIOCLINUX]
            .iter()
            // `Ioctl` is an unsigned long on some targets and an int on others.
            .map(|&request| {
                #[allow(clippy::unnecessary_cast)]
                let request = request as u64;
                SeccompRule::new(vec![on(1, Op::Eq, request)?])
            })
            .collect::<Result<_, _>>()?,
    );
    let mut sockets = vec![
        // Only IP and netlink: a UNIX socket reached by path is a door to the
        // operator's session (the D-Bus user bus starts programs unconfined, agents
        // sign with the operator's keys; Landlock does not check `connect` to one), and
        // families no network namespace contains (vsock to the hypervisor and this
        // machine, bluetooth, CAN, ...) would reach past the proxy. `socketpair` stays.
        SeccompRule::new(vec![
            on(0, Op::Ne, libc::AF_INET as u64)?,
            on(0, Op::Ne, libc::AF_INET6 as u64)?,
            on(0, Op::Ne, libc::AF_NETLINK as u64)?,
        ])?,
        SeccompRule::new(vec![
            on(0, Op::Eq, libc::AF_INET as u64)?,
            on(1, Op::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
        ])?,
        SeccompRule::new(vec![
            on(0, Op::Eq, libc::AF_INET6 as u64)?,
            on(1, Op::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
        ])?,
    ];
    if network == Network::None {
        // No family at all (vsock, netlink, bluetooth as much as IP).
        sockets = Vec::new();
    }
    let program =
        |rules, errno: i32| -> Result<seccompiler::BpfProgram, seccompiler::BackendError> {
            SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(errno as u32),
                arch,
            )?
            .try_into()
        };
    let mut first = program(refused, libc::EPERM)?;
    if cfg!(target_arch = "x86_64") {
        // The x32 ABI numbers every call with bit 30 set, which the filters' exact
        // numbers would not match: refuse it outright.
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        let load_nr = seccompiler::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        }; // ld [nr]
        let if_x32 = seccompiler::sock_filter {
            code: 0x35,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        }; // jge
        let refuse = seccompiler::sock_filter {
            code: 0x06, // ret
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | libc::EPERM as u32, // SECCOMP_RET_ERRNO
        };
        first.splice(0..0, [load_nr, if_x32, refuse]);
    }
    Ok(vec![
        first,
        program(
            [(libc::SYS_socket, sockets)].into_iter().collect(),
            libc::EACCES,
        )?,
        program(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            libc::ENOSYS,
        )?,
    ])
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").finish_non_exhaustive()
    }
}

/// Why a confined server cannot start on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sandbox cannot be applied on this host: {0}; the server was not started (declare `sandbox: off`, reviewed, to run it unconfined)"
)]
pub struct Unavailable(pub String);

impl Prepared {
    /// Starts the ruleset of a server whose network is `network` with what every
    /// confined server reads (the system, `/etc` without its secrets) and the devices
    /// it may use: the part a launcher builds before it knows its server (Landlock ABI
    /// 3 for files, 4 for the network).
    ///
    /// # Errors
    /// [`Unavailable`] when the kernel lacks what the rules need.
    pub fn base(network: Network) -> Result<Prepared, Unavailable> {
        use landlock::{
            ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        };
        let unavailable =
            |what: &str, e: &dyn std::fmt::Display| Unavailable(format!("{what} ({e})"));
        let abi = ABI::V3;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(all_access())
            .map_err(|e| unavailable("Landlock ABI 3 (filesystem rules) is missing", &e))?;
        if network == Network::None {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(ABI::V4))
                .map_err(|e| unavailable("Landlock ABI 4 (network rules) is missing", &e))?;
        }
        // Signals to, and abstract UNIX sockets of, processes outside the sandbox
        // (the runtime, other servers): enforced where the kernel has them (ABI 6).
        let ruleset = ruleset
            .set_compatibility(CompatLevel::BestEffort)
            .scope(landlock::Scope::from_all(ABI::V6))
            .map_err(|e| unavailable("a Landlock scope was refused", &e))?;
        let created = ruleset
            .create()
            .map_err(|e| unavailable("Landlock is not enabled", &e))?
            .set_compatibility(CompatLevel::BestEffort);
        let filters = filters(network)
            .map_err(|e| unavailable("the system-call filter cannot be built", &e))?;
        let mut prepared = Prepared {
            ruleset: Some(created),
            filters,
        };
        let read = AccessFs::from_read(abi);
        let system = SYSTEM
            .iter()
            .map(PathBuf::from)
            .chain(all_but(Path::new("/etc"), ETC_SECRETS));
        prepared.allow(system.map(|p| (p, read)))?;
        prepared.allow(DEVICES.iter().map(|p| (PathBuf::from(p), all_access())))?;
        Ok(prepared)
    }

    /// Adds the trees of one server to the base.
    ///
    /// # Errors
    /// [`Unavailable`] when a rule was refused.
    pub fn add(&mut self, rules: &Rules) -> Result<(), Unavailable> {
        let read = landlock::AccessFs::from_read(landlock::ABI::V3);
        let trees = rules.read.iter().map(|p| (p.clone(), read));
        self.allow(trees.chain(rules.write.iter().map(|p| (p.clone(), all_access()))))
    }

    /// Allows each `(path, access)`: a path this host does not have (`/lib32`,
    /// `/snap`) needs no rule; a file (`/dev/null`) takes only the file rights of the
    /// access.
    fn allow(
        &mut self,
        trees: impl Iterator<Item = (PathBuf, landlock::BitFlags<landlock::AccessFs>)>,
    ) -> Result<(), Unavailable> {
        use landlock::{ABI, AccessFs, PathBeneath, PathFd, RulesetCreatedAttr};
        let mut created = self
            .ruleset
            .take()
            .ok_or_else(|| Unavailable("the sandbox was applied twice".into()))?;
        for (path, access) in trees {
            let Ok(fd) = PathFd::new(&path) else { continue };
            // Asked of the descriptor: the path is not walked again.
            let is_dir = rustix::fs::fstat(&fd)
                .is_ok_and(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_dir());
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(ABI::V3)
            };
            created = created
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| Unavailable(format!("a filesystem rule was refused ({e})")))?;
        }
        self.ruleset = Some(created);
        Ok(())
    }

    /// Puts the seccomp filters (and `no_new_privs`) in force on the calling thread
    /// now, before the Landlock ruleset: what a launcher that needs no mount (no
    /// `deny:`) does while it waits for its server, since the kernel takes a quarter
    /// of a millisecond to install the filters.
    ///
    /// # Errors
    /// When a filter could not be installed.
    pub(crate) fn filter_now(&mut self) -> std::io::Result<()> {
        for filter in std::mem::take(&mut self.filters) {
            seccompiler::apply_filter(&filter)
                .map_err(|e| std::io::Error::other(format!("the system-call filter: {e}")))?;
        }
        Ok(())
    }

    /// Applies the rules to the calling thread: `no_new_privs`, the Landlock ruleset
    /// and the seccomp filters not yet in force. All three are per thread, kept across
    /// `exec`.
    ///
    /// # Errors
    /// When the rules could not be fully enforced.
    pub(crate) fn apply(&mut self) -> std::io::Result<()> {
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| std::io::Error::other("the sandbox was applied twice"))?;
        match ruleset.restrict_self() {
            Ok(status)
                if status.ruleset == landlock::RulesetStatus::FullyEnforced
                    && status.no_new_privs => {}
            Ok(_) => return Err(std::io::Error::other("the sandbox was not fully enforced")),
            Err(_) => return Err(std::io::Error::other("the sandbox could not be applied")),
        }
        self.filter_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Sandbox, (String, String)> {
        Sandbox::parse(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn found_trees_never_open_the_operators_home() {
        let home = tempfile::tempdir().unwrap();
        let bin = home.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("tool"), "#!/bin/sh\n").unwrap();
        let protected: Vec<PathBuf> = SECRET_STORES.iter().map(|s| home.path().join(s)).collect();
        let rules = |command: &Path| {
            Rules::of(
                &parse("{network: host}").unwrap(),
                &command.display().to_string(),
                &[],
                Path::new("/nonexistent-workspace"),
                Path::new("/h"),
                Path::new("/t"),
                Some("/usr/bin:/bin"),
                &protected,
            )
            .unwrap()
            .unwrap()
        };
        // `~/bin/tool` opens `~/bin` (the command is there), not `~` (it holds `.ssh`).
        std::fs::create_dir_all(home.path().join(".ssh")).unwrap();
        let found = rules(&bin.join("tool"));
        assert!(
            found.read.iter().any(|p| p.ends_with("bin")),
            "{:?}",
            found.read
        );
        assert!(
            !found.read.iter().any(|p| p == home.path()),
            "{:?}",
            found.read
        );
        // `~/.cargo/bin/x` opens `~/.cargo/bin`, not `~/.cargo` (its credentials).
        let cargo = home.path().join(".cargo/bin");
        std::fs::create_dir_all(&cargo).unwrap();
        std::fs::write(cargo.join("x"), "").unwrap();
        let found = rules(&cargo.join("x"));
        assert!(found.read.iter().any(|p| p == &cargo), "{:?}", found.read);
        assert!(
            !found.read.iter().any(|p| p == &home.path().join(".cargo")),
            "{:?}",
            found.read
        );
        // A `#!` line naming a program inside a secret store opens nothing there.
        let ssh = home.path().join(".ssh");
        std::fs::write(ssh.join("evil"), "").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(ssh.join("evil"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            bin.join("script"),
            format!("#!{}\n", ssh.join("evil").display()),
        )
        .unwrap();
        let found = rules(&bin.join("script"));
        assert!(
            !found.read.iter().any(|p| p.starts_with(&ssh)),
            "{:?}",
            found.read
        );
        // A script argument outside an installed package opens nothing.
        let secret = home.path().join(".ssh");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("id"), "x").unwrap();
        assert_eq!(package_root(&secret.join("id")), None);
        let installed = home.path().join("lib/node_modules/pkg/dist");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::write(installed.join("index.js"), "").unwrap();
        assert_eq!(
            package_root(&installed.join("index.js")).unwrap(),
            home.path().join("lib").canonicalize().unwrap()
        );
    }

    #[test]
    fn the_base_stamp_changes_when_an_entry_is_replaced_or_a_link_moves() {
        let etc = tempfile::tempdir().unwrap();
        let root = etc.path();
        let run = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.join("ssl/private")).unwrap();
        std::fs::write(root.join("hosts"), "a").unwrap();
        std::fs::write(run.path().join("resolv"), "a").unwrap();
        std::os::unix::fs::symlink(run.path().join("resolv"), root.join("resolv.conf")).unwrap();
        let hidden = &["ssl/private"][..];
        let stamp = || stamp_of(root, hidden);
        let first = stamp();
        assert_eq!(stamp(), first, "nothing changed");
        // Written in place: the rule still holds the same file.
        std::fs::write(root.join("hosts"), "b").unwrap();
        assert_eq!(stamp(), first);
        let wait = || std::thread::sleep(std::time::Duration::from_millis(20));
        // Replaced by a rename (an editor, `ldconfig`), in /etc or a directory opened
        // entry by entry, or a link's target replaced.
        let mut last = first;
        for change in 0..3 {
            wait();
            match change {
                0 => {
                    std::fs::write(root.join("hosts.new"), "c").unwrap();
                    std::fs::rename(root.join("hosts.new"), root.join("hosts")).unwrap();
                }
                1 => std::fs::write(root.join("ssl/cert.pem"), "c").unwrap(),
                _ => {
                    std::fs::write(run.path().join("resolv.new"), "c").unwrap();
                    std::fs::rename(run.path().join("resolv.new"), run.path().join("resolv"))
                        .unwrap();
                }
            }
            let now = stamp();
            assert_ne!(now, last, "change {change}");
            last = now;
        }
        // What is hidden is not looked at.
        wait();
        std::fs::write(root.join("ssl/private/key"), "k").unwrap();
        assert_eq!(stamp(), last);
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
