//! `demiurge pins list|show SERVER|approve SERVER [KIND:NAME] [--digest HEX]|reset SERVER|KEY`: what servers
//! served when a person approved them, what they serve since and waits for review.
//! Every file of the runtime home's `pins/` that the CLI's principal made is covered;
//! `--workspace` narrows them to one workspace.

use demiurge_mcp::pins::{Change, PinFile, PinStore, render_change};

use super::auth::PRINCIPAL;
use super::{Cli, t};

/// The store and the files of this CLI's principal (and workspace, when given), with
/// their keys, of `server` when named.
fn files(cli: &Cli, server: Option<&str>) -> (PinStore, Vec<(String, PinFile)>) {
    let store = PinStore::open(&cli.home_dir(&demiurge_mcp::HostEnv::from_process()));
    let workspace = cli
        .workspace
        .as_ref()
        .map(|w| std::fs::canonicalize(w).unwrap_or_else(|_| w.clone()));
    let files = store
        .all()
        .into_iter()
        .filter(|(_, f)| f.principal == PRINCIPAL)
        .filter(|(_, f)| server.is_none_or(|s| f.server == s))
        .filter(|(_, f)| {
            workspace
                .as_ref()
                .is_none_or(|w| f.workspace == w.to_string_lossy())
        })
        .collect();
    (store, files)
}

/// The changes a file's pending definitions are, against its approved ones.
fn pending_changes(file: &PinFile) -> Vec<Change> {
    demiurge_mcp::pins::compare(&file.approved, &file.pending)
}

/// `pins list [--json]`.
pub(crate) fn list(cli: &Cli, as_json: bool) -> u8 {
    let (_, files) = files(cli, None);
    if as_json {
        let rows: Vec<_> = files
            .iter()
            .map(|(key, f)| {
                serde_json::json!({
                    "key": key, "server": f.server, "path": f.path, "workspace": f.workspace,
                    "fingerprint": f.fingerprint, "approved": f.approved.len(),
                    "pending": f.pending.len(),
                    "flagged": f.approved.iter().chain(&f.pending).filter(|p| !p.flags.is_empty()).count(),
                })
            })
            .collect();
        super::print_json(&serde_json::json!({ "pins": rows }), true);
        return 0;
    }
    if files.is_empty() {
        println!(
            "nothing pinned yet: a server's definitions are pinned at its first approved connect"
        );
        return 0;
    }
    let rows: Vec<Vec<String>> = files
        .iter()
        .map(|(_, f)| {
            vec![
                t(&f.server).into_owned(),
                format!("{} approved", f.approved.len()),
                match f.pending.len() {
                    0 => "nothing waits".to_string(),
                    n => format!("{n} WAIT FOR REVIEW"),
                },
                format!(
                    "(declaration {})",
                    t(&f.fingerprint.chars().take(12).collect::<String>())
                ),
                t(&f.workspace).into_owned(),
            ]
        })
        .collect();
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    0
}

/// `pins show SERVER [--json]`: what waits, as a diff, and what is pinned.
pub(crate) fn show(cli: &Cli, server: &str, as_json: bool) -> u8 {
    let (_, files) = files(cli, Some(server));
    if files.is_empty() {
        return nothing_pinned(server);
    }
    if as_json {
        let rows: Vec<_> = files
            .iter()
            .map(|(key, f)| serde_json::json!({"key": key, "pins": f, "changes": pending_changes(f)}))
            .collect();
        super::print_json(&serde_json::json!({ "files": rows }), true);
        return 0;
    }
    for (_, f) in &files {
        println!(
            "server `{}` ({}), declaration {}, workspace {}",
            t(&f.server),
            t(&f.path),
            t(&f.fingerprint.chars().take(12).collect::<String>()),
            t(&f.workspace)
        );
        let changes = pending_changes(f);
        if changes.is_empty() {
            println!("  nothing waits for review");
        }
        for change in &changes {
            // Already escaped line by line; indented as it is.
            for line in render_change(change).lines() {
                println!("  {line}");
            }
            println!(
                "    to approve this one: demiurge pins approve {} {}:{} --digest {}",
                t(&f.server),
                change.after.kind.word(),
                t(&change.after.name),
                change.after.digest
            );
        }
        if changes.len() > 1 {
            println!(
                "  to approve all of it: demiurge pins approve {}",
                t(&f.server)
            );
        }
        println!("  pinned:");
        for pin in &f.approved {
            println!(
                "    {} `{}` sha256:{}{}",
                pin.kind.as_str(),
                t(&pin.name),
                &pin.digest[..12.min(pin.digest.len())],
                if pin.flags.is_empty() {
                    String::new()
                } else {
                    format!(" (FLAGGED: {})", pin.flags_in_words())
                }
            );
        }
    }
    0
}

