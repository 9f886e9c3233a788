//! The launcher: the runtime's own binary (or the small `demiurge-sandbox`), started
//! for a confined server, confines itself and then `exec`s the server, so stdin,
//! stdout, stderr, the pid and the process group stay the server's.
//!
//! The runtime and the launcher talk over an abstract UNIX socket whose name is in
//! the launcher's arguments. The runtime accepts one connection, and only from the
//! process it spawned (its pid, by `SO_PEERCRED`), sends the message (the server's
//! rules, program, arguments, working directory and environment), and reads one answer:
//! `ok` (with, for `network: proxy`, the listening socket of the proxy inside the
//! server's network namespace) or the error that kept the rules from being applied.
//! The launcher answers only after every rule is in force, so `ok` means confined.
//!
//! In the launcher, in this order: the connection to the runtime; the runtime's
//! policy digest checked against its own (a launcher of another build would apply
//! other lists); a user and IPC namespace (and, unless `network: host`, a network
//! namespace; with `deny`, a mount namespace) of its own, as its arguments say
//! (`Spaces`); the id maps, and no more tracing by anyone; for `proxy`, the loopback
//! interface up and a listener on [`PROXY_PORT`] there; the rules every server gets:
//! the Landlock ruleset of the system, `/etc` without its secrets and the devices,
//! built but not yet in force, and the seccomp filters with `no_new_privs`, in force
//! (with `deny`, both wait for the masks). All of that needs nothing of the server,
//! so a launcher may be made ahead of its start (`spawn::Launchers`) and wait here.
//! Then the message read, and checked against the namespaces taken; the masks of
//! `deny`; the server's own trees; Landlock in force; the resource limits; the
//! answer; then `exec`. The launcher runs single-threaded (a user namespace needs
//! that), before any async runtime: call [`run_if_invoked`] first in `main`. A
//! launcher whose runtime goes away while it waits reads end of file and exits.
//!
//! Adversary: none inside the launcher (it is the runtime's own code, and it runs before
//! the server's). Bounds: the message at most [`MAX_RULES`] bytes; an answer at most
//! 4 KiB.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use super::{Network, Prepared, Rules};

/// The first argument that makes the runtime's binary the launcher.
pub const ARGUMENT: &str = "__demiurge-sandbox";
/// Where the egress proxy listens inside a server's network namespace (its own
/// loopback: nothing else is there).
pub const PROXY_PORT: u16 = 3128;
/// The version of the message between the runtime and the launcher, which may be
/// separate files of different builds.
pub const PROTOCOL: u32 = 2;
/// What a launcher of another build than its runtime says (it may apply other rules).
const ANOTHER_BUILD: &str = "the launcher is from another build than the runtime";
/// Largest rules message accepted.
pub const MAX_RULES: usize = 1024 * 1024;
/// The most processes a confined server's tree may hold at once (`RLIMIT_NPROC`,
/// counted in its own user namespace; the kernel does not apply it to uid 0).
pub const MAX_PROCESSES: u64 = 512;
/// The most open files of each process of a confined server.
pub const MAX_OPEN_FILES: u64 = 8192;

/// Runs the launcher when this process was started as one (`ARGUMENT` first), and
/// returns its exit code (it returns only when the server could not be started);
/// `None` otherwise. Call it first in `main`, before any thread is started.
pub fn run_if_invoked() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != ARGUMENT {
        return None;
    }
    Some(launch(args.collect()))
}

