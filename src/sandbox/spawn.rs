//! The runtime's side of a confined start: the launcher is spawned in place of the
//! server (`launcher.rs`), handed its rules over a private socket, and the start
//! succeeds only once it answered that every rule is in force.

use std::collections::{HashMap, HashSet};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{UnixListener, UnixStream};

use super::launcher::{ARGUMENT, Spaces};
use super::{Rules, Unavailable};

/// How long the launcher may take to connect and confine itself.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A confined start: the runtime's launchers, and the rules the launcher applies.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// The launchers of this runtime ([`Launchers`]).
    pub launchers: Arc<Launchers>,
    /// What it applies.
    pub rules: Rules,
}

/// The launchers of one runtime: the binary ([`launcher_path`]), and for each kind of
/// namespaces a server started with, one launcher made ahead of the next such start.
/// A made launcher has its namespaces and the rules every server gets (the kernel's
/// part of a confined start, about two thirds of it) and waits, in a process group of
/// its own, with nothing of any server, until a start hands it the server's rules, or
/// until the runtime goes (its socket closes and it exits: whatever ended the runtime).
/// The first start of each kind makes its launcher on the spot.
pub struct Launchers {
    path: PathBuf,
    /// Where launchers wait (the sandbox directory of the runtime home): the
    /// runtime's own, so they can be told from another runtime's.
    dir: PathBuf,
    /// Whether launchers are made ahead at all.
    ahead: bool,
    state: Mutex<Made>,
}

/// What [`Launchers`] holds ahead: at most one launcher per kind of namespaces (six
/// kinds at most), and the kinds being made.
#[derive(Default)]
struct Made {
    ready: HashMap<Spaces, Summoned>,
    making: HashSet<Spaces>,
    closed: bool,
}

impl std::fmt::Debug for Launchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launchers")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Launchers {
    /// The launchers of a runtime whose launcher binary is `path`, started in `dir`
    /// (`/` when it does not exist), made `ahead` of the starts that need them or not.
    pub fn new(path: PathBuf, dir: PathBuf, ahead: bool) -> Arc<Launchers> {
        Arc::new(Launchers {
            path,
            dir,
            ahead,
            state: Mutex::default(),
        })
    }

    /// The launcher binary.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many launchers are made and waiting.
    pub fn waiting(&self) -> usize {
        self.state().ready.len()
    }

    /// The state; a panic elsewhere while it was held leaves it usable (every change
    /// to it is one step).
    fn state(&self) -> std::sync::MutexGuard<'_, Made> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The launcher made for `spaces`, when one is there, alive and not stopped, and
    /// the system it built its rules from is unchanged ([`super::base_stamp`]); one
    /// that is not is killed.
    async fn take(&self, spaces: Spaces) -> Option<Summoned> {
        let mut made = self.state().ready.remove(&spaces)?;
        let running = matches!(made.child.try_wait(), Ok(None)) && !stopped(made.pid);
        if running && made.stamp == super::base_stamp() {
            return Some(made);
        }
        let _ = made.child.kill().await;
        None
    }

    /// Makes a launcher for `spaces` in the background, unless one is there or being
    /// made, or the launchers are closed.
    fn refill(self: &Arc<Self>, spaces: Spaces) {
        if !self.ahead {
            return;
        }
        {
            let mut state = self.state();
            if state.closed || state.ready.contains_key(&spaces) || !state.making.insert(spaces) {
                return;
            }
        }
        let launchers = Arc::downgrade(self);
        let (path, dir) = (self.path.clone(), self.dir.clone());
        tokio::spawn(async move {
            let made = summon(&path, &dir, spaces, |_, _| {}).await;
            let Ok(made) = made else {
                if let Some(launchers) = launchers.upgrade() {
                    launchers.state().making.remove(&spaces);
                }
                return;
            };
            // Gone or closed meanwhile: killed and waited for.
            let rejected = match launchers.upgrade() {
                None => Some(made),
                Some(launchers) => {
                    let mut state = launchers.state();
                    state.making.remove(&spaces);
                    if state.closed {
                        Some(made)
                    } else {
                        state.ready.insert(spaces, made);
                        None
                    }
                }
            };
            if let Some(mut made) = rejected {
                let _ = made.child.kill().await;
            }
        });
    }

    /// Ends every launcher made ahead and makes no more (the runtime is shutting down):
    /// each is killed and waited for; one being made is killed once it is.
    pub async fn close(&self) {
        let made: Vec<Summoned> = {
            let mut state = self.state();
            state.closed = true;
            state.ready.drain().map(|(_, made)| made).collect()
        };
        for mut made in made {
            let _ = made.child.kill().await;
        }
    }
}

