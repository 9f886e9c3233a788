//! Every process the runtime's stdio servers started, so that none outlives its
//! connection or the host, however the host ends.
//!
//! Adversary: a server author whose process forks, calls `setsid`, double-forks,
//! ignores EOF and SIGTERM (threat model 2), and the environment that kills the host
//! with any signal, SIGKILL included (threat model 5). The mechanisms, each for what
//! the others cannot do:
//!
//! - **Trees, not groups.** Closing a connection ends the server's whole tree
//!   ([`super::tree::end_tree`]): children in other groups and sessions included.
//! - **Adoption.** The host process is made a child subreaper
//!   ([`Registry::new`]), so a process that double-forks away from its server is
//!   reparented to the host, not to init. A sweep every [`SWEEP`] records each
//!   server's descendants; an adopted orphan it recorded is ended with its server, an
//!   adopted process carrying the servers' `HOME` that no server can claim is ended at
//!   the next sweep (it left before it was seen), or at once when a server ends, and
//!   adopted zombies are reaped. Neither comes before every spawn that began before it
//!   was first seen has ended: until then it may be that spawn's server, not yet
//!   recorded (each spawn holds a ticket; a look notes the next one).
//!   An adopted process still in a server's process group is that server's: only one
//!   that left tree, group and session (a daemon) cannot be told apart, and is ended.
//! - **Each environment read once.** A child of the host whose environment reads
//!   without the registry's `HOME` (the embedding host's own children) is remembered as
//!   such by that registry (pid and start time; another registry, of another home,
//!   reads it for its own): its environment is not read again, only its `stat`, which
//!   tells a reused pid. An environment that reads empty (a zombie, an `exec` under
//!   way) proves nothing and is read again. Ending a server looks at the children of
//!   the host's thread that adopts orphans (its leader, while that lives) and of the
//!   thread that started the server, not at every other server's tree nor every thread
//!   of the host: an orphan of this server is a child of the first by then, a sibling
//!   it made (`CLONE_PARENT`) one of the second, and what is below the other servers is
//!   theirs to record at the next sweep, which reads every thread.
//! - **The reaper.** A small `sh` process, started with the first server, reads the
//!   recorded processes from a pipe the host holds. The pipe reaches end of file when
//!   the host ends, whatever ended it (a SIGKILL included, which no handler sees); the
//!   reaper then freezes, walks and kills every recorded tree. It runs in its own
//!   process group, so a terminal's SIGINT or SIGHUP reaches it no more than the
//!   servers, and ignores them anyway.
//!
//! Ending a server is followed by three more sweeps even when nothing else is left: a
//! child its tree forked while being frozen reaches the host after the end looked.
//!
//! What remains possible: a process that both leaves its tree and clears its
//! environment, or makes it unreadable (`prctl(PR_SET_DUMPABLE, 0)`), before any sweep
//! saw it below its server. Nothing tells it from the host's own children then (a
//! setuid program the host started reads as unreadable too), while the host lives or
//! after it ends. Without cgroups no unprivileged host can follow it. Nor is such a
//! process, unless a whole look saw it adopted, reaped when it ends: its zombie reads
//! as one the host may still wait for. An orphan that joins the process group of
//! another live server of the same home (any process may join a group of its session)
//! is kept with that server, and ends with its group rather than its own connection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

mod reaper;

use super::tree::{self, Proc};
use reaper::{forget, restart_reaper, spawn_reaper, tell};

/// Every registry of this process: a host may run several runtimes, even on one home,
/// and one runtime's sweep must not take another's server for an orphan.
static ALL: Mutex<Vec<Weak<Registry>>> = Mutex::new(Vec::new());

/// Whether any registry of this process records `p` as a descendant of a server, or,
/// being of the same home (`marker`, which `p` carries), has a server whose group `p`
/// is in (`pgrp`, see [`Tree::holds_group`]): a process that carries one home's
/// marker is no descendant of another home's server.
fn claimed_anywhere(p: &Proc, pgrp: u32, marker: &[u8]) -> bool {
    let registries: Vec<Arc<Registry>> = ALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    registries.iter().any(|r| {
        r.inner.lock().is_ok_and(|i| {
            i.trees.values().any(|t| {
                t.members.get(&p.pid) == Some(p) || (r.marker == marker && t.holds_group(p, pgrp))
            })
        })
    })
}

/// What this process knows of its own children, for every registry of it.
#[derive(Debug, Default)]
struct HostChildren {
    /// Servers spawned by a runtime of this process, until they are gone from `/proc`:
    /// tokio waits for them, so they are never reaped or taken for orphans here, even
    /// after their tree was ended.
    servers: std::collections::HashSet<Proc>,
    /// Children adopted (reparented to the host), known from their start time: older
    /// than the previous sweep, yet not a child then. Only these zombies are reaped: a
    /// child the embedding host spawned itself is its own to wait for.
    adopted: std::collections::HashSet<Proc>,
    /// The children seen at the previous sweep, and when (clock ticks since boot).
    seen: std::collections::HashSet<Proc>,
    seen_at: u64,
}