fn launch(args: Vec<OsString>) -> ExitCode {
    const USAGE: &str = "usage: __demiurge-sandbox NAME SPACES POLICY";
    let fail = |message: &str| {
        let _ = writeln!(std::io::stderr(), "demiurge sandbox: {message}");
        ExitCode::from(126)
    };
    let [name, spaces, policy] = args.as_slice() else {
        return fail(USAGE);
    };
    let Some(spaces) = spaces.to_str().and_then(|s| s.parse::<Spaces>().ok()) else {
        return fail(USAGE);
    };
    let Ok(address) = SocketAddr::from_abstract_name(name.as_encoded_bytes()) else {
        return fail("the runtime's socket name is not usable");
    };
    // Before the network namespace: an abstract name belongs to one.
    let Ok(mut channel) = UnixStream::connect_addr(&address) else {
        return fail("the runtime is not listening");
    };
    // The namespaces and the rules every server gets, before the server is known
    // (a launcher may be made ahead of its server, and waits here). With `deny:`
    // (`+mask`) the rules wait for the masks: a rule opened on a path before its mask
    // would hold the file the mask hides, and the filters refuse `mount`.
    let ready = if policy.to_str() != Some(super::policy_digest()) {
        Err(ANOTHER_BUILD.to_string())
    } else {
        enter(spaces).and_then(|listener| {
            let base = (!spaces.mask).then(|| base(spaces.network)).transpose()?;
            Ok((listener, base))
        })
    };
    let (listener, prepared) = match ready {
        Ok(ready) => ready,
        Err(e) => {
            let _ = answer(&channel, format!("error {e}\n").as_bytes(), None);
            return fail(&e);
        }
    };
    let confined = read_rules(&mut channel).and_then(|message| {
        if message.protocol != PROTOCOL {
            return Err(ANOTHER_BUILD.to_string());
        }
        if Spaces::of(&message.rules) != spaces {
            return Err("the rules do not match the launcher's namespaces".to_string());
        }
        confine(&message.rules, prepared)?;
        Ok(message)
    });
    let message = match confined {
        Ok(message) => {
            if answer(&channel, b"ok\n", listener.as_ref()).is_err() {
                return fail("the runtime stopped listening");
            }
            message
        }
        Err(e) => {
            let _ = answer(&channel, format!("error {e}\n").as_bytes(), None);
            return fail(&e);
        }
    };
    // Every descriptor of ours is close-on-exec: the server gets its stdio only, and
    // the runtime sees the channel close. A failed `exec` (or `chdir`) is told instead.
    let e = std::process::Command::new(&message.program)
        .args(&message.args)
        .current_dir(&message.cwd)
        .env_clear()
        .envs(message.env)
        .exec();
    let code = e.raw_os_error().unwrap_or(libc::ENOEXEC);
    let _ = answer(&channel, format!("exec {code}\n").as_bytes(), None);
    ExitCode::from(127)
}

/// What the runtime sends: the rules, and the server to become: its program,
/// arguments, working directory and whole environment (the launcher itself starts
/// with none, so nothing in it, `LD_PRELOAD` say, acts before the rules are in force).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Message {
    /// [`PROTOCOL`]: a launcher from another build refuses the message (a rule it
    /// does not know of would otherwise go unapplied).
    pub(crate) protocol: u32,
    pub(crate) rules: Rules,
    pub(crate) program: std::path::PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) cwd: std::path::PathBuf,
    pub(crate) env: Vec<(String, String)>,
}

fn read_rules(channel: &mut UnixStream) -> Result<Message, String> {
    let mut length = [0u8; 4];
    channel
        .read_exact(&mut length)
        .map_err(|_| "the runtime sent no rules".to_string())?;
    let length = u32::from_be_bytes(length) as usize;
    if length > MAX_RULES {
        return Err("the rules are too large".into());
    }
    let mut body = vec![0u8; length];
    channel
        .read_exact(&mut body)
        .map_err(|_| "the rules were cut short".to_string())?;
    serde_json::from_slice(&body).map_err(|_| {
        "the rules are not readable (a launcher from another build than the runtime?)".to_string()
    })
}