/// A launcher spawned and connected: it takes its namespaces and the base rules, then
/// waits for its server's.
struct Summoned {
    child: tokio::process::Child,
    stream: UnixStream,
    pid: u32,
    /// The thread of this process that spawned it (its parent thread).
    spawner: u32,
    /// [`super::base_stamp`] before it was spawned.
    stamp: u64,
}

/// Where this process's launcher is: the small `demiurge-sandbox` beside this binary
/// (or, for a test binary in `target/*/deps`, one directory up; when this binary is
/// `demiurge`, only one not older than it), else this binary when it is `demiurge`,
/// else a `demiurge` found the same way. A found binary is taken
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
    let i_am_demiurge = me.file_name().is_some_and(|n| n == "demiurge");
    // `cargo run` rebuilds only `demiurge`: a `demiurge-sandbox` left older than it
    // may be of another build (it would refuse to start), and `demiurge` is its own
    // launcher anyway.
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    near("demiurge-sandbox")
        .filter(|small| {
            // Built with it (cargo links the two moments apart), or later.
            let built_with = match (modified(small), modified(&me)) {
                (Some(small), Some(me)) => small + Duration::from_secs(60) >= me,
                _ => false,
            };
            !i_am_demiurge || built_with
        })
        .or_else(|| i_am_demiurge.then(|| me.clone()))
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

/// Spawns `program` with `args`, in `cwd`, with exactly `env`, through a launcher of
/// `confinement` (made ahead when there is one, else now), in a process group of its
/// own, stdin and stdout piped, stderr piped; `spawned` hears the pid and the thread
/// that spawned it (the launcher becomes the server: same pid), before the handshake.
/// Returns the child once it is confined and the server's program was executed, and
/// the egress proxy's listener for `network: proxy`.
///
/// # Errors
/// [`Unavailable`] (as an `Unsupported` IO error) when the launcher could not apply
/// the rules, or the spawn's error.
pub(crate) async fn spawn(
    confinement: &Confinement,
    program: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    cwd: &Path,
    spawned: impl FnOnce(u32, u32),
) -> std::io::Result<(tokio::process::Child, Option<std::net::TcpListener>)> {
    let spaces = Spaces::of(&confinement.rules);
    let launchers = &confinement.launchers;
    let message = super::launcher::Message {
        protocol: super::launcher::PROTOCOL,
        rules: confinement.rules.clone(),
        program: PathBuf::from(program),
        args: args.to_vec(),
        cwd: cwd.to_path_buf(),
        env: env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    };
    // A launcher made ahead is recorded once it became the server (until then it
    // carries nothing a sweep looks for); one that answers nothing (killed, broken)
    // is replaced by a new one, once.
    if let Some(made) = launchers.take(spaces).await {
        let (pid, spawner) = (made.pid, made.spawner);
        match hand_over(made, &message, AHEAD_TIMEOUT).await {
            Ok(started) => {
                spawned(pid, spawner);
                return Ok(started);
            }
            Err(NotStarted::Failed(e)) => return Err(e),
            Err(NotStarted::Silent(_)) => {}
        }
    }
    let summoned = summon(&launchers.path, &launchers.dir, spaces, spawned).await?;
    hand_over(summoned, &message, HANDSHAKE_TIMEOUT)
        .await
        .map_err(|(NotStarted::Silent(e) | NotStarted::Failed(e))| e)
}

impl Confinement {
    /// Makes a launcher for the next start of this kind, in the background (call it
    /// once this start is done: a launcher made meanwhile would compete with the
    /// server for the processor).
    pub(crate) fn prepare_next(&self) {
        self.launchers.refill(Spaces::of(&self.rules));
    }
}

fn unavailable(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, Unavailable(message))
}

