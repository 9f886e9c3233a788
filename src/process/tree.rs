//! Process trees read from `/proc`, and ending one so that nothing in it survives.
//!
//! A server's tree is its process and every process descended from it, whatever group
//! or session they moved to (`setsid` changes neither parent nor tree). A process that
//! double-forks away loses its parent; the runtime is a child subreaper, so it is
//! adopted by the host instead of init, and the [`super::Registry`] keeps it with the
//! server it came from.
//!
//! Ending a tree freezes before it kills: every member found is sent `SIGSTOP` (a
//! stopped process cannot fork), the tree is walked again until no new member shows,
//! then everything is sent `SIGKILL`. A pid is only signalled while its start time is
//! the one recorded, so a reused pid is never hit.

use std::collections::BTreeMap;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A process as recorded: its pid and its start time (clock ticks since boot), which
/// tells it apart from a later process given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`.
    pub start: u64,
}

/// What `/proc/<pid>/stat` says, or `None` when the process is gone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub start: u64,
    /// Field 20: the threads of its thread group, its leader counted until it is
    /// reaped.
    pub threads: u64,
    /// Field 9: the kernel's flags of the process (or thread).
    pub flags: u64,
}

impl Stat {
    /// Whether the process runs: not a zombie, or a zombie only as its leader thread
    /// is. A process whose first thread exited while others go on reads `Z` until the
    /// last one ends, yet runs, forks and holds children: a server may end its main
    /// thread on purpose to look dead, and neither it nor what is below it may drop out
    /// of a walk for that.
    pub fn runs(&self) -> bool {
        match self.state {
            'X' => false,
            'Z' => self.threads > 1,
            _ => true,
        }
    }
}

/// A small file of `/proc`, read whole as text (bytes that are not UTF-8 replaced).
/// Not `read_to_string`: a command name is any bytes a server chose for its executable's
/// file name, and a stat that fails to read as UTF-8 would hide that process and all
/// below it from every walk. Nor a size asked first: `/proc` reports none, so an open,
/// the reads and a close are all the system calls it costs.
pub(crate) fn read_proc(path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Reads `/proc/<pid>/stat`. The command name (field 2) may contain anything, spaces,
/// parentheses and bytes that are not UTF-8 included, so fields are counted from its
/// last `)`.
pub(crate) fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&read_proc(&format!("/proc/{pid}/stat"))?)
}

/// [`stat`] of thread `tid` of process `pid` alone (its own state: `Z` once that
/// thread exited, whatever the others do).
pub(crate) fn thread_stat(pid: u32, tid: u32) -> Option<Stat> {
    parse_stat(&read_proc(&format!("/proc/{pid}/task/{tid}/stat"))?)
}

/// The id of the calling thread (the parent of what it spawns).
pub(crate) fn this_thread() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field 4 is the parent, field 22 the start time.
    // Read in order, each field skipped to by how far it lies after the one before.
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let flags = fields.nth(3)?.parse().ok()?;
    let threads = fields.nth(10)?.parse().ok()?;
    let start = fields.nth(1)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        threads,
        flags,
        start,
    })
}

impl Proc {
    /// `pid` as it is now, if it runs (a zombie is not, unless only its leader thread
    /// is: [`Stat::runs`]).
    pub fn current(pid: u32) -> Option<Proc> {
        let s = stat(pid)?;
        s.runs().then_some(Proc {
            pid,
            start: s.start,
        })
    }

    /// Whether this very process (same pid, same start) still exists, zombies included.
    pub fn exists(&self) -> bool {
        stat(self.pid).is_some_and(|s| s.start == self.start)
    }

    /// Sends `signal` if this very process still exists (zombies included); whether
    /// it may still exist. `false` only when it is known to be gone: its pid is absent
    /// from `/proc`, or held by a later process. A stat that could not be read (no
    /// descriptors or memory left) says nothing, and the process is kept for the next
    /// look.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        // Never pid 0 or 1, never outside the pid range: `kill(0)` is our own group.
        if self.pid <= 1 || self.pid > i32::MAX as u32 {
            return false;
        }
        match stat(self.pid) {
            Some(s) if s.start == self.start => {
                let _ = kill(Pid::from_raw(self.pid as i32), signal);
                true
            }
            Some(_) => false,
            None => !std::fs::symlink_metadata(format!("/proc/{}", self.pid))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound),
        }
    }
}