static HOST: Mutex<Option<HostChildren>> = Mutex::new(None);

/// Servers being spawned by any runtime of this process and not yet recorded: an
/// unclaimed child of the host may be one of them until every spawn that began before
/// it was seen has ended (recorded it, or given up).
#[derive(Debug)]
struct Flight {
    /// The ticket of the next spawn: every spawn that began so far holds a lower one.
    next: u64,
    /// The tickets of spawns under way.
    open: BTreeSet<u64>,
}

static FLIGHT: Mutex<Flight> = Mutex::new(Flight {
    next: 0,
    open: BTreeSet::new(),
});

fn flight() -> std::sync::MutexGuard<'static, Flight> {
    // Every change to it is one step: a panic elsewhere leaves it usable.
    FLIGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where spawns stand after a look: the ticket the next spawn gets (every spawn whose
/// process the look could have seen holds a lower one), and the oldest under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    next: u64,
    oldest: Option<u64>,
}

impl Mark {
    fn now() -> Mark {
        let flight = flight();
        Mark {
            next: flight.next,
            oldest: flight.open.first().copied(),
        }
    }

    /// Whether every spawn that began before `sighting` has ended: an unclaimed child
    /// seen then is no server being recorded.
    fn settled_since(self, sighting: u64) -> bool {
        self.oldest.is_none_or(|oldest| oldest >= sighting)
    }
}

/// Runs `f` on what this process knows of its children. A panic elsewhere while it was
/// held leaves it usable: forgetting the servers would make them orphans to end.
fn with_host<T>(f: impl FnOnce(&mut HostChildren) -> T) -> T {
    let mut guard = HOST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(guard.get_or_insert_with(HostChildren::default))
}

/// Which of the host's children a look reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Every thread's ([`tree::all_children`]: a child whose thread exits during the
    /// look is not missed, and so never taken for adopted by the next).
    Every,
    /// Those an ending server can have left: the children of the thread orphans are
    /// given to (the first thread of the host that is not exiting, Linux's
    /// `find_new_reaper`: its leader while that lives), and of the thread that started
    /// the server (`spawner`: a sibling the server made with `CLONE_PARENT` is its
    /// child). Every thread's once the leader is exiting or has exited.
    Adopting { spawner: u32 },
}

/// The host's children now (those of `scan`'s threads), each with its stat, and
/// whether the threads held still while read ([`tree::all_children`]).
fn host_children(scan: Scan) -> (Vec<(Proc, tree::Stat)>, bool) {
    let host = std::process::id();
    let (pids, settled) = match scan {
        Scan::Every => tree::all_children(host),
        Scan::Adopting { spawner } => {
            // A leader exiting (`PF_EXITING`, set before it hands its children over)
            // or gone is passed over: orphans go to another thread, which only a whole
            // look is sure to read.
            let leader = tree::thread_stat(host, host);
            if leader.is_none_or(|s| s.state == 'Z' || s.flags & tree::PF_EXITING != 0) {
                tree::all_children(host)
            } else {
                // The leader last: a spawner that exits meanwhile hands its children
                // to it.
                let mut pids = Vec::new();
                if spawner != host {
                    pids.extend(tree::thread_children(host, spawner));
                }
                pids.extend(tree::thread_children(host, host));
                pids.sort_unstable();
                pids.dedup();
                (pids, true)
            }
        }
    };
    let children = pids
        .into_iter()
        .filter_map(|pid| {
            let stat = tree::stat(pid)?;
            let p = Proc {
                pid,
                start: stat.start,
            };
            Some((p, stat))
        })
        .collect();
    (children, settled)
}

/// Clock ticks since boot, the unit of [`Proc::start`] (the kernel counts a start
/// time on the boot clock, suspended time included).
fn uptime_ticks() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let hz = *HZ.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .map_or(100, |t| t.max(1) as u64)
    });
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |now| {
        now.tv_sec() as u64 * hz + now.tv_nsec() as u64 * hz / 1_000_000_000
    })
}

/// How often descendants are recorded and adopted orphans looked at.
pub const SWEEP: Duration = Duration::from_millis(250);

/// How long a closing registry waits for spawns under way before it ends its suspects
/// anyway (see [`Registry::shutdown`]).
const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(3);

/// Sweeps that follow a server's end even when nothing else is left to record.
const LINGER: u8 = 3;

/// The processes of one server: its own, and every descendant a sweep has seen.
#[derive(Debug)]
struct Tree {
    root: Proc,
    members: BTreeMap<u32, Proc>,
    /// The host thread that started it.
    spawner: u32,
}

