//! The reaper: a small shell process that outlives the host by design, told each server
//! process as it starts and ends, which ends whatever is left when the host dies.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::process::tree::Proc;

use super::Inner;

/// The reaper (`$1`: the servers' `HOME=` entry, `$2`: the start of a confined
/// server's): reads `+pid:start` and `-pid:start`
/// lines until end of file, then ends every recorded process still alive (same start
/// time), with every process below it, freezing before killing; a recorded process
/// that leads its own group takes the group with it. A `.` line means the host is
/// closing on purpose. Without it the host died: once the reaper is reparented (the
/// kernel closes a dying process's files before it reparents its children), the host's
/// former children carrying the servers' HOME are taken too: orphans adopted since the
/// last sweep, reparented with the reaper.
pub(super) const REAPER: &str = r#"
trap '' HUP INT TERM QUIT PIPE
marker=$1
confined=$2
host=$PPID
entries=' '
clean=0
# carries DIR: whether the environment of /proc/PID has the servers' HOME: exactly
# $marker, or one under $confined (a confined server's own home). A process whose
# leader thread exited (its info just read state Z) reads it from the first four of
# its other threads, which share one memory image.
carries() {
    envs="$1/environ"
    if [ "$state" = Z ]; then
        asked=0
        for t in "$1"/task/*; do
            [ "$t" = "$1/task/${1#/proc/}" ] && continue
            [ "$asked" -lt 4 ] || break
            envs="$envs $t/environ"
            asked=$((asked + 1))
        done
    fi
    for env in $envs; do
        tr '\0' '\n' 2>/dev/null < "$env" | {
            while IFS= read -r kv; do
                [ "$kv" = "$marker" ] && exit 0
                case $kv in "$confined"*) exit 0 ;; esac
            done
            exit 1
        } && return 0
    done
    return 1
}
# info PID: state, ppid, pgrp and start of a running process; fails for a zombie (but
# one whose leader thread alone exited: field 20 counts other threads), a gone process
# or a stat it cannot read. The name (field 2) may hold anything, newlines included:
# every line is read, and fields are counted from the last ") ".
info() {
    s=''
    part=''
    { while IFS= read -r part || [ -n "$part" ]; do s="$s $part"; part=''; done; } \
        2>/dev/null < "/proc/$1/stat" || [ -n "$s" ] || return 1
    rest=${s##*) }
    set -- $rest
    [ $# -ge 20 ] || return 1
    state=$1
    ppid=$2
    pgrp=$3
    threads=${18}
    shift 19
    start=$1
    [ "$state" != Z ] || [ "$threads" -gt 1 ]
}
while IFS= read -r line; do
    case $line in
        +*) entries="$entries${line#+} " ;;
        .) clean=1 ;;
        -*)
            kept=' '
            for e in $entries; do [ "$e" = "${line#-}" ] || kept="$kept$e "; done
            entries=$kept
            ;;
    esac
done
found=$entries
waited=0
while [ "$clean" = 0 ] && [ "$waited" -lt 40 ]; do
    info $$
    [ "$ppid" = "$host" ] || break
    sleep 0.05 2>/dev/null || sleep 1
    waited=$((waited + 1))
done
info $$
now=$ppid
if [ "$clean" = 0 ] && [ "$now" != "$host" ]; then
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        info "$p" || continue
        [ "$ppid" = "$now" ] || continue
        if carries "$d"; then
            found="$found$p:$start "
        fi
    done
fi
# below PID: adds the running children of PID to found; grew=1 when one is new.
below() {
    for f in /proc/"$1"/task/*/children; do
        kids=''
        read -r kids 2>/dev/null < "$f"
        for k in $kids; do
            info "$k" || continue
            case $found in *" $k:$start "*) ;; *) found="$found$k:$start " grew=1 ;; esac
        done
    done
}
stopped=' '
round=0
while [ "$round" -lt 64 ]; do
    round=$((round + 1))
    grew=0
    for e in $found; do
        case $stopped in *" $e "*) continue ;; esac
        pid=${e%%:*}
        info "$pid" || continue
        [ "$start" = "${e#*:}" ] || continue
        kill -STOP "$pid" 2>/dev/null
        stopped="$stopped$e "
        grew=1
        below "$pid"
    done
    if [ "$grew" = 0 ]; then
        # Nothing new: every stopped process is read once more (a thread already
        # exiting moves its children to a thread read before them).
        for e in $stopped; do
            info "${e%%:*}" && [ "$start" = "${e#*:}" ] && below "${e%%:*}"
        done
        [ "$grew" = 1 ] || break
    fi
