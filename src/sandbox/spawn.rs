//! The runtime's side of a confined start: the launcher is spawned in place of the
//! server (`launcher.rs`), handed its rules over a private socket, and the start
//! succeeds only once it answered that every rule is in force.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{UnixListener, UnixStream};

use super::launcher::ARGUMENT;
use super::{Rules, Unavailable};

/// How long the launcher may take to connect and confine itself.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A confined start: the launcher to run, and the rules it applies.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The runtime's binary acting as the launcher ([`launcher_path`]).
    pub launcher: PathBuf,
    /// What it applies.
    pub rules: Rules,
}

/// Where this process's launcher is: the small `demiurge-sandbox` beside this binary
/// (or, for a test binary in `target/*/deps`, one directory up), else this binary when
/// it is `demiurge`, else a `demiurge` found the same way. A found binary is taken
/// only when nobody else could have put it there: it and its directory belong to this
/// user or root and nobody else may write them (the launcher is handed the server's
/// environment, secrets included). A host that embeds the runtime ships
/// `demiurge-sandbox`, or calls [`super::launcher::run_if_invoked`] first in its own
/// `main` and sets `RuntimeConfig::sandbox_launcher` to its binary.
pub fn launcher_path() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    let dir = me.parent()?;
    let up = dir
        .file_name()
        .is_some_and(|n| n == "deps")
        .then(|| dir.parent())
        .flatten();
    let near = |name: &str| {
        [Some(dir.join(name)), up.map(|up| up.join(name))]
            .into_iter()
            .flatten()
            .find(|p| trusted(p))
    };
    near("demiurge-sandbox")
        .or_else(|| {
            me.file_name()
                .is_some_and(|n| n == "demiurge")
                .then(|| me.clone())
        })
        .or_else(|| near("demiurge"))
}

/// A regular file that it and its directory belong to this user or root, and that
/// nobody else may write (nor replace in its directory). Group write is taken only
/// for this user's own group (a umask of 002 with a group per user).
fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (me, group) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    let owned = |m: &std::fs::Metadata| {
        let writers = if m.gid() == group && m.uid() == me {
            0o002
        } else {
            0o022
        };
        (m.uid() == me || m.uid() == 0) && m.mode() & writers == 0
    };
    let file = std::fs::symlink_metadata(path);
    let dir = path.parent().map(std::fs::metadata);
    matches!(file, Ok(f) if f.is_file() && owned(&f)) && matches!(dir, Some(Ok(d)) if owned(&d))
}