impl Tree {
    /// Whether `p`, in process group `pgrp`, is in the group this server leads and
    /// started after it: left by the server but still in its group, so its. Not a
    /// process that leads its own group (a dead server's pid can come back as a new
    /// group's leader, a sandbox launcher made ahead, say), nor one older than the
    /// server (its pid is then another's). A process can join any group of its
    /// session, so this keeps one with a server of its own home, which ends the group
    /// when it ends.
    fn holds_group(&self, p: &Proc, pgrp: u32) -> bool {
        self.root.pid == pgrp
            && p.pid != pgrp
            && p.start >= self.root.start
            // The group's leader, when there is one, is this server: not a later
            // process given its pid, whose group is not its.
            && tree::stat(pgrp).is_none_or(|s| s.start == self.root.start)
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// By the server's pid.
    trees: HashMap<u32, Tree>,
    /// Children of the host carrying the servers' HOME that no server claimed when
    /// last seen, each with the [`Mark::next`] of its first sighting: ended when seen
    /// unclaimed again once every spawn that began before that sighting has ended.
    suspects: HashMap<Proc, u64>,
    reaper: Option<(Child, ChildStdin)>,
    /// The reaper's arguments, kept to start it again.
    marker: Option<(Vec<u8>, Vec<u8>)>,
    sweeping: bool,
    /// Sweeps still owed after a server ended, whatever else is recorded: a child its
    /// tree forked while being frozen reaches the host only after the end's own look.
    lingering: u8,
    /// Children of the host whose environment was read and carries neither of this
    /// registry's `HOME`s: not read again while they live (pid and start time; another
    /// registry, of another home, reads them for its own).
    cleared: std::collections::HashSet<Proc>,
    /// Processes ended and not yet told the reaper: told with its next `+` line, at
    /// the next sweep, or once there are [`reaper::FORGET_BATCH`] of them.
    forgotten: Vec<Proc>,
}

/// The runtime's record of its servers' processes (see the module documentation).
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<Inner>,
    /// `HOME=<home>/mcp-home`: every server and descendant that kept its environment
    /// carries it; nothing else of the host does.
    marker: Vec<u8>,
    /// `HOME=<home>/sandbox/`: how a confined server's `HOME` starts (its own).
    confined: Vec<u8>,
}