/// Sends `message`, with `listener` attached when there is one.
fn answer(
    channel: &UnixStream,
    message: &[u8],
    listener: Option<&TcpListener>,
) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let message = &message[..message.len().min(4096)];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(listener) = listener {
        fds = [listener.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    sendmsg(
        channel,
        &[std::io::IoSlice::new(message)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// The namespaces a launch takes, named in the launcher's arguments so that it can
/// take them before the rules arrive: the network (`proxy`, `none`, `host`), and
/// `+mask` for a mount namespace of its own (`deny`). Checked against the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Spaces {
    network: Network,
    mask: bool,
}

impl Spaces {
    pub(crate) fn of(rules: &Rules) -> Spaces {
        Spaces {
            network: rules.network,
            mask: !rules.deny.is_empty(),
        }
    }
}

impl std::fmt::Display for Spaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let network = match self.network {
            Network::Proxy => "proxy",
            Network::None => "none",
            Network::Host => "host",
        };
        write!(f, "{network}{}", if self.mask { "+mask" } else { "" })
    }
}

impl std::str::FromStr for Spaces {
    type Err = ();
    fn from_str(text: &str) -> Result<Spaces, ()> {
        let (network, mask) = match text.strip_suffix("+mask") {
            Some(network) => (network, true),
            None => (text, false),
        };
        let network = match network {
            "proxy" => Network::Proxy,
            "none" => Network::None,
            "host" => Network::Host,
            _ => return Err(()),
        };
        Ok(Spaces { network, mask })
    }
}

/// Takes the namespaces of `spaces` (this process must be single-threaded); the
/// proxy's listener for `network: proxy`. Errors name what the host lacks.
fn enter(spaces: Spaces) -> Result<Option<TcpListener>, String> {
    use nix::sched::{CloneFlags, unshare};
    let (uid, gid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    // SysV IPC of its own: the operator's shared memory segments and queues are
    // not files, and Landlock does not see them.
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWIPC;
    if spaces.network != Network::Host {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    if spaces.mask {
        flags |= CloneFlags::CLONE_NEWNS;
    }
    unshare(flags)
        .map_err(|e| format!("unprivileged user and network namespaces are not available ({e})"))?;
    // The operator's own ids, seen as they are. Not for uid 0: left unmapped, root's
    // files are not its own to override inside (no DAC override), and it keeps no
    // capability past `exec`.
    if uid != 0 {
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/self/{file}"), text)
                .map_err(|e| format!("the user namespace's {file} cannot be written ({e})"))
        };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{uid} {uid} 1"))?;
        write("gid_map", format!("{gid} {gid} 1"))?;
    }
    // A launcher may wait long for its server: nobody may trace it meanwhile (the
    // same user could otherwise, where Yama allows it). `exec` gives the server the
    // kernel's usual rule back. After the id maps: they are written through `/proc`.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("the launcher cannot make itself untraceable ({e})"))?;
    match spaces.network {
        Network::Proxy => {
            loopback_up().map_err(|e| format!("the sandbox's loopback cannot be set up ({e})"))?;
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, PROXY_PORT))
                .map_err(|e| format!("the egress proxy cannot listen in the sandbox ({e})"))?;
            Ok(Some(listener))
        }
        Network::None | Network::Host => Ok(None),
    }
}

/// The rules every server gets, for a server whose network is `network`: the
/// Landlock ruleset of the system, built, and the seccomp filters (with
/// `no_new_privs`) in force.
fn base(network: Network) -> Result<Prepared, String> {
    let mut base = Prepared::base(network).map_err(|e| e.0)?;
    base.filter_now().map_err(|e| e.to_string())?;
    Ok(base)
}

/// Applies `rules` on top of the base (`prepared` ahead, or built now after the
/// masks) to this (single-threaded) process, inside the namespaces taken.
fn confine(rules: &Rules, prepared: Option<Prepared>) -> Result<(), String> {
    mask(&rules.deny)?;
    let mut prepared = match prepared {
        Some(prepared) => prepared,
        None => base(rules.network)?,
    };
    prepared.add(rules).map_err(|e| e.0)?;
    prepared.apply().map_err(|e| e.to_string())?;
    limits().map_err(|e| format!("a resource limit cannot be set ({e})"))
}