/// The direct children of `pid`, from `/proc/<pid>/task/*/children` (every thread's),
/// its leader's read last: a thread that exits hands its children to the first of its
/// process's threads not exiting (the leader while that lives), so a child moved
/// while the threads are read is seen before the move or after it. Not so once the
/// leader itself has exited ([`all_children`] reads again then). Each pid once.
pub(crate) fn children(pid: u32) -> Vec<u32> {
    let mut out = children_of(pid, &threads(pid));
    out.sort_unstable();
    out.dedup();
    out
}

/// [`children`], read again while a thread read went away meanwhile (at most four
/// reads): a leader that exits hands the children of the threads that exit after it to
/// another thread, perhaps one read before them. What every read found, each pid once,
/// and whether the last read saw the threads hold still (else a child may be missing).
pub(crate) fn all_children(pid: u32) -> (Vec<u32>, bool) {
    const READS: usize = 4;
    // A leader that begins to exit stays listed (a zombie) while its children go to a
    // thread perhaps read before: its state is compared too.
    let leader = || thread_stat(pid, pid).map(|s| (s.state == 'Z', s.flags & PF_EXITING));
    let mut tids = threads(pid);
    let mut out = Vec::new();
    let mut settled = false;
    for _ in 0..READS {
        let before = leader();
        out.extend(children_of(pid, &tids));
        let now = threads(pid);
        let still: std::collections::HashSet<&u32> = now.iter().collect();
        settled = tids.iter().all(|t| still.contains(t)) && leader() == before;
        tids = now;
        if settled {
            break;
        }
    }
    out.sort_unstable();
    out.dedup();
    (out, settled)
}

/// `PF_EXITING` in a thread's flags (field 9 of its `stat`): set as it begins to exit,
/// before it hands its children over.
pub(crate) const PF_EXITING: u64 = 0x4;

/// The threads of `pid`, its leader last. Read into a buffer on the stack, not with
/// `read_dir`: the C library's directory stream takes a 32 KiB allocation (and a
/// `fstat`) for each of the few reads a server's start and end make. The buffer is as
/// large as that stream's: a thousand threads come in one read, and between reads the
/// kernel resumes by position when the last thread it gave has exited, so a smaller one
/// could skip live threads of a process whose threads come and go. A read that fails
/// partway ends the list there, as a stream's error would.
fn threads(pid: u32) -> Vec<u32> {
    use rustix::fs::{Mode, OFlags, RawDir};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(dir) = rustix::fs::open(format!("/proc/{pid}/task"), flags, Mode::empty()) else {
        return Vec::new();
    };
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 32 * 1024];
    let mut entries = RawDir::new(&dir, &mut buf);
    let mut tids = Vec::new();
    while let Some(Ok(entry)) = entries.next() {
        // `.` and `..` are no number.
        if let Some(tid) = entry.file_name().to_str().ok().and_then(|n| n.parse().ok())
            && tid != pid
        {
            tids.push(tid);
        }
    }
    tids.push(pid);
    tids
}

fn children_of(pid: u32, tids: &[u32]) -> Vec<u32> {
    tids.iter()
        .flat_map(|&tid| thread_children(pid, tid))
        .collect()
}

/// The direct children of thread `tid` of process `pid` alone.
pub(crate) fn thread_children(pid: u32, tid: u32) -> Vec<u32> {
    read_proc(&format!("/proc/{pid}/task/{tid}/children"))
        .map(|list| pids_in(&list).collect())
        .unwrap_or_default()
}

fn pids_in(list: &str) -> impl Iterator<Item = u32> + '_ {
    list.split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
}

/// Every live process below `root` (not `root` itself), each with its start time.
pub fn descendants(root: u32) -> Vec<Proc> {
    let mut seen: BTreeMap<u32, Proc> = BTreeMap::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        for child in children(pid) {
            if child == root || seen.contains_key(&child) {
                continue;
            }
            if let Some(p) = Proc::current(child) {
                seen.insert(child, p);
                todo.push(child);
            }
        }
    }
    seen.into_values().collect()
}

/// Most freeze rounds: each round stops what the last one found, so a tree converges
/// in as many rounds as it is deep; a tree still growing after this many is killed as
/// far as it was found.
const FREEZE_ROUNDS: usize = 64;