/// Spawns the launcher at `path` for `spaces` (no environment, in `dir`, stdio piped,
/// a process group of its own; `spawned` hears its pid and its parent thread at once)
/// and waits for it to connect, which only it may do.
async fn summon(
    path: &Path,
    dir: &Path,
    spaces: Spaces,
    spawned: impl FnOnce(u32, u32),
) -> std::io::Result<Summoned> {
    let stamp = super::base_stamp();
    let name = format!("demiurge-sandbox-{}-{}", std::process::id(), nonce()?);
    let listener = std::os::unix::net::UnixListener::bind_addr(&SocketAddr::from_abstract_name(
        name.as_bytes(),
    )?)?;
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let mut command = tokio::process::Command::new(path);
    // The environment goes over the socket, applied at `exec`: the launcher runs with
    // none (a declared `LD_PRELOAD` must not act before the rules do).
    command
        .arg(ARGUMENT)
        .arg(&name)
        .arg(spaces.to_string())
        .arg(super::policy_digest())
        .env_clear()
        .current_dir(if dir.is_dir() { dir } else { Path::new("/") })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && !path.exists() {
            unavailable(
                "the sandbox launcher (`demiurge-sandbox` or `demiurge`) is not where it was expected"
                    .into(),
            )
        } else {
            e
        }
    })?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the launcher exited at once"))?;
    let spawner = nix::unistd::gettid().as_raw() as u32;
    spawned(pid, spawner);
    // Only the process just spawned may take the rules (the name is not secret):
    // another that connects first is dropped, and the wait goes on. A launcher that
    // dies before it connects is told by its status.
    let connected = tokio::time::timeout(HANDSHAKE_TIMEOUT, async {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => accepted?,
                // Not `wait()`: it closes the child's stdin.
                status = exited(&mut child) => {
                    return Err(unavailable(format!(
                        "the sandbox launcher failed (it exited before confining the server ({status}))"
                    )));
                }
            };
            if stream.peer_cred()?.pid() == Some(pid as i32) {
                return Ok(stream);
            }
        }
    })
    .await;
    match connected {
        Ok(Ok(stream)) => Ok(Summoned {
            child,
            stream,
            pid,
            spawner,
            stamp,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(unavailable(
            "the sandbox launcher did not answer in time".into(),
        )),
    }
}

/// What a launcher told of a start.
enum Told {
    /// Its answer (`ok`, or `error ...`), and the proxy's listener it may carry.
    Answer(String, Option<std::net::TcpListener>),
    /// `ok`, then the server's program could not be executed (its errno).
    Exec(i32),
}

/// How long a launcher made ahead, already waiting, has to take a server: one that has
/// not answered by then (stopped, say, just after it was found waiting) is replaced
/// by a new launcher, as one that answers nothing is.
const AHEAD_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a hand-over did not start the server.
enum NotStarted {
    /// The launcher answered nothing (it died, or its socket broke): a launcher made
    /// ahead may be replaced by a new one.
    Silent(std::io::Error),
    /// It answered (or overran its time): the start's own error.
    Failed(std::io::Error),
}

/// Sends `message` to the launcher `summoned` and reads its answer: the child once it
/// is confined and became the server.
async fn hand_over(
    summoned: Summoned,
    message: &super::launcher::Message,
    within: Duration,
) -> Result<(tokio::process::Child, Option<std::net::TcpListener>), NotStarted> {
    let Summoned {
        child, mut stream, ..
    } = summoned;
    let handshake = async {
        let rules = serde_json::to_vec(message).map_err(std::io::Error::other)?;
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
                    Ok(Told::Answer(text.trim_end().to_string(), None))
                }
                _ => Err(e),
            };
        }
        // Lines: the answer, then (after `ok`) why `exec` failed, or end of file (the
        // launcher's socket closes on `exec`). Both may come in one read.
        let (mut text, listener) = receive(&mut stream).await?;
        if text.trim_end_matches('\n') == "ok" && text.ends_with('\n') {
            // Whatever follows is the `exec`'s: end of file, or its failure.
            if let Ok((more, _)) = receive(&mut stream).await {
                text.push_str(&more);
            }
        }
        let mut lines = text.lines();
        let answer = lines.next().unwrap_or_default().to_string();
        if let Some(failed) = lines.next().and_then(|l| l.strip_prefix("exec ")) {
            return Ok(Told::Exec(failed.parse::<i32>().unwrap_or(libc::ENOEXEC)));
        }
        Ok(Told::Answer(answer, listener))
    };
    let told = tokio::time::timeout(within, handshake).await;
    let failed = |reason: String| NotStarted::Failed(unavailable(reason));
    match told {
        Ok(Ok(Told::Answer(text, listener))) if text == "ok" => Ok((child, listener)),
        Ok(Ok(Told::Answer(text, _))) => {
            let reason = text
                .strip_prefix("error ")
                .unwrap_or("an unreadable answer")
                .chars()
                .filter(|c| !c.is_control())
                .collect();
            Err(failed(reason))
        }
        // The server's program could not be executed: the spawn's own error.
        Ok(Ok(Told::Exec(code))) => {
            Err(NotStarted::Failed(std::io::Error::from_raw_os_error(code)))
        }
        Ok(Err(e)) => Err(NotStarted::Silent(unavailable(format!(
            "the sandbox launcher failed ({e})"
        )))),
        // A launcher made ahead that overran its shorter time is replaced (dropping it
        // kills it); a new one that overran the whole handshake is the start's error.
        Err(_) if within < HANDSHAKE_TIMEOUT => Err(NotStarted::Silent(unavailable(
            "the sandbox launcher made ahead did not answer in time".into(),
        ))),
        Err(_) => Err(failed("the sandbox launcher did not answer in time".into())),
    }
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

/// Whether process `pid` is stopped (by a signal, or traced).
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap_or_default();
    let stat = String::from_utf8_lossy(&stat);
    // The state follows the command name, which may hold any bytes but ends at the last
    // `)`.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next());
    matches!(state, Some("T" | "t"))
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
