//! Child process hygiene: the allowlisted environment, `${NAME}` interpolation, private
//! files and directories, and stderr capture into a bounded anonymous file.

mod child;
mod registry;
mod stderr;
pub mod tree;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub(crate) use child::ChildProcess;
pub use child::{CloseReport, StderrLog};
pub use registry::{Registry, SWEEP};
pub use stderr::{
    STDERR_CAPTURE_CAP, STDERR_TAIL_CHARS, STDERR_TAIL_LINES, STDERR_WINDOW_CHARS, StderrCapture,
    append_stderr_log,
};

/// Host variables a child may inherit (when set): nothing else of the host leaks.
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "COLORTERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TZ",
];

/// A snapshot of the host environment. Passed explicitly so tests never mutate the
/// process environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEnv(pub BTreeMap<String, String>);

impl HostEnv {
    /// The current process environment (non-UTF-8 entries skipped).
    pub fn from_process() -> Self {
        HostEnv(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// The host's value of `name`, when it has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

/// A `${NAME}` reference to a variable the host does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("missing environment variable: {0}")]
pub struct MissingVariable(pub String);

/// One piece of a declared value: literal text, or a reference with its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    /// `${NAME}` (`default: None`) or `${NAME:-default}`.
    Var {
        name: &'a str,
        default: Option<&'a str>,
    },
}

/// A `${...}` that is neither `${NAME}` nor `${NAME:-default}` (VS Code's `${input:x}`,
/// shell's `${X:?}`, an unclosed `${`): a load error, never a literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "an unsupported `${{...}}` form; write `${{NAME}}` or `${{NAME:-default}}` (NAME: letters, digits, `_`)"
)]
pub struct UnsupportedReference;

/// The pieces of `value`. A `$` not followed by `{` is text.
fn pieces(value: &str) -> Result<Vec<Piece<'_>>, UnsupportedReference> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        if start > 0 {
            out.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(UnsupportedReference)?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if !is_var_name(name) {
            return Err(UnsupportedReference);
        }
        out.push(Piece::Var { name, default });
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// Checks that every `${...}` of `value` is a form interpolation knows (`${NAME}`,
/// `${NAME:-default}`).
///
/// # Errors
/// [`UnsupportedReference`].
pub fn check_references(value: &str) -> Result<(), UnsupportedReference> {
    pieces(value).map(drop)
}

/// Replaces every `${NAME}` in `value` from `env`, and every `${NAME:-default}` from
/// `env` or, when the host has no such variable or it is empty, with `default`. No
/// escapes; a `$` not followed by `{` stays as it is.
///
/// # Errors
/// [`MissingVariable`] naming the first variable the host does not have (and no default
/// covers). A value whose references do not parse names its first reference-looking
/// text as missing; the loader refuses such values, so it never gets here.
pub fn interpolate(value: &str, env: &HostEnv) -> Result<String, MissingVariable> {
    let pieces = pieces(value).map_err(|_| MissingVariable("${...}".into()))?;
    let mut out = String::with_capacity(value.len());
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Var { name, default } => match (env.get(name), default) {
                (Some(""), Some(d)) => out.push_str(d),
                (Some(v), _) => out.push_str(v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(MissingVariable(name.to_string())),
            },
        }
    }
    Ok(out)
}

/// [`interpolate`] over every value of a map (declared env or headers).
///
/// # Errors
/// The first [`MissingVariable`].
pub fn interpolate_all(
    map: &BTreeMap<String, String>,
    env: &HostEnv,
) -> Result<BTreeMap<String, String>, MissingVariable> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), interpolate(v, env)?)))
        .collect()
}

/// Every name `value` references (`${NAME}` and `${NAME:-default}`).
pub fn referenced_names(value: &str) -> Vec<String> {
    pieces(value)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Var { name, .. } => Some(name.to_string()),
            Piece::Text(_) => None,
        })
        .collect()
}

/// The names `value` references without a default: what the host must have for it to
/// interpolate.
pub fn required_names(value: &str) -> Vec<&str> {
    pieces(value)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Var {
                name,
                default: None,
            } => Some(name),
            _ => None,
        })
        .collect()
}

/// The `${NAME}` references of `value`, with their host values: secrets in their own
/// right (`Bearer ${TOKEN}` makes the token secret, not only the whole header). A
/// default is written in the core, so it is no secret of the host's.
pub fn referenced_values(value: &str, env: &HostEnv) -> Vec<(String, String)> {
    pieces(value)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|piece| match piece {
            Piece::Var { name, .. } => env
                .get(name)
                .filter(|v| !v.is_empty())
                .map(|v| (name.to_string(), v.to_string())),
            Piece::Text(_) => None,
        })
        .collect()
}

fn is_var_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The complete environment of a stdio child: the allowlist, the dedicated `HOME`,
/// then the declared (already interpolated) entries.
pub fn child_environment(
    host: &HostEnv,
    home: &Path,
    declared: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = ENV_ALLOWLIST
        .iter()
        .filter_map(|k| host.get(k).map(|v| (k.to_string(), v.to_string())))
        .collect();
    env.insert("HOME".into(), home.display().to_string());
    env.extend(declared.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Creates `dir` and makes it 0700 whatever the umask; every parent it has to create is
/// created 0700 too (parents that exist are left as they are). A symlink at `dir` is
/// refused.
///
/// # Errors
/// IO errors, or `InvalidInput` for a symlink.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if meta.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a symlink; refusing to use it", dir.display()),
            ));
        }
        // Already what this makes (ours, 0700): nothing to create or change. This is
        // the common case, met for every session's directories; a chmod on it would
        // still write its inode.
        if meta.is_dir() && meta.mode() & 0o7777 == 0o700 && meta.uid() == effective_uid() {
            return Ok(());
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// This process's effective user, read once (a host that changes user afterwards meets
/// a refused write where it met a refused `chmod`).
fn effective_uid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Writes `bytes` to `path` (0600) through a temporary file in the same directory
/// (0700, made if missing) renamed over it: readers see the old or the new file, never
/// half of one, and a symlink at `path` is replaced, never written through.
///
/// # Errors
/// IO errors.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    private_dir(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.persist(path).map(drop).map_err(|e| e.error)
}

