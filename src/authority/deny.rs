//! Why a server was denied a turn: each step of the connect authority that can refuse
//! names itself here, and its words say what would allow it.

use crate::net::Block;

/// Why a server was denied this turn (asked again next turn).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// The session does not hold `mcp.connect:<id>`.
    MissingCapability(String),
    /// The declared `cwd` does not resolve inside the workspace.
    Cwd(String),
    /// The URL policy blocks the declared URL.
    UrlBlocked {
        /// Which rule of the URL policy refused it.
        block: Block,
        /// The origin, when it parsed.
        target: String,
    },
    /// The approver (or the `deny` policy) refused.
    ApprovalDenied,
    /// Nobody answered the connect approval within the runtime's approval deadline.
    ApprovalTimedOut,
    /// The approval broker is not running (it is being restarted).
    BrokerUnavailable,
    /// The host requires confined stdio servers and this one would run unconfined.
    Unconfined,
}

impl std::fmt::Display for DenyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DenyReason::MissingCapability(cap) => write!(
                f,
                "missing capability {cap}; grant it under capabilities.defaults in agent.yaml"
            ),
            DenyReason::Cwd(reason) => f.write_str(reason),
            DenyReason::UrlBlocked { block, target } => {
                let target = if target.is_empty() {
                    "the declared url"
                } else {
                    target
                };
                write!(f, "the URL policy blocks {target} ({})", block.as_str())?;
                if matches!(
                    block,
                    Block::Private | Block::Loopback | Block::Cgnat | Block::LocalhostName
                ) {
                    // A network the host runs its own servers on may be trusted.
                    f.write_str("; to allow it, trust its network: `--trust-network CIDR` on the command line, `UrlPolicy::with_trusted` in `RuntimeConfig::url_policy` when embedding")?;
                }
                Ok(())
            }
            DenyReason::ApprovalDenied => f.write_str("connect approval denied"),
            DenyReason::ApprovalTimedOut => f.write_str(
                "connect approval not answered within the approval deadline; asked again next turn",
            ),
            DenyReason::BrokerUnavailable => f.write_str(
                "the approval broker is restarting; the server is asked for again next turn",
            ),
            DenyReason::Unconfined => f.write_str(
                "this host starts stdio servers only confined (`RuntimeConfig::require_sandbox`); declare `sandbox:` for it",
            ),
        }
    }
}