/// Hides each of `paths` in this process's own mount namespace: a directory under an
/// empty, read-only tmpfs that nobody may read (mode 000), a file under a read-only
/// bind of `/dev/null`. The server cannot undo it (no `mount`, no `umount`).
fn mask(paths: &[std::path::PathBuf]) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    if paths.is_empty() {
        return Ok(());
    }
    let failed = |e: nix::Error| format!("`sandbox.filesystem.deny` cannot be applied ({e})");
    // Nothing done here may reach the operator's mount namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(failed)?;
    let sealed = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    for path in paths {
        if path.is_dir() {
            mount(
                Some("tmpfs"),
                path,
                Some("tmpfs"),
                sealed,
                Some("mode=000,size=4k"),
            )
            .map_err(failed)?;
        } else {
            mount(
                Some("/dev/null"),
                path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(failed)?;
            mount(
                None::<&str>,
                path,
                None::<&str>,
                MsFlags::MS_REMOUNT | MsFlags::MS_BIND | sealed,
                None::<&str>,
            )
            .map_err(failed)?;
        }
    }
    Ok(())
}

/// Sets the loopback interface (index 1 in every new network namespace) up, by one
/// `RTM_NEWLINK` request over route netlink, and waits for its acknowledgement.
fn loopback_up() -> std::io::Result<()> {
    use rustix::net::netlink::SocketAddrNetlink;
    use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketType, recv, sendto, socket};
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    const IFF_UP: u32 = 1;
    const LOOPBACK: i32 = 1;
    let socket = socket(AddressFamily::NETLINK, SocketType::RAW, None)?;
    let mut message = Vec::with_capacity(32);
    message.extend_from_slice(&32u32.to_ne_bytes()); // nlmsg_len
    message.extend_from_slice(&RTM_NEWLINK.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // seq
    message.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel assigns
    message.extend_from_slice(&[0, 0]); // ifi_family AF_UNSPEC, padding
    message.extend_from_slice(&0u16.to_ne_bytes()); // ifi_type
    message.extend_from_slice(&LOOPBACK.to_ne_bytes());
    message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_flags
    message.extend_from_slice(&IFF_UP.to_ne_bytes()); // ifi_change
    sendto(
        &socket,
        &message,
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut reply = [0u8; 256];
    let (n, _) = recv(&socket, &mut reply, RecvFlags::empty())?;
    // nlmsghdr, then (for NLMSG_ERROR) the error code: 0 is the acknowledgement.
    let kind = reply.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let code = reply
        .get(16..20)
        .filter(|_| n >= 20)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    match (kind, code) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (Some(NLMSG_ERROR), Some(code)) => Err(std::io::Error::from_raw_os_error(-code)),
        _ => Err(std::io::Error::other("an unexpected netlink answer")),
    }
}

/// No core dumps (a crash's memory image would land in a writable tree), a bound on
/// open files, and one on processes (counted in the server's own user namespace).
fn limits() -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let cap = |resource: Resource, most: u64| {
        let now = getrlimit(resource);
        let bound = |v: Option<u64>| Some(v.unwrap_or(u64::MAX).min(most));
        setrlimit(
            resource,
            Rlimit {
                current: bound(now.current),
                maximum: bound(now.maximum),
            },
        )
    };
    cap(Resource::Core, 0)?;
    cap(Resource::Nofile, MAX_OPEN_FILES)?;
    cap(Resource::Nproc, MAX_PROCESSES)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_are_named_and_read_back_and_nothing_else_is() {
        for network in [Network::Proxy, Network::None, Network::Host] {
            for mask in [false, true] {
                let spaces = Spaces { network, mask };
                assert_eq!(spaces.to_string().parse::<Spaces>(), Ok(spaces));
            }
        }
        for wrong in [
            "",
            "+mask",
            "proxy+",
            "proxy+mask+mask",
            "PROXY",
            "host mask",
            "mask",
        ] {
            assert!(wrong.parse::<Spaces>().is_err(), "{wrong}");
        }
    }

    #[test]
    fn the_spaces_follow_the_rules() {
        let mut rules = Rules {
            read: Vec::new(),
            write: Vec::new(),
            deny: Vec::new(),
            network: Network::None,
        };
        assert_eq!(Spaces::of(&rules).to_string(), "none");
        rules.deny.push("/x".into());
        rules.network = Network::Host;
        assert_eq!(Spaces::of(&rules).to_string(), "host+mask");
    }
}
