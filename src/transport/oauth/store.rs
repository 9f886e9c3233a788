//! Where tokens live: one file (0600) per principal, server identity and resource under
//! `<home>/oauth/`, read and written by rmcp's credential store interface.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oauth2::TokenResponse;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

/// Where the tokens of `declaration`'s server, obtained for `principal`, live:
/// `<home>/oauth/<A>-<B>.json`, `A` a digest of the principal and the server id (what
/// `auth logout` removes), `B` of the declaration's fingerprint (a changed client or
/// scope is a new token) and the resource URL. `None` for a stdio server.
pub fn token_file(
    home: &Path,
    principal: &str,
    declaration: &crate::core::Declaration,
) -> Option<PathBuf> {
    let crate::core::Endpoint::StreamableHttp { url, .. } = &declaration.endpoint else {
        return None;
    };
    let rest = format!("{}\n{}", declaration.fingerprint, url.url().as_str());
    let rest = crate::digest::sha256_hex(rest.as_bytes());
    Some(home.join("oauth").join(format!(
        "{}-{}.json",
        server_prefix(principal, &declaration.server_id),
        &rest[..16]
    )))
}

/// Every token file of `server` for `principal`, whatever declaration obtained it.
pub fn token_files_of(home: &Path, principal: &str, server: &str) -> Vec<PathBuf> {
    let prefix = format!("{}-", server_prefix(principal, server));
    std::fs::read_dir(home.join("oauth"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"))
        })
        .map(|e| e.path())
        .collect()
}

pub(super) fn server_prefix(principal: &str, server: &str) -> String {
    crate::digest::sha256_hex(format!("{principal}\n{server}").as_bytes())[..16].to_string()
}

/// Credentials in one 0600 file (its directory 0700), written whole through a
/// temporary file and a rename, never followed through a symlink; or in memory when no
/// file is given. Every token that passes through is learned by the connection's
/// redactor.
pub(super) struct FileStore {
    path: Option<PathBuf>,
    learned: Arc<crate::redact::Learned>,
    memory: std::sync::Mutex<Option<StoredCredentials>>,
}

impl FileStore {
    /// A store at `path` (in memory only when `None`), teaching `learned` every token
    /// it reads or saves.
    pub(super) fn new(path: Option<PathBuf>, learned: Arc<crate::redact::Learned>) -> Self {
        Self {
            path,
            learned,
            memory: std::sync::Mutex::new(None),
        }
    }

    fn learn(&self, credentials: &StoredCredentials) {
        if let Some(tokens) = &credentials.token_response {
            self.learned
                .learn("oauth_access_token", tokens.access_token().secret());
            if let Some(refresh) = tokens.refresh_token() {
                self.learned.learn("oauth_refresh_token", refresh.secret());
            }
        }
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let Some(path) = self.path.clone() else {
            return Ok(self.memory.lock().ok().and_then(|m| m.clone()));
        };
        let loaded = read_store(path).await?;
        if let Some(credentials) = &loaded {
            self.learn(credentials);
        }
        Ok(loaded)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.learn(&credentials);
        let Some(path) = self.path.clone() else {
            if let Ok(mut memory) = self.memory.lock() {
                *memory = Some(credentials);
            }
            return Ok(());
        };
        let text = serde_json::to_vec(&credentials)
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
        tokio::task::spawn_blocking(move || write_private(&path, &text))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        if let Ok(mut memory) = self.memory.lock() {
            *memory = None;
        }
        let Some(path) = &self.path else {
            return Ok(());
        };
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(AuthError::CredentialStoreError(e.to_string()))
            }
            _ => Ok(()),
        }
    }
}

/// Reads a token file: a regular file owned by this user and 0600, at most 1 MiB; a file
/// that does not parse is as good as none (authorize again).
pub(super) async fn read_store(path: PathBuf) -> Result<Option<StoredCredentials>, AuthError> {
    {
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            use std::os::unix::fs::MetadataExt;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
                .open(&path);
            let file = match file {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(AuthError::CredentialStoreError(e.to_string())),
            };
            let meta = file
                .metadata()
                .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
            // The home's owner is this runtime's user (it made the directory 0700).
            let owner = path
                .parent()
                .and_then(|dir| std::fs::metadata(dir).ok())
                .map(|dir| dir.uid());
            let mine = owner == Some(meta.uid());
            if !meta.is_file() || !mine || meta.mode() & 0o077 != 0 {
                return Err(AuthError::CredentialStoreError(
                    "the token file is not a private regular file of this user; remove it with `demiurge auth logout`".into(),
                ));
            }
            let mut text = String::new();
            file.take(1024 * 1024)
                .read_to_string(&mut text)
                .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?;
            Ok(serde_json::from_str(&text).ok())
        })
        .await
        .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
    }
}

pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::process::private_dir(dir)?;
    // A name of its own per save: two saves never write the same temporary file.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temporary = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("oauth"),
        std::process::id(),
        SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&temporary)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}