/// Spawns `program` with `args` and exactly `env` through the launcher of
/// `confinement`; `configure` sets the rest of the command (cwd, stdio, process group), and
/// `spawned` hears the pid at once (the launcher becomes the server: same pid), before
/// the handshake. Returns the child once it is confined and the server's program was
/// executed, and the egress proxy's listener for `network: proxy`.
///
/// # Errors
/// [`Unavailable`] (as an `Unsupported` IO error) when the launcher could not apply
/// the rules, or the spawn's error.
pub(crate) async fn spawn(
    confinement: &Confinement,
    program: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    configure: impl FnOnce(&mut tokio::process::Command),
    spawned: impl FnOnce(u32),
) -> std::io::Result<(tokio::process::Child, Option<std::net::TcpListener>)> {
    let unavailable = |message: String| {
        std::io::Error::new(std::io::ErrorKind::Unsupported, Unavailable(message))
    };
    let name = format!("demiurge-sandbox-{}-{}", std::process::id(), nonce()?);
    let listener = std::os::unix::net::UnixListener::bind_addr(&SocketAddr::from_abstract_name(
        name.as_bytes(),
    )?)?;
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let mut command = tokio::process::Command::new(&confinement.launcher);
    command
        .arg(ARGUMENT)
        .arg(&name)
        .arg(super::launcher::Spaces::of(&confinement.rules).to_string())
        .arg("--")
        .arg(OsStr::new(program))
        .args(args);
    configure(&mut command);
    // The environment goes over the socket, applied at `exec`: the launcher runs with
    // none (a declared `LD_PRELOAD` must not act before the rules do).
    command.env_clear();
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut child = command.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && !Path::new(&confinement.launcher).exists() {
            unavailable(
                "the sandbox launcher (`demiurge-sandbox` or `demiurge`) is not where it was expected"
                    .into(),
            )
        } else {
            e
        }
    })?;
    let pid = child.id();
    if let Some(pid) = pid {
        spawned(pid);
    }
    let handshake = async {
        // Only the process just spawned may take the rules (the name is not secret):
        // another that connects first is dropped, and the wait goes on. A launcher that
        // dies before it connects is told by its status; after, by end of file.
        let mut stream = loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                // Not `wait()`: it closes the child's stdin.
                status = exited(&mut child) => {
                    return Err(std::io::Error::other(format!(
                        "it exited before confining the server ({status})"
                    )));
                }
            };
            let peer = stream.peer_cred()?.pid();
            if peer.is_some() && peer.map(|p| p as u32) == pid {
                break stream;
            }
        };
        let message = super::launcher::Message {
            protocol: super::launcher::PROTOCOL,
            rules: confinement.rules.clone(),
            env,
        };
        let rules = serde_json::to_vec(&message).map_err(std::io::Error::other)?;
        let length = u32::try_from(rules.len()).map_err(std::io::Error::other)?;
        let sent = async {
            stream.write_all(&length.to_be_bytes()).await?;
            stream.write_all(&rules).await
        }
        .await;
        // A launcher that could not take its namespaces answers before it reads the
        // rules, and is gone: its error, not the broken pipe, says why. Nothing else
        // is taken from a launcher that did not read its rules.
        if let Err(e) = sent {
            return match receive(&mut stream).await {
                Ok((text, _)) if text.starts_with("error ") => {
                    Ok((text.trim_end().to_string(), None))
                }
                _ => Err(e),
            };
        }
        // Lines: the answer, then (after `ok`) why `exec` failed, or end of file (the
        // launcher's socket closes on `exec`). Both may come in one read.
        let (mut text, listener) = receive(&mut stream).await?;
        if !text.contains('\n') {
            return Ok((text, listener));
        }
        if text.trim_end_matches('\n') == "ok" {
            match receive(&mut stream).await {
                Ok((more, _)) => text.push_str(&more),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => return Err(e),
            }
        }
        let mut lines = text.lines();
        let answer = lines.next().unwrap_or_default().to_string();
        if let Some(failed) = lines.next().and_then(|l| l.strip_prefix("exec ")) {
            let code = failed.parse::<i32>().unwrap_or(libc::ENOEXEC);
            return Err(std::io::Error::from_raw_os_error(code));
        }
        Ok((answer, listener))
    };
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await;
    let (text, listener) = match answer {
        Ok(Ok(answer)) => answer,
        // The server's program could not be executed: the spawn's own error.
        Ok(Err(e)) if e.raw_os_error().is_some() => return Err(e),
        Ok(Err(e)) => return Err(unavailable(format!("the sandbox launcher failed ({e})"))),
        Err(_) => {
            return Err(unavailable(
                "the sandbox launcher did not answer in time".into(),
            ));
        }
    };
    if text == "ok" {
        return Ok((child, listener));
    }
    let reason = text
        .strip_prefix("error ")
        .unwrap_or("an unreadable answer")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    Err(unavailable(reason))
}

/// The exit status of `child`, once it has one.
async fn exited(child: &mut tokio::process::Child) -> String {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => return e.to_string(),
        }
    }
}

/// The launcher's one answer, and the listener it may carry.
async fn receive(
    stream: &mut UnixStream,
) -> std::io::Result<(String, Option<std::net::TcpListener>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    loop {
        stream.readable().await?;
        let mut body = [0u8; 4096];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = stream.try_io(Interest::READABLE, || {
            recvmsg(
                &*stream,
                &mut [std::io::IoSliceMut::new(&mut body)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)
        });
        let received = match received {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        if received.bytes == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the launcher closed without answering",
            ));
        }
        let mut listener = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for fd in fds {
                    listener.get_or_insert(std::net::TcpListener::from(fd));
                }
            }
        }
        let text = String::from_utf8_lossy(&body[..received.bytes]).into_owned();
        return Ok((text, listener));
    }
}

/// Sixteen hex digits from the kernel's random source.
fn nonce() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_launcher_is_taken_only_where_nobody_else_could_have_put_it() {
        let dir = tempfile::tempdir().unwrap();
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        set(dir.path(), 0o755);
        let launcher = dir.path().join("demiurge-sandbox");
        std::fs::write(&launcher, "").unwrap();
        set(&launcher, 0o755);
        assert!(trusted(&launcher));
        // Writable by others: the file, or the directory it could be replaced in.
        // Group write of this user's own group is its own.
        set(&launcher, 0o757);
        assert!(!trusted(&launcher));
        set(&launcher, 0o775);
        assert!(trusted(&launcher), "its own group");
        set(&launcher, 0o755);
        for mode in [0o777, 0o1777] {
            set(dir.path(), mode);
            assert!(!trusted(&launcher), "directory {mode:o}");
        }
        set(dir.path(), 0o755);
        // Not a regular file: a link (to a trusted file) or a directory.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&launcher, &link).unwrap();
        assert!(!trusted(&link));
        assert!(!trusted(dir.path()));
        assert!(!trusted(&dir.path().join("absent")));
        // Another user's, or group-writable by another group.
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&launcher, None, Some(65534)).unwrap();
            set(&launcher, 0o775);
            assert!(!trusted(&launcher), "another group may write it");
            set(&launcher, 0o755);
            std::os::unix::fs::chown(&launcher, Some(65534), None).unwrap();
            assert!(!trusted(&launcher));
        }
    }
}