/// What identifies one version of a regular file: modification time, length, inode
/// (a rename always brings a new inode). `None` for a missing file or a symlink.
pub fn file_stamp(path: &Path) -> Option<(std::time::SystemTime, u64, u64)> {
    stamp_of(&std::fs::symlink_metadata(path).ok()?)
}

/// [`file_stamp`] of what a `symlink_metadata` already returned.
pub fn stamp_of(meta: &std::fs::Metadata) -> Option<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    meta.file_type()
        .is_file()
        .then(|| (meta.modified().ok(), meta.len(), meta.ino()))
        .and_then(|(m, len, ino)| Some((m?, len, ino)))
}

/// The bytes of the regular file at `path`, when it has at most `max` of them: opened
/// without following a link and without waiting (a FIFO or device swapped in after a
/// look is refused by the open file's own type), read to `max + 1` bytes at most.
pub fn read_regular(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// Opens `path` for appending, 0600 whatever the umask, its directory 0700; a symlink
/// at `path` is refused, not followed.
///
/// # Errors
/// IO errors (a symlink gives `ELOOP`).
pub fn open_private_append(path: &Path) -> io::Result<File> {
    if let Some(parent) = path.parent() {
        private_dir(parent)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    // A file made now is 0600 unless the umask took more; one made before may be
    // looser. Only then is it changed (a change writes its inode).
    if file.metadata()?.permissions().mode() & 0o7777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HostEnv {
        HostEnv(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn interpolation_replaces_and_reports_missing() {
        let e = env(&[("TOKEN", "t0k")]);
        assert_eq!(interpolate("Bearer ${TOKEN}!", &e).unwrap(), "Bearer t0k!");
        assert_eq!(
            interpolate("$TOKEN costs $5", &e).unwrap(),
            "$TOKEN costs $5"
        );
        assert_eq!(
            interpolate("${NOPE}", &e).unwrap_err(),
            MissingVariable("NOPE".into())
        );
        // Defaults: used when the variable is absent or empty, never over a value.
        let e = env(&[("TOKEN", "t0k"), ("EMPTY", "")]);
        for (value, expected) in [
            ("${TOKEN:-d}", "t0k"),
            ("${NOPE:-d}", "d"),
            ("${EMPTY:-d}", "d"),
            ("${NOPE:-}", ""),
            ("a${NOPE:-b:-c}d", "ab:-cd"),
            ("${NOPE:-https://x.test/}", "https://x.test/"),
        ] {
            assert_eq!(interpolate(value, &e).unwrap(), expected, "{value}");
        }
        assert_eq!(
            referenced_values("${EMPTY:-d} ${TOKEN:-d}", &e),
            [("TOKEN".to_string(), "t0k".to_string())]
        );
        // Every other `${...}` form is refused, not kept as text.
        for bad in [
            "${input:key}",
            "${env:HOME}",
            "${X:?err}",
            "${ not}",
            "${",
            "a ${B",
            "${}",
            "${1X}",
            "${X-d}",
        ] {
            assert!(check_references(bad).is_err(), "{bad}");
        }
        assert!(check_references("plain $HOME ${OK} ${OK2:-x}").is_ok());
    }

    #[test]
    fn child_environment_is_allowlist_home_and_declared() {
        let host = env(&[
            ("PATH", "/bin"),
            ("USER", "root"),
            ("HTTP_PROXY", "x"),
            ("LANG", "C"),
        ]);
        let declared = BTreeMap::from([("API".to_string(), "v".to_string())]);
        let out = child_environment(&host, Path::new("/h/mcp-home"), &declared);
        let names: Vec<&str> = out.keys().map(String::as_str).collect();
        assert_eq!(names, ["API", "HOME", "LANG", "PATH"]);
        assert_eq!(out["HOME"], "/h/mcp-home");
    }

    #[test]
    fn private_files_ignore_umask_and_refuse_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/x.log");
        open_private_append(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dmode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dmode, 0o700);
        let link = dir.path().join("logs/link.log");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open_private_append(&link).is_err());
        // A log opened to others since (or given other bits) is 0600 again once opened.
        for loose in [0o644, 0o604, 0o640, 0o4600, 0o700] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            open_private_append(&path).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o600, "after {loose:o}");
        }
    }

    #[test]
    fn a_private_dir_loosened_since_is_made_0700_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        private_dir(&path).unwrap();
        assert_eq!(mode(&path), 0o700);
        // Opened to others, or given bits a chmod to 0700 clears: each is tightened.
        for loose in [0o755, 0o701, 0o710, 0o2700, 0o1700, 0o500] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            private_dir(&path).unwrap();
            assert_eq!(mode(&path), 0o700, "after {loose:o}");
        }
        // A file where the directory should be is an error, not a directory.
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_dir(&file).is_err());
    }
}