/// `pins approve SERVER [NAME] [--digest HEX]`: what waits becomes what is approved,
/// each approval printed with its digest (what `pins show` printed).
pub(crate) fn approve(cli: &Cli, server: &str, name: Option<&str>, digest: Option<&str>) -> u8 {
    // A short prefix could be matched by a second definition the server crafted.
    if digest.is_some_and(|d| d.len() < 32 || !d.chars().all(|c| c.is_ascii_hexdigit())) {
        eprintln!(
            "error: --digest takes at least 32 hex characters of the digest `pins show` prints"
        );
        return super::USAGE;
    }
    let (store, files) = files(cli, Some(server));
    if files.is_empty() {
        return nothing_pinned(server);
    }
    let mut approved = 0;
    for (key, mut file) in files {
        let done = match file.approve(name, digest) {
            Ok(done) => done,
            Err(e) => {
                eprintln!("error: {}", t(&e));
                return super::USAGE;
            }
        };
        if done.is_empty() {
            continue;
        }
        if let Err(e) = store.save(&key, &mut file) {
            eprintln!(
                "error: cannot write the pins of `{}`: {}",
                t(server),
                t(&e.to_string())
            );
            return 1;
        }
        for (kind, name, digest) in &done {
            println!(
                "approved {} `{}` (sha256:{}) of `{}`",
                kind.as_str(),
                t(name),
                digest,
                t(server)
            );
        }
        approved += done.len();
    }
    match (approved, name.or(digest)) {
        (0, Some(_)) => {
            eprintln!(
                "error: nothing of `{}` waits for review under that name or digest; see `demiurge pins show {}`",
                t(server),
                t(server)
            );
            1
        }
        (0, None) => {
            println!("nothing of `{}` waits for review", t(server));
            0
        }
        (_, _) => {
            println!("running sessions use what was approved from their next turn");
            0
        }
    }
}

/// `pins reset SERVER`: forgets what was pinned; the next approved connect pins anew.
pub(crate) fn reset(cli: &Cli, server: &str) -> u8 {
    let (store, files) = files(cli, Some(server));
    if files.is_empty() && store.unreadable().iter().any(|k| k == server) {
        // An unreadable file, named by the key `pins list` printed.
        return match store.remove(server) {
            Ok(()) => {
                println!("removed the unreadable pin file {}", t(server));
                0
            }
            Err(e) => {
                eprintln!("error: cannot remove it: {}", t(&e.to_string()));
                1
            }
        };
    }
    if files.is_empty() {
        return nothing_pinned(server);
    }
    for (key, _) in &files {
        if let Err(e) = store.remove(key) {
            eprintln!(
                "error: cannot remove the pins of `{}`: {}",
                t(server),
                t(&e.to_string())
            );
            return 1;
        }
    }
    println!(
        "forgot the pins of `{}` ({} file(s)); its next approved connect pins what it serves then",
        t(server),
        files.len()
    );
    0
}

fn nothing_pinned(server: &str) -> u8 {
    eprintln!(
        "error: nothing pinned for server `{}`; its definitions are pinned at its first approved connect (`demiurge pins list` shows what is)",
        t(server)
    );
    1
}
