//! Line edits of existing files: grants added to or removed from `agent.yaml`, a
//! declaration's `enabled` flag set; the user's comments and order stay.

use super::declared::yaml_string;

/// `agent.yaml` with grants for `server` added under `capabilities.defaults`, by line
/// edits; `None` when the file's shape is not one these edits understand.
pub(crate) fn with_grants(manifest: &str, server: &str) -> Option<String> {
    let grants = [
        format!("mcp.connect:{server}"),
        format!("mcp.call:{server}"),
    ];
    let lines: Vec<&str> = manifest.lines().collect();
    let missing: Vec<&String> = grants
        .iter()
        .filter(|g| {
            !lines
                .iter()
                .any(|l| grant_key(l).is_some_and(|k| k == g.as_str()))
        })
        .collect();
    if missing.is_empty() {
        return Some(manifest.to_string());
    }
    let entry = |g: &str| format!("    {}: {{scope: core}}", yaml_string(g));
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mentioned = lines.iter().any(|l| l.starts_with("capabilities"));
    let capabilities = lines.iter().position(|l| l.trim_end() == "capabilities:");
    // `  defaults:` of that section: after it, before the next top-level key.
    let defaults = capabilities.and_then(|c| {
        lines[c + 1..]
            .iter()
            .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('#'))
            .position(|l| l.trim_end() == "  defaults:")
            .map(|i| c + 1 + i)
    });
    match (capabilities, defaults) {
        (None, None) if mentioned => return None,
        (Some(_), Some(defaults)) => {
            for (i, g) in missing.iter().enumerate() {
                out.insert(defaults + 1 + i, entry(g));
            }
        }
        (None, None) => {
            out.push("capabilities:".into());
            out.push("  defaults:".into());
            out.extend(missing.iter().map(|g| entry(g)));
        }
        _ => return None,
    }
    Some(out.join("\n") + "\n")
}

/// The grant a line of `capabilities.defaults` names, quoted or not: the text before
/// the first `: ` (flow form) or the final `:` (block form). Grant names hold colons,
/// never a colon followed by a space.
pub(super) fn grant_key(line: &str) -> Option<&str> {
    let trimmed = line.trim();
    if line.len() - line.trim_start().len() < 4 || trimmed.starts_with('#') {
        return None;
    }
    let key = match trimmed.split_once(": ") {
        Some((key, _)) => key,
        None => trimmed.strip_suffix(':')?,
    };
    Some(key.trim_matches('"').trim_matches('\''))
}

/// `agent.yaml` without the grants of `server` (a block-form grant's nested lines
/// go with it).
pub(crate) fn without_grants(manifest: &str, server: &str) -> String {
    let grants = [
        format!("mcp.connect:{server}"),
        format!("mcp.call:{server}"),
    ];
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut kept = Vec::new();
    let mut dropping: Option<usize> = None;
    for line in manifest.lines() {
        if let Some(depth) = dropping {
            if !line.trim().is_empty() && indent(line) > depth {
                continue;
            }
            dropping = None;
        }
        if grant_key(line).is_some_and(|k| grants.iter().any(|g| g == k)) {
            dropping = Some(indent(line));
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

/// The declaration with its top-level `enabled:` set, by a line edit (its comment
/// kept), or a first line added.
pub(crate) fn with_enabled(yaml: &str, enabled: bool) -> String {
    let mut done = false;
    let mut out: Vec<String> = yaml
        .lines()
        .map(|line| match line.strip_prefix("enabled:") {
            Some(rest) if !done => {
                done = true;
                let comment = rest
                    .find('#')
                    .map(|i| format!("  {}", &rest[i..]))
                    .unwrap_or_default();
                format!("enabled: {enabled}{comment}")
            }
            _ => line.to_string(),
        })
        .collect();
    if !done {
        out.insert(0, format!("enabled: {enabled}"));
    }
    out.join("\n") + "\n"
}
