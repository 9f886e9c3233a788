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
    let Some(cwd) = cwd else {
        return Ok(workspace.to_path_buf());
    };
    let joined = workspace.join(cwd);
    let real = joined.canonicalize().map_err(|e| {
        format!(
            "cwd `{cwd}` does not resolve ({e}); create it inside the workspace or fix the path"
        )
    })?;
    if !real.starts_with(workspace) {
        return Err(format!(
            "cwd `{cwd}` resolves outside the workspace; use a directory inside {}",
            workspace.display()
        ));
    }
    if !real.is_dir() {
        return Err(format!("cwd `{cwd}` is not a directory"));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::resolve_cwd;

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
    }
}
