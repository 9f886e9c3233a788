//! Rules made into what the kernel enforces: the Landlock ruleset (the base every
//! confined server gets, then one server's trees), `no_new_privs` and the seccomp
//! filters, applied by the launcher to itself before it becomes the server.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as When, SeccompFilter, SeccompRule,
};

use super::rules::{DEVICES, ETC_SECRETS, SYSTEM, all_but};
use super::{Network, Rules, Unavailable};

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
fn filters(network: Network) -> Result<Vec<BpfProgram>, BackendError> {
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into()?;
    let program = |rules, errno: i32| -> Result<BpfProgram, BackendError> {
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )?
        .try_into()
    };
    let mut first = program(refused_calls()?, libc::EPERM)?;
    if cfg!(target_arch = "x86_64") {
        refuse_x32(&mut first);
    }
    Ok(vec![
        first,
        program(
            [(libc::SYS_socket, socket_rules(network)?)]
                .into_iter()
                .collect(),
            libc::EACCES,
        )?,
        program(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            libc::ENOSYS,
        )?,
    ])
}

/// A condition on the `index`th argument of a call (its low 32 bits).
fn on(index: u8, op: Op, value: u64) -> Result<When, BackendError> {
    When::new(index, Len::Dword, op, value)
}

/// The calls refused with `EPERM`: [`REFUSED`] outright, [`ON_OTHERS`] and the
/// priority, limit and scheduling calls when aimed at another process, `clone` with a
/// namespace flag, and `ioctl` typing into a terminal or driving the console.
fn refused_calls() -> Result<BTreeMap<i64, Vec<SeccompRule>>, BackendError> {
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
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
    Ok(refused)
}

/// The sockets refused (`EACCES`): every family but IP and netlink, and raw IP ones;
/// with `network: none`, every one. A UNIX socket reached by path is a door to the
/// operator's session (the D-Bus user bus starts programs unconfined, agents sign with
/// the operator's keys; Landlock does not check `connect` to one), and families no
/// network namespace contains (vsock to the hypervisor and this machine, bluetooth,
/// CAN, ...) would reach past the proxy. `socketpair` stays.
fn socket_rules(network: Network) -> Result<Vec<SeccompRule>, BackendError> {
    if network == Network::None {
        // No family at all (vsock, netlink, bluetooth as much as IP).
        return Ok(Vec::new());
    }
    Ok(vec![
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
    ])
}

/// The x32 ABI numbers every call with bit 30 set, which the filters' exact numbers
/// would not match: refused outright, first in `program`.
fn refuse_x32(program: &mut BpfProgram) {
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
    program.splice(0..0, [load_nr, if_x32, refuse]);
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").finish_non_exhaustive()
    }
}

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

/// What the rules every server gets are, as a launcher applies them (the system
/// trees, `/etc`'s secrets, the devices, the refused calls) and the message's
/// protocol: a launcher of another build, which would apply its own lists, refuses to
/// start when the runtime's digest differs from its own.
pub(crate) fn policy_digest() -> &'static str {
    static DIGEST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DIGEST.get_or_init(|| {
        let policy = format!(
            "{}|{SYSTEM:?}|{ETC_SECRETS:?}|{DEVICES:?}|{REFUSED:?}|{ON_OTHERS:?}|{NAMESPACES:?}",
            super::launcher::PROTOCOL
        );
        crate::digest::sha256_hex(policy.as_bytes())[..16].to_string()
    })
}
