//! The paths of a confined start: what every confined server reads (the system,
//! `/etc` without its secrets, the harmless devices), and what one server gets beyond
//! them ([`Rules::of`]: the workspace, its declared trees, where its command and
//! interpreter live, its own home and tmp, the masks of `deny:`), never a tree that
//! holds the operator's credential stores or the runtime home.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Network, Sandbox, Unavailable};

/// The paths of one confined launch, resolved: what the launcher applies before it
/// becomes the server, beyond what every confined server gets (the system, `/etc`
/// without its secrets, the harmless devices), which the launcher adds itself, ahead
/// of any server ([`Prepared::base`](super::confine::Prepared::base)).
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
pub(super) const SYSTEM: &[&str] = &[
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
pub(super) const DEVICES: &[&str] = &[
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
        let mut readable = vec![workspace.to_path_buf()];
        for p in read {
            readable.push(inside(workspace, "read", p)?);
        }
        let mut writable = Vec::new();
        for p in write {
            writable.push(inside(workspace, "write", p)?);
        }
        readable.extend(found_trees(command, args, path, protected));
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

/// A declared tree of `sandbox.filesystem.{field}`: an absolute one as is; a relative
/// one is the workspace's, resolved (links followed), and must stay inside, or a link
/// the server (or the core) planted would move it.
fn inside(workspace: &Path, field: &str, p: &str) -> Result<PathBuf, Unavailable> {
    let declared = Path::new(p);
    if declared.is_absolute() {
        return Ok(declared.to_path_buf());
    }
    let real_workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let joined = workspace.join(declared);
    match joined.canonicalize() {
        Ok(real) if real.starts_with(&real_workspace) => Ok(real),
        Ok(_) => Err(Unavailable(format!(
            "sandbox.filesystem.{field} names a path that resolves outside the workspace (a link)"
        ))),
        // Not there yet: nothing to allow.
        Err(_) => Ok(joined),
    }
}

/// The trees `command` needs (and, for an interpreter, the installed package its first
/// absolute file argument lies in), without any that holds, or lies in, one of
/// `protected`. Each protected path is resolved once (most do not exist: that is
/// cheap).
fn found_trees(
    command: &str,
    args: &[String],
    path: Option<&str>,
    protected: &[PathBuf],
) -> Vec<PathBuf> {
    let mut found = program_trees(command, path);
    if is_interpreter(command)
        && let Some(script) = args
            .iter()
            .find(|a| Path::new(a).is_absolute() && Path::new(a).is_file())
    {
        found.extend(package_root(Path::new(script)));
    }
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
    found
}

/// The entries of `root` but those named in `hidden` (relative paths; a nested one,
/// `ssl/private`, opens its parent entry by entry). Read by each launcher: what is
/// made later is not readable.
pub(super) fn all_but(root: &Path, hidden: &[&str]) -> Vec<PathBuf> {
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

/// Trees under `/etc` no server reads: password hashes, the host's SSH keys, VPN and
/// network secrets, sudo rules, TLS private keys.
pub(super) const ETC_SECRETS: &[&str] = &[
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
}