/// Ends `members` and every process below any of them: freeze all, walk again until
/// nothing new appears, then kill all. Returns what was killed. A member known to be
/// gone when it was to be frozen is neither walked nor signalled again: its pid and
/// start time can never name a live process again. One whose stat could not be read
/// is walked and signalled again, as any other.
///
/// Once a round finds nothing new, the children of every stopped member are read once
/// more, and the rounds go on if that finds anything: a stopped process creates no thread, but one
/// of its threads already exiting moves its children to another thread, which may have
/// been read before them.
pub fn end_tree(members: &[Proc]) -> Vec<Proc> {
    let mut found: BTreeMap<u32, Proc> = members.iter().map(|p| (p.pid, *p)).collect();
    // Every member looked at, and whether it was there to be stopped.
    let mut frozen: BTreeMap<u32, bool> = BTreeMap::new();
    for _ in 0..FREEZE_ROUNDS {
        let fresh: Vec<Proc> = found
            .values()
            .filter(|p| !frozen.contains_key(&p.pid))
            .copied()
            .collect();
        if fresh.is_empty() {
            // Each stopped process read once, only while it is still the one stopped
            // (same start time); a new child is frozen and walked in the next round.
            let stopped: Vec<u32> = found
                .values()
                .filter(|p| frozen.get(&p.pid) == Some(&true) && p.exists())
                .map(|p| p.pid)
                .collect();
            let before = found.len();
            for child in stopped.into_iter().flat_map(children) {
                if let Some(p) = Proc::current(child) {
                    found.entry(child).or_insert(p);
                }
            }
            if found.len() == before {
                break;
            }
            continue;
        }
        for p in &fresh {
            frozen.insert(p.pid, p.signal(Signal::SIGSTOP));
        }
        for p in fresh.iter().filter(|p| frozen[&p.pid]) {
            for child in descendants(p.pid) {
                found.entry(child.pid).or_insert(child);
            }
        }
    }
    let all: Vec<Proc> = found.into_values().collect();
    for p in all.iter().filter(|p| frozen.get(&p.pid) != Some(&false)) {
        // A stopped process dies of SIGKILL; SIGCONT lets one that ignores nothing run
        // its exit at once instead of waiting to be scheduled.
        if p.signal(Signal::SIGKILL) {
            p.signal(Signal::SIGCONT);
        }
    }
    all
}

