//! Where a stdio server runs: its declared `cwd`, resolved once against the workspace
//! with symlinks followed, and required to stay inside it (docs/design.md#2-authority).
//! The resolved path is what the spawn uses; it is never resolved again.

use std::path::{Path, PathBuf};

/// Resolves a declared cwd (relative to the workspace), following symlinks, and checks
/// that it stays inside the workspace.
///
/// # Errors
/// A denial reason naming the fix.
pub fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, String> {
    match cwd {
        None => Ok(workspace.to_path_buf()),
        Some(cwd) => resolve_inside(workspace, "cwd", cwd, true),
    }
}

/// Resolves one declared root (relative to the workspace) the way a cwd is: symlinks
/// followed, inside the workspace; a root may be a file or a directory.
///
/// # Errors
/// A denial reason naming the fix.
pub fn resolve_root(workspace: &Path, root: &str) -> Result<PathBuf, String> {
    resolve_inside(workspace, "root", root, false)
}

fn resolve_inside(
    workspace: &Path,
    what: &str,
    declared: &str,
    dir: bool,
) -> Result<PathBuf, String> {
    let shown = crate::text::escape(declared);
    let real = workspace.join(declared).canonicalize().map_err(|e| {
        format!("{what} `{shown}` does not resolve ({e}); create it inside the workspace or fix the path")
    })?;
    if !real.starts_with(workspace) {
        return Err(format!(
            "{what} `{shown}` resolves outside the workspace; use a path inside {}",
            crate::text::escape(&workspace.display().to_string())
        ));
    }
    if dir && !real.is_dir() {
        return Err(format!("{what} `{shown}` is not a directory"));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::{resolve_cwd, resolve_root};

    #[test]
    fn a_cwd_must_resolve_inside_the_workspace() {
        let outer = tempfile::tempdir().unwrap();
        let ws = outer.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::os::unix::fs::symlink(outer.path(), ws.join("escape")).unwrap();
        std::fs::write(ws.join("file"), "").unwrap();
        let ws = ws.canonicalize().unwrap();
        assert_eq!(resolve_cwd(&ws, None).unwrap(), ws);
        assert_eq!(resolve_cwd(&ws, Some("sub")).unwrap(), ws.join("sub"));
        for bad in ["escape", "..", "missing", "file", "/"] {
            assert!(resolve_cwd(&ws, Some(bad)).is_err(), "{bad}");
        }
        // A root may be a file; every other rule is the cwd's.
        assert_eq!(resolve_root(&ws, "file").unwrap(), ws.join("file"));
        assert_eq!(resolve_root(&ws, ".").unwrap(), ws);
        for bad in ["escape", "..", "missing", "/", "sub/../../x"] {
            assert!(resolve_root(&ws, bad).is_err(), "{bad}");
        }
    }
}