done
for e in $stopped; do
    pid=${e%%:*}
    if info "$pid" && [ "$pgrp" = "$pid" ]; then kill -KILL -"$pid" 2>/dev/null; fi
    kill -KILL "$pid" 2>/dev/null
    kill -CONT "$pid" 2>/dev/null
done
"#;

/// Most ended processes held back from the reaper (see [`tell`]).
pub(super) const FORGET_BATCH: usize = 64;

/// Tells the reaper about `p` (`+` to watch, `-` to forget). The pipe is
/// non-blocking: a reaper that does not read (stopped, stuck) or died is killed and
/// started again, told everything recorded, and the registry never waits on it.
///
/// A `-` is held back, to go with the next `+` (or the next sweep's [`forget`]):
/// written alone, it would wake the reaper for nothing. Until then the reaper keeps a
/// process that ended, which it passes over if the host dies: it ends a recorded
/// process only while its start time is the one recorded.
pub(super) fn tell(inner: &mut Inner, sign: char, p: &Proc) {
    if sign == '-' {
        if inner.reaper.is_some() {
            inner.forgotten.push(*p);
        }
        if inner.forgotten.len() >= FORGET_BATCH {
            forget(inner);
        }
        return;
    }
    let mut lines = forgotten_lines(inner);
    push_line(&mut lines, sign, p);
    write(inner, &lines);
}

/// Adds the line that tells the reaper `sign` (`+`, `-`) and `p`.
fn push_line(lines: &mut String, sign: char, p: &Proc) {
    use std::fmt::Write as _;
    let _ = writeln!(lines, "{sign}{}:{}", p.pid, p.start);
}

/// Tells the reaper every ended process held back.
pub(super) fn forget(inner: &mut Inner) {
    if !inner.forgotten.is_empty() {
        let lines = forgotten_lines(inner);
        write(inner, &lines);
    }
}

fn forgotten_lines(inner: &mut Inner) -> String {
    let mut lines = String::new();
    for q in inner.forgotten.drain(..) {
        push_line(&mut lines, '-', &q);
    }
    lines
}

/// Writes `lines` to the reaper, or starts it again (telling it everything recorded)
/// when the write fails or there is none.
fn write(inner: &mut Inner, lines: &str) {
    let written = inner
        .reaper
        .as_mut()
        .is_some_and(|(_, stdin)| stdin.write_all(lines.as_bytes()).is_ok());
    if !written {
        restart_reaper(inner);
    }
}

/// Replaces the reaper with a fresh one that knows every recorded process.
pub(super) fn restart_reaper(inner: &mut Inner) {
    // The new reaper hears only what is recorded now.
    inner.forgotten.clear();
    if let Some((mut old, stdin)) = inner.reaper.take() {
        drop(stdin);
        let _ = old.kill();
        let _ = old.wait();
    }
    let Some((marker, confined)) = inner.marker.clone() else {
        return;
    };
    inner.reaper = spawn_reaper(&marker, &confined);
    let mut lines = String::new();
    for q in inner
        .trees
        .values()
        .flat_map(|t| std::iter::once(&t.root).chain(t.members.values()))
    {
        push_line(&mut lines, '+', q);
    }
    if let Some((_, stdin)) = inner.reaper.as_mut()
        && stdin.write_all(lines.as_bytes()).is_err()
    {
        tracing::warn!(
            "the process reaper does not take its list; servers may outlive a killed host"
        );
    }
}

pub(super) fn spawn_reaper(marker: &[u8], confined: &[u8]) -> Option<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    let marker = String::from_utf8_lossy(marker).into_owned();
    let confined = String::from_utf8_lossy(confined).into_owned();
    let spawned = Command::new("/bin/sh")
        .args(["-c", REAPER, "demiurge-reaper", &marker, &confined])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match spawned {
        Ok(mut child) => {
            let stdin = child.stdin.take()?;
            let nonblocking = nix::fcntl::fcntl(
                &stdin,
                nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
            );
            if nonblocking.is_err() {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Some((child, stdin))
        }
        Err(e) => {
            tracing::warn!(
                "cannot start the process reaper ({e}); servers may outlive a killed host"
            );
            None
        }
    }
}