/// Reaps `p` if it is a zombie child of this process (an adopted orphan that died):
/// never a pid this process did not adopt, so no exit status tokio waits for is taken.
pub(crate) fn reap(p: &Proc) {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let ours = stat(p.pid).is_some_and(|s| s.start == p.start && s.ppid == std::process::id());
    if ours {
        let _ = waitpid(Pid::from_raw(p.pid as i32), Some(WaitPidFlag::WNOHANG));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn each_field_of_a_stat_line_is_read_from_its_place() {
        // Fields 3 to 22 of proc(5), numbered by their field number where one is read.
        let line = "41 (a) b (c)) S 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            (s.state, s.ppid, s.pgrp, s.flags, s.threads, s.start),
            ('S', 4, 5, 9, 20, 22)
        );
        assert!(parse_stat("41 (a) S 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21").is_none());
        assert!(
            parse_stat("41 (a) S 4 x 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22").is_none()
        );
    }

    #[test]
    fn stat_reads_a_name_with_spaces_and_parentheses() {
        let me = stat(std::process::id()).unwrap();
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw() as u32);
        assert!(me.start > 0);
    }

    /// A process's command name is its executable's file name, any bytes its author
    /// chose: spaces, parentheses, bytes that are not UTF-8. Each is read, so neither it
    /// nor what is below it hides from a walk, and its tree ends.
    #[test]
    fn a_name_of_any_bytes_hides_nothing() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let names: [&[u8]; 3] = [b"x) (y \xff", b"\xfe\xff)", b"ok) R 1 1 1"];
        for name in names {
            let exe = dir.path().join(std::ffi::OsStr::from_bytes(name));
            // A link, not a copy: the name a process runs under is the path `exec` was
            // given, and a copy being written while another test forks cannot be run
            // (ETXTBSY).
            std::os::unix::fs::symlink("/bin/sh", &exe).unwrap();
            let mut child = std::process::Command::new(&exe)
                .args(["-c", "sleep 300 & wait"])
                .spawn()
                .unwrap();
            let root = Proc::current(child.id()).expect("the process is read");
            assert_eq!(stat(root.pid).unwrap().ppid, std::process::id());
            let mut below = Vec::new();
            for _ in 0..200 {
                below = descendants(root.pid);
                if !below.is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(below.len(), 1, "{below:?}");
            assert!(end_tree(&[root]).len() >= 2);
            let _ = child.wait();
        }
    }

    /// Every thread is listed, the leader last, however many: more than one read of
    /// the directory's buffer holds (about a thousand entries).
    #[test]
    fn every_thread_is_listed_whatever_their_number() {
        const THREADS: usize = 1_200;
        let (tx, rx) = std::sync::mpsc::channel();
        let release = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (tx, release) = (tx.clone(), std::sync::Arc::clone(&release));
                std::thread::spawn(move || {
                    tx.send(this_thread()).unwrap();
                    release.wait();
                })
            })
            .collect();
        let spawned: Vec<u32> = rx.iter().take(THREADS).collect();
        let pid = std::process::id();
        let listed = threads(pid);
        release.wait();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(listed.last(), Some(&pid));
        assert_eq!(listed.iter().filter(|&&t| t == pid).count(), 1);
        for tid in spawned {
            assert!(listed.contains(&tid), "thread {tid} missing");
        }
        assert!(
            threads(u32::MAX).is_empty(),
            "a process that is not there has no thread"
        );
    }

    /// A process group whose every member is killed when it drops.
    struct Group(i32);

    impl Drop for Group {
        fn drop(&mut self) {
            let _ = nix::sys::signal::killpg(Pid::from_raw(self.0), Signal::SIGKILL);
        }
    }

    /// `script` run by `python3` below `sh`, in a process group of their own: whatever
    /// the test's outcome, nothing of it is left behind (a failed walk would leave what
    /// it started to that group).
    fn python_in_group(script: &str) -> (std::process::Child, Group) {
        let child = std::process::Command::new("sh")
            .args(["-c", "python3 -c \"$0\" & wait", script])
            .process_group(0)
            .spawn()
            .unwrap();
        let group = Group(child.id() as i32);
        (child, group)
    }

    /// A process that ends its leader thread reads as a zombie while its other threads
    /// run and fork: it is walked with what it started, and ended with them.
    #[test]
    fn a_process_whose_leader_thread_exited_is_walked_and_ended() {
        let script = "import ctypes, subprocess, threading, time\n\
            def run():\n    subprocess.Popen(['sleep', '309'])\n    while True: time.sleep(1)\n\
            threading.Thread(target=run).start()\n\
            ctypes.CDLL(None).pthread_exit(None)\n";
        let (mut child, _group) = python_in_group(script);
        let root = Proc::current(child.id()).unwrap();
        let headless = |below: &[Proc]| {
            below
                .iter()
                .any(|p| stat(p.pid).is_some_and(|s| s.state == 'Z' && s.runs()))
        };
        let mut below = Vec::new();
        for _ in 0..500 {
            below = descendants(root.pid);
            if below.len() >= 2 && headless(&below) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(below.len() >= 2 && headless(&below), "{below:?}");
        let killed = end_tree(&[root]);
        assert!(killed.len() >= 3, "{killed:?}");
        let _ = child.wait();
        for p in &below {
            let gone = (0..200).any(|_| {
                let gone = stat(p.pid).is_none_or(|s| s.start != p.start || !s.runs());
                if !gone {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                gone
            });
            assert!(gone, "{p:?} survived");
        }
    }

    /// Threads that fork and exit, still doing so when the tree is ended: an exiting
    /// thread hands its children to another thread of its process. Every process of the
    /// group is gone after the end, wherever the walk met them. (The narrower race, a
    /// thread exiting between two reads of one walk, is too short to meet on purpose.)
    #[test]
    fn children_of_threads_that_exit_while_walked_end_with_the_tree() {
        let script = "import subprocess, threading, time\n\
            def run():\n    subprocess.Popen(['sleep', '308'])\n\
            for _ in range(400):\n    threading.Thread(target=run).start()\n    time.sleep(0.002)\n\
            time.sleep(308)\n";
        let (mut child, _group) = python_in_group(script);
        let group = child.id();
        let root = Proc::current(group).unwrap();
        // The running processes of the group, the shell's own included.
        let members = || {
            std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| stat(*pid).is_some_and(|s| s.pgrp == group && s.runs()))
                .count()
        };
        // Ended while threads still fork and exit.
        let forking = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            members() >= 20
        });
        assert!(forking, "the threads did not fork");
        end_tree(&[root]);
        let _ = child.wait();
        let gone = (0..300).any(|_| {
            let left = members();
            if left > 0 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            left == 0
        });
        assert!(gone, "{} processes of the tree survived", members());
    }

    #[test]
    fn a_setsid_grandchild_is_in_the_tree_and_ends_with_it() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "setsid sh -c 'sleep 300' & sleep 300"])
            .spawn()
            .unwrap();
        let root = Proc::current(child.id()).unwrap();
        let mut below = Vec::new();
        for _ in 0..200 {
            below = descendants(root.pid);
            if below.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(below.len() >= 3, "{below:?}");
        let killed = end_tree(&[root]);
        assert!(killed.len() >= 4);
        let _ = child.wait();
        for p in &below {
            let mut gone = false;
            for _ in 0..200 {
                gone = Proc::current(p.pid).is_none_or(|now| now.start != p.start);
                if gone {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(gone, "{p:?} survived");
        }
    }
}