impl Registry {
    /// A registry for servers whose HOME is `server_home`. With `adopt`, the host
    /// becomes a child subreaper (Linux), so orphans of its servers are reparented to it
    /// instead of to init.
    pub fn new(server_home: &Path, adopt: bool) -> Arc<Registry> {
        #[cfg(target_os = "linux")]
        if adopt && let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::warn!(
                "cannot make the host a child subreaper ({e}); an orphan of a server may outlive its connection"
            );
        }
        #[cfg(not(target_os = "linux"))]
        if adopt {
            tracing::warn!(
                "child subreapers are Linux only: an orphan of a server that leaves its process group may outlive its connection"
            );
        }
        let marker = format!("HOME={}", server_home.display()).into_bytes();
        let sandbox = server_home.parent().unwrap_or(server_home).join("sandbox");
        let confined = format!("HOME={}/", sandbox.display()).into_bytes();
        let registry = Arc::new(Registry {
            inner: Mutex::new(Inner {
                marker: Some((marker.clone(), confined.clone())),
                ..Inner::default()
            }),
            marker,
            confined,
        });
        if let Ok(mut all) = ALL.lock() {
            all.retain(|r| r.strong_count() > 0);
            all.push(Arc::downgrade(&registry));
        }
        registry
    }

    /// Marks a spawn in progress until the guard drops (after [`Registry::started`]).
    pub fn spawning(&self) -> Spawning {
        let mut flight = flight();
        let ticket = flight.next;
        flight.next += 1;
        flight.open.insert(ticket);
        Spawning(ticket)
    }

    /// Records a server the runtime just started from host thread `spawner` (its
    /// parent thread); starts the reaper and the sweep on first use.
    pub fn started(self: &Arc<Self>, pid: u32, spawner: u32) {
        let Some(root) = Proc::current(pid) else {
            return;
        };
        with_host(|h| h.servers.insert(root));
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.reaper.is_none() {
            inner.reaper = spawn_reaper(&self.marker, &self.confined);
        }
        // Recorded before it is told: a reaper that must be started again (its pipe
        // failed) is told everything recorded, this server included.
        inner.trees.insert(
            pid,
            Tree {
                root,
                members: BTreeMap::new(),
                spawner,
            },
        );
        tell(&mut inner, '+', &root);
        if !inner.sweeping && tokio::runtime::Handle::try_current().is_ok() {
            inner.sweeping = true;
            tokio::spawn(sweep_while_alive(Arc::downgrade(self)));
        }
    }

    /// Ends the tree of server `pid`: the server, every descendant recorded or found
    /// now, adopted orphans of it included. Idempotent.
    pub fn end(&self, pid: u32) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let Some(tree) = inner.trees.remove(&pid) else {
            return;
        };
        let mut members: Vec<Proc> = tree.members.values().copied().collect();
        members.push(tree.root);
        for p in tree::end_tree(&members) {
            // The server itself is tokio's child to wait for; only adopted ones are ours.
            if p != tree.root {
                tree::reap(&p);
            }
            tell(&mut inner, '-', &p);
        }
        inner.lingering = LINGER;
        drop(inner);
        // An orphan no sweep saw below this server has no owner left: look now where
        // the kernel puts orphans (the host's first living thread: its leader) and
        // where a sibling of the server is (the thread that started it), not below the
        // other servers nor every thread of the host. The sweeps owed after an end look
        // at them all.
        let spawner = tree.spawner;
        self.settle(Vec::new(), true, Scan::Adopting { spawner });
    }

    /// Records what is below server `pid` now (before it is asked to exit: once it has,
    /// its children are orphans, adopted by the host but no longer below it).
    pub fn snapshot(&self, pid: u32) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let fresh: Vec<Proc> = match inner.trees.get_mut(&pid) {
            // Only while its pid is still the server's (a zombie's included): once it
            // was reaped, the pid may name another process, whose children are not its.
            Some(tree) if tree.root.exists() => tree::descendants(pid)
                .into_iter()
                .filter(|p| tree.members.insert(p.pid, *p).is_none())
                .collect(),
            _ => return,
        };
        for p in fresh {
            tell(&mut inner, '+', &p);
        }
    }

    /// Records what is below every server now, ends adopted processes no server claims
    /// (see [`Registry::settle`]), reaps adopted zombies.
    pub fn sweep(&self, now: bool) {
        let told = self.record_descendants();
        self.settle(told, now, Scan::Every);
    }

    /// Tells the reaper `told`, then looks at the host's children: reaps adopted
    /// zombies and ends adopted processes no server claims, once no spawn that began
    /// before they were first seen is under way (one may be that spawn's server, not yet
    /// recorded): at once when `now`, else when seen again.
    fn settle(&self, told: Vec<(char, Proc)>, now: bool, scan: Scan) {
        let (candidates, listed, whole) = self.host_scan(told, scan);
        // After the look: a spawn whose process it saw had begun by then.
        let mark = Mark::now();
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let known = std::mem::take(&mut inner.suspects);
        let mut suspects = HashMap::new();
        let mut due = Vec::new();
        for p in candidates {
            let first = known.get(&p).copied();
            match first.or(now.then_some(mark.next)) {
                Some(seen) if mark.settled_since(seen) => due.push(p),
                _ => {
                    suspects.insert(p, first.unwrap_or(mark.next));
                }
            }
        }
        if !whole {
            // The suspects of threads not looked at stay suspects; one looked at and
            // no longer a candidate is not one (as after a whole look).
            suspects.extend(
                known
                    .into_iter()
                    .filter(|(p, _)| !listed.contains(p) && p.exists()),
            );
        }
        inner.suspects = suspects;
        drop(inner);
        end_unclaimed(due);
    }

    /// Records the descendants of every server; returns what to tell the reaper.
    fn record_descendants(&self) -> Vec<(char, Proc)> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        let mut told = Vec::new();
        for tree in inner.trees.values_mut() {
            tree.members.retain(|_, p| {
                let alive = p.exists();
                if !alive {
                    told.push(('-', *p));
                }
                alive
            });
            // Walked only while its pid is still the server's (see `snapshot`).
            if !tree.root.exists() {
                continue;
            }
            for p in tree::descendants(tree.root.pid) {
                if tree.members.insert(p.pid, p).is_none() {
                    told.push(('+', p));
                }
            }
        }
        self.check_reaper(&mut inner);
        told
    }

    /// Tells the reaper `told`, reaps adopted zombies this registry claims, and returns
    /// the host's children carrying the servers' HOME that no registry of this process
    /// claims, with every child the look saw, and whether the look was whole: every
    /// thread read while none went away (only a whole look tells what the host's
    /// children are, and so which were adopted).
    fn host_scan(
        &self,
        told: Vec<(char, Proc)>,
        scan: Scan,
    ) -> (Vec<Proc>, std::collections::HashSet<Proc>, bool) {
        let Ok(mut inner) = self.inner.lock() else {
            return Default::default();
        };
        for (sign, p) in told {
            tell(&mut inner, sign, &p);
        }
        if scan == Scan::Every {
            forget(&mut inner);
        }
        let now = uptime_ticks();
        let (children, settled) = host_children(scan);
        let whole = scan == Scan::Every && settled;
        let listed: std::collections::HashSet<Proc> = children.iter().map(|(p, _)| *p).collect();
        let (servers, adopted) = with_host(|h| {
            if whole {
                // What is known of the host's children is kept from whole looks only.
                h.servers.retain(|p| listed.contains(p) || p.exists());
                h.adopted.retain(|p| listed.contains(p));
                for p in &listed {
                    if !h.seen.contains(p) && p.start < h.seen_at {
                        h.adopted.insert(*p);
                    }
                }
                h.seen.clone_from(&listed);
                h.seen_at = now;
            }
            (h.servers.clone(), h.adopted.clone())
        });
        if whole {
            inner.cleared.retain(|p| listed.contains(p));
        }
        let mut unclaimed = Vec::new();
        for (p, stat) in children {
            if inner.cleared.contains(&p) {
                // Known to be no server's: its environment is not read again.
                continue;
            }
            if servers.contains(&p) {
                // A server: tokio waits for it.
                continue;
            }
            // Left by a server but still in its group: that server's.
            if let Some(tree) = inner
                .trees
                .values_mut()
                .find(|t| t.holds_group(&p, stat.pgrp) && t.members.get(&p.pid) != Some(&p))
            {
                tree.members.insert(p.pid, p);
                tell(&mut inner, '+', &p);
            }
            let claimed = inner
                .trees
                .values()
                .any(|t| t.members.get(&p.pid) == Some(&p));
            if claimed || adopted.contains(&p) {
                // Adopted: a zombie of it is ours to reap.
                tree::reap(&p);
            }
            if claimed {
                continue;
            }
            match self.carries_marker(p.pid, stat.state) {
                Some(true) => unclaimed.push((p, stat.pgrp)),
                Some(false) if whole && !adopted.contains(&p) && stat.runs() => {
                    // The host's own child (or one that shed the marker: past following).
                    // Known from a whole look only, which also tells what was adopted.
                    inner.cleared.insert(p);
                }
                // Unreadable or empty (a zombie, an `exec` under way): read again.
                _ => {}
            }
        }
        drop(inner);
        let unclaimed = unclaimed
            .into_iter()
            .filter(|(p, pgrp)| !claimed_anywhere(p, *pgrp, &self.marker))
            .map(|(p, _)| p)
            .collect();
        (unclaimed, listed, whole)
    }

    /// Starts the reaper again when it exited or was stopped (a server of the same user
    /// can signal it), telling it everything recorded.
    fn check_reaper(&self, inner: &mut Inner) {
        let healthy = match inner.reaper.as_mut() {
            None => inner.trees.is_empty(),
            Some((child, _)) => {
                let running = matches!(child.try_wait(), Ok(None));
                let stopped = tree::stat(child.id()).is_some_and(|s| s.state == 'T');
                running && !stopped
            }
        };
        if !healthy {
            restart_reaper(inner);
        }
    }

    /// Whether process `pid` carries one of this registry's `HOME`s; `None` when that
    /// is not known: its environment cannot be read, reads empty (a zombie, a process
    /// between the two halves of an `exec`) or is larger than one read. A process whose
    /// leader thread exited (`state` `Z`) has no environment of its own left to read:
    /// its other threads share one memory image, and the first few that answer are
    /// asked instead (a few: one that exits while read leaves the next; not every one
    /// of thousands of threads a sweep).
    fn carries_marker(&self, pid: u32, state: char) -> Option<bool> {
        const THREADS_ASKED: usize = 4;
        let known = self.environ_carries(&format!("/proc/{pid}/environ"));
        if known.is_some() || state != 'Z' {
            return known;
        }
        let leader = pid.to_string();
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        tasks
            .flatten()
            .filter(|task| task.file_name().to_str() != Some(leader.as_str()))
            .take(THREADS_ASKED)
            .find_map(|task| self.environ_carries(task.path().join("environ").to_str()?))
    }

    /// Whether the environment at `path` carries one of this registry's `HOME`s, from
    /// one `read`: one read sees one memory image; a second could see the image an
    /// `exec` left, and a `HOME` past the first would be missed.
    fn environ_carries(&self, path: &str) -> Option<bool> {
        use std::io::Read;
        const WHOLE: usize = 128 * 1024;
        let mut file = std::fs::File::open(path).ok()?;
        let mut env = vec![0; WHOLE];
        let read = file.read(&mut env).ok()?;
        let found = env[..read]
            .split(|&b| b == 0)
            .any(|kv| kv == self.marker || kv.starts_with(&self.confined));
        match (found, read) {
            (true, _) => Some(true),
            (false, 0 | WHOLE) => None,
            (false, _) => Some(false),
        }
    }

    /// Ends every recorded tree and lets the reaper go (it exits at end of file).
    pub fn shutdown(&self) {
        let pids: Vec<u32> = self
            .inner
            .lock()
            .map(|i| i.trees.keys().copied().collect())
            .unwrap_or_default();
        for pid in pids {
            self.end(pid);
        }
        self.sweep(true);
        // A suspect waits for spawns under way (another runtime's of this host): no
        // sweep of this registry follows, so it is looked at again here, and ended
        // after a while whatever is under way.
        let waiting = || self.inner.lock().is_ok_and(|i| !i.suspects.is_empty());
        let deadline = std::time::Instant::now() + SHUTDOWN_PATIENCE;
        while waiting() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            self.sweep(true);
        }
        let left = self
            .inner
            .lock()
            .map(|mut i| std::mem::take(&mut i.suspects))
            .unwrap_or_default();
        end_unclaimed(left.into_keys());
        if let Some((mut child, mut stdin)) =
            self.inner.lock().ok().and_then(|mut i| i.reaper.take())
        {
            // A closing host, not a dead one: nothing else to look for.
            let _ = stdin.write_all(b".\n");
            drop(stdin);
            // It has nothing left to kill; wait briefly so it is not left a zombie.
            for _ in 0..50 {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Ends `procs`, children of the host that left their servers before any sweep saw
/// them (no connection owns them), with everything below them; not one a spawn recorded
/// as its server since they were seen.
fn end_unclaimed(procs: impl IntoIterator<Item = Proc>) {
    let servers = with_host(|h| h.servers.clone());
    for p in procs.into_iter().filter(|p| !servers.contains(p)) {
        for q in tree::end_tree(&[p]) {
            tree::reap(&q);
        }
    }
}

/// A spawn in progress, by its ticket (see [`Registry::spawning`]).
pub struct Spawning(u64);

impl Drop for Spawning {
    fn drop(&mut self) {
        flight().open.remove(&self.0);
    }
}

async fn sweep_while_alive(registry: Weak<Registry>) {
    let mut every = tokio::time::interval(SWEEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let busy = registry.inner.lock().is_ok_and(|mut i| {
            let owed = i.lingering > 0;
            i.lingering = i.lingering.saturating_sub(1);
            owed || !i.trees.is_empty() || !i.suspects.is_empty()
        });
        if busy {
            registry.sweep(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    /// A child of this process carrying `home`'s server `HOME`, as an orphan of a
    /// server is once adopted.
    fn orphan_of(home: &Path) -> Child {
        std::process::Command::new("sleep")
            .arg("300")
            .env("HOME", home.join("mcp-home"))
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_registry_of_another_home_does_not_hide_an_orphan_from_its_own() {
        // Two runtimes of one host on two homes: the first reads the orphan's
        // environment, finds no HOME of its own and stops reading it. The second must
        // still see its own orphan and end it.
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = Registry::new(&one.path().join("mcp-home"), false);
        let second = Registry::new(&two.path().join("mcp-home"), false);
        let mut orphan = orphan_of(two.path());
        let pid = orphan.id();
        let own = Proc::current(pid).unwrap();
        // Until its `exec`, it reads with this process's environment.
        let marker = format!("HOME={}", two.path().join("mcp-home").display());
        let carries = || {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()))
        };
        for _ in 0..1000 {
            if carries() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(carries());
        first.sweep(true);
        assert!(first.inner.lock().unwrap().cleared.contains(&own));
        // At once unless a spawn of another test was under way; then once it ended.
        // Ended and reaped by the registry (a zombie of it is adopted to reap).
        let gone = |orphan: &mut Child| !own.exists() || matches!(orphan.try_wait(), Ok(Some(_)));
        let ended = within_5s(|| {
            second.sweep(true);
            gone(&mut orphan)
        });
        if !ended {
            let _ = orphan.kill();
            let _ = orphan.wait();
        }
        assert!(ended, "the orphan was left alive");
        assert!(!second.inner.lock().unwrap().cleared.contains(&own));
    }

    /// Whether `done` holds within 5 s, asked every 10 ms.
    fn within_5s(mut done: impl FnMut() -> bool) -> bool {
        (0..500).any(|_| {
            let now = done();
            if !now {
                std::thread::sleep(Duration::from_millis(10));
            }
            now
        })
    }

    /// [`orphan_of`] once its `exec` is done: until then its environment reads as this
    /// process's, without the marker (and a whole look takes it for the host's own).
    fn marked_orphan_of(home: &Path) -> (Child, Proc) {
        let orphan = orphan_of(home);
        let own = Proc::current(orphan.id()).unwrap();
        let marker = format!("HOME={}", home.join("mcp-home").display());
        assert!(within_5s(|| {
            std::fs::read(format!("/proc/{}/environ", own.pid))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes()))
        }));
        (orphan, own)
    }

    fn suspects(registry: &Registry, own: &Proc) -> bool {
        let inner = registry.inner.lock().unwrap();
        inner.suspects.contains_key(own)
    }

    /// Whether `orphan` ends within 5 s while `look` runs between checks; killed and
    /// waited for either way.
    fn ends_within_5s(orphan: &mut Child, own: &Proc, mut look: impl FnMut()) -> bool {
        let ended = within_5s(|| {
            look();
            !own.exists() || matches!(orphan.try_wait(), Ok(Some(_)))
        });
        if !ended {
            let _ = orphan.kill();
        }
        let _ = orphan.wait();
        ended
    }

    #[test]
    fn an_orphan_adopted_before_its_server_ends_is_found_by_the_end() {
        use std::io::BufRead;
        // No tokio runtime here, so no sweep runs: only the end's own look can find it.
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), true);
        // A server that leaves a grandchild in a session of its own and exits, started
        // from a thread that is not the leader (as a runtime's worker starts servers).
        // It exits when its input closes: not before it is recorded (a server already
        // gone is not).
        let mut server = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!; read _"])
            .env("HOME", home.path().join("mcp-home"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        registry.started(server.id(), tree::this_thread());
        let mut line = String::new();
        let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let pid: u32 = line.trim().parse().unwrap();
        // Past its `exec`s (`setsid`, then `sleep`): an environment read between the two
        // halves of one reads empty and proves nothing.
        let marker = format!("HOME={}", home.path().join("mcp-home").display());
        let execed = within_5s(|| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            comm.trim() == "sleep" && env.split(|&b| b == 0).any(|kv| kv == marker.as_bytes())
        });
        assert!(execed);
        let orphan = Proc::current(pid).unwrap();
        drop(server.stdin.take());
        server.wait().unwrap();
        // Adopted: a child of this process now.
        assert_eq!(tree::stat(pid).unwrap().ppid, std::process::id());
        registry.end(server.id());
        // Ended at once, or a suspect when a spawn of another test was under way, then
        // at a later look (no sweep runs here: only this test looks again, and only at
        // a suspect, which the end's look found).
        let suspected = suspects(&registry, &orphan);
        let ended = within_5s(|| {
            if suspected {
                registry.sweep(false);
            }
            tree::stat(pid).is_none_or(|s| s.start != orphan.start || s.state == 'Z')
        });
        if !ended {
            let _ = orphan.signal(nix::sys::signal::Signal::SIGKILL);
        }
        // Reaped here unless a sweep of another test's registry did (never a later
        // process given its pid: `reap` checks the start time and waits for nothing).
        within_5s(|| {
            tree::reap(&orphan);
            !orphan.exists()
        });
        assert!(ended, "the end did not find the adopted orphan");
    }

    #[test]
    fn a_child_seen_while_a_spawn_was_under_way_waits_for_that_spawn_to_end() {
        // Spawns begun before a sighting: tickets below its mark.
        let mark = |next, oldest| Mark { next, oldest };
        assert!(mark(7, None).settled_since(5));
        assert!(mark(7, Some(5)).settled_since(5));
        assert!(mark(7, Some(6)).settled_since(5));
        assert!(!mark(7, Some(4)).settled_since(5));
        assert!(!mark(7, Some(0)).settled_since(7));

        // A marked child of this process no server claims, seen while a spawn is under
        // way: however often it is seen again, it stays while that spawn does (it may
        // be the spawn's server, not yet recorded), and is ended once it ended.
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let spawn = registry.spawning();
        let (mut orphan, own) = marked_orphan_of(home.path());
        registry.sweep(false);
        assert!(suspects(&registry, &own));
        for now in [false, true, false, true] {
            registry.sweep(now);
            assert!(
                own.exists(),
                "a possible server was ended while its spawn ran"
            );
            assert!(suspects(&registry, &own));
        }
        drop(spawn);
        // Spawns of other tests that began before it was first seen are waited for too.
        let ended = ends_within_5s(&mut orphan, &own, || registry.sweep(false));
        assert!(ended, "the orphan was left alive after the spawn ended");
    }

    #[test]
    fn children_of_host_threads_that_exit_during_looks_are_never_taken_for_adopted() {
        // Each child's thread exits at once: the kernel moves the child to the host's
        // leader thread, perhaps while a whole look reads the threads one by one. One
        // missed that way and seen by the next look would read as adopted (a child that
        // was not there before, older than that look), and its zombie reaped under the
        // host that waits for it.
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let starter = std::thread::spawn(|| {
            (0..150)
                .map(|_| {
                    std::thread::spawn(|| {
                        std::process::Command::new("sleep")
                            .arg("60")
                            .spawn()
                            .unwrap()
                    })
                    .join()
                    .unwrap()
                })
                .collect::<Vec<Child>>()
        });
        while !starter.is_finished() {
            registry.sweep(false);
        }
        let children = starter.join().unwrap();
        registry.sweep(false);
        let own: Vec<Proc> = children
            .iter()
            .filter_map(|c| Proc::current(c.id()))
            .collect();
        let adopted = with_host(|h| own.iter().filter(|p| h.adopted.contains(p)).count());
        for mut child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(own.len(), 150);
        assert_eq!(adopted, 0, "the host's own children were taken for adopted");
    }

    #[test]
    fn a_closing_registry_ends_its_suspects_even_while_a_spawn_is_under_way() {
        // Seen while a spawn is under way, and that spawn never ends: the close waits
        // a while, then ends it all the same (no sweep of this registry follows).
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let _spawn = registry.spawning();
        let (mut orphan, own) = marked_orphan_of(home.path());
        registry.sweep(false);
        assert!(suspects(&registry, &own));
        registry.shutdown();
        let ended = ends_within_5s(&mut orphan, &own, || {});
        assert!(ended, "the suspect outlived the registry's close");
    }

    #[test]
    fn an_environment_is_known_only_from_one_whole_read() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let others = tempfile::tempdir().unwrap();
        // Each child once its `exec` is done (its own variable readable), then asked.
        let ask = |env: &[(&str, String)]| {
            let mut command = std::process::Command::new("sleep");
            command
                .arg("300")
                .env_clear()
                .env("DEMIURGE_TEST_CHILD", "1");
            command.envs(env.iter().map(|(k, v)| (k, v)));
            let mut child = command.spawn().unwrap();
            let pid = child.id();
            let done = (0..1000).any(|_| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
                let done = env
                    .split(|&b| b == 0)
                    .any(|kv| kv == b"DEMIURGE_TEST_CHILD=1");
                if !done {
                    std::thread::sleep(Duration::from_millis(5));
                }
                done
            });
            let answer = registry.carries_marker(pid, tree::stat(pid).unwrap().state);
            let _ = child.kill();
            let _ = child.wait();
            assert!(done);
            answer
        };
        let own = format!("{}", home.path().join("mcp-home").display());
        let other = format!("{}", others.path().join("mcp-home").display());
        assert_eq!(ask(&[("HOME", own.clone())]), Some(true));
        assert_eq!(ask(&[("HOME", other.clone())]), Some(false));
        assert_eq!(ask(&[]), Some(false));
        // Larger than one read: its `HOME` may lie past it, so nothing is concluded
        // from a read without one; one read that finds it is enough.
        // (One variable holds 128 KiB at most: four of 60 KiB.)
        let pad = "x".repeat(60 * 1024);
        // (`Command` sorts its variables: `HOME` comes before these, within the read.)
        let mut large: Vec<(&str, String)> = ["PAD_A", "PAD_B", "PAD_C", "PAD_D"]
            .iter()
            .map(|name| (*name, pad.clone()))
            .collect();
        large.push(("HOME", other));
        assert_eq!(ask(&large), None);
        large.pop();
        large.push(("HOME", own));
        assert_eq!(ask(&large), Some(true));
    }

    /// A stand-in server: a child that waits.
    fn sleeper() -> Child {
        std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap()
    }

    fn reaper_pid(registry: &Registry) -> u32 {
        registry
            .inner
            .lock()
            .unwrap()
            .reaper
            .as_ref()
            .unwrap()
            .0
            .id()
    }

    /// Whether `server` ends within 5 s once the host dies: the reaper's pipe closes
    /// without `.`. The reaper is killed and waited for either way.
    fn ends_once_the_host_dies(registry: &Registry, server: &mut Child, own: &Proc) -> bool {
        let (mut reaper, stdin) = registry.inner.lock().unwrap().reaper.take().unwrap();
        drop(stdin);
        let ended = ends_within_5s(server, own, || {});
        let _ = reaper.kill();
        let _ = reaper.wait();
        ended
    }

    #[test]
    fn an_end_is_told_the_reaper_with_the_next_start_and_a_dead_host_still_ends_the_rest() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let forgotten = || registry.inner.lock().unwrap().forgotten.len();
        let mut first = sleeper();
        registry.started(first.id(), tree::this_thread());
        registry.end(first.id());
        let _ = first.wait();
        assert_eq!(forgotten(), 1, "an end alone is held back");
        let mut second = sleeper();
        let own = Proc::current(second.id()).unwrap();
        registry.started(second.id(), tree::this_thread());
        assert_eq!(forgotten(), 0, "told with the next start");
        // It still ends the second server, the first (gone) passed over.
        let ended = ends_once_the_host_dies(&registry, &mut second, &own);
        assert!(ended, "the reaper left a server of a dead host alive");
    }

    #[test]
    fn a_server_started_once_the_reaper_died_is_known_to_the_next_reaper() {
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::new(&home.path().join("mcp-home"), false);
        let mut first = sleeper();
        registry.started(first.id(), tree::this_thread());
        // A server of the same user kills the reaper.
        let reaper = reaper_pid(&registry);
        kill(Pid::from_raw(reaper as i32), Signal::SIGKILL).unwrap();
        assert!(within_5s(
            || tree::stat(reaper).is_none_or(|s| s.state == 'Z')
        ));
        // The next start finds the pipe broken and starts another reaper.
        let mut second = sleeper();
        let own = Proc::current(second.id()).unwrap();
        registry.started(second.id(), tree::this_thread());
        let next = reaper_pid(&registry);
        assert_ne!(next, reaper);
        // The new reaper ends the server it was started for.
        let ended = ends_once_the_host_dies(&registry, &mut second, &own);
        let _ = first.kill();
        let _ = first.wait();
        assert!(
            ended,
            "a server the new reaper was not told of outlived a dead host"
        );
    }
}
