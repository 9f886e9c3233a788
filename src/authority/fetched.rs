//! What a package runner will download and run, as a connect approver must see it.
//!
//! `npx -y <value sha256:... length:39>` hides the one fact a reviewer needs: which
//! package comes from the registry. For the runners people declare (`npx`, `pnpm dlx`,
//! `bun x`/`bunx`, `uvx`/`uv tool run`, `pipx run`, `docker run`/`podman run`) the
//! package or image is shown **only** when the runner's command line is read without
//! guessing and the name fits its ecosystem's grammar:
//!
//! - every item before the package is an option this module knows (its value consumed
//!   when it takes one); an unknown option (`--registry`, `--index-url`, `-c`) could
//!   take the next item as its value or change where the package comes from, so the
//!   whole line stays summarized;
//! - the name matches the registry's grammar (npm, PyPI, an OCI reference) within 200
//!   characters, holds no secret shape and is no archive (`x.tgz`, `x.whl`: a local
//!   file to npm and pip);
//! - the runner is a bare name looked up on the allowlisted `PATH` (a `./tools/npx`
//!   committed with the core is not npx), and the declared environment sets nothing
//!   that moves its source or replaces it (`PATH`, `NODE_OPTIONS`, `npm_config_*`,
//!   `UV_*`, `PIP_*`, `PIPX_*`, `BUN_*`, `PNPM_*`, `DOCKER_*`);
//! - when a package option names the package (`npx -p pkg bin`, `uvx --from pkg bin`),
//!   the command it runs is shown too (`runs bin`), and must fit the grammar; a
//!   container's command replaced by arguments after the image is said.
//!
//! What the line cannot see is said beside it in the preview: a runner's own
//! configuration files in the working directory (`.npmrc`, `uv.toml`) can still name
//! another registry.
//! Anything else keeps the spec's rule: positional values as hash/length summaries.
//! Adversary: the declaration's author, who wants a reviewer to read one package while
//! another runs; the bound is that a shown name is exactly the item the runner takes.

use serde::Serialize;

/// The registry a runner fetches from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    /// npm packages (`npx`, `pnpm dlx`, `bunx`).
    Npm,
    /// Python packages (`uvx`, `pipx run`).
    Pypi,
    /// Container images (`docker run`, `podman run`).
    Oci,
}

impl Ecosystem {
    /// The word shown to approvers.
    pub fn as_str(self) -> &'static str {
        match self {
            Ecosystem::Npm => "npm",
            Ecosystem::Pypi => "pypi",
            Ecosystem::Oci => "image",
        }
    }
}

/// The packages (or image) a stdio declaration's runner fetches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Fetched {
    /// The runner as declared (`npx`, `pnpm dlx`, `docker run`, ...).
    pub runner: String,
    /// Where the packages come from.
    pub ecosystem: Ecosystem,
    /// Each package or image, exactly as the runner receives it (version included).
    pub packages: Vec<String>,
    /// The command run when it is not the package's own (`npx -p pkg bin`: `bin`; a
    /// container with arguments after its image: `"(declared arguments)"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
}

/// Declared environment names that move a runner's source or replace the runner.
fn redirects(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper == "PATH"
        || upper == "NODE_OPTIONS"
        || upper == "NODE_PATH"
        || [
            "NPM_CONFIG_",
            "UV_",
            "PIP_",
            "PIPX_",
            "BUN_",
            "PNPM_",
            "DOCKER_",
            "PODMAN_",
            "CONTAINER_",
            "PYTHON",
        ]
        .iter()
        .any(|p| upper.starts_with(p))
}

/// The longest name shown; longer ones stay summaries.
const MAX_NAME: usize = 200;

/// How one runner's command line is read.
struct Grammar {
    ecosystem: Ecosystem,
    /// Options that take no value.
    flags: &'static [&'static str],
    /// Options whose value is a package to fetch (`--package`, `--from`, `--with`).
    package_options: &'static [&'static str],
    /// Options whose value is not a package (`--python 3.12`, `-e NAME`).
    value_options: &'static [&'static str],
    /// Whether a package option replaces the first positional as what is fetched
    /// (`npx -p pkg bin`: `bin` is a command of `pkg`), rather than adding to it
    /// (`uvx --with extra tool`).
    package_option_names_the_package: bool,
}

const NPX: Grammar = Grammar {
    ecosystem: Ecosystem::Npm,
    flags: &[
        "-y",
        "--yes",
        "--no",
        "-q",
        "--quiet",
        "--silent",
        "--prefer-offline",
        "--prefer-online",
        "--offline",
    ],
    package_options: &["-p", "--package"],
    value_options: &[],
    package_option_names_the_package: true,
};

const PNPM_DLX: Grammar = Grammar {
    ecosystem: Ecosystem::Npm,
    flags: &["--silent", "-s"],
    package_options: &["--package"],
    value_options: &[],
    package_option_names_the_package: true,
};

const BUNX: Grammar = Grammar {
    ecosystem: Ecosystem::Npm,
    flags: &["--bun", "--silent", "--verbose", "--no-install"],
    package_options: &["-p", "--package"],
    value_options: &[],
    package_option_names_the_package: true,
};

const UVX: Grammar = Grammar {
    ecosystem: Ecosystem::Pypi,
    flags: &[
        "-q",
        "--quiet",
        "-v",
        "--verbose",
        "--offline",
        "--no-cache",
        "-n",
        "--isolated",
        "--no-progress",
    ],
    package_options: &["--from", "--with", "-w"],
    value_options: &["--python", "-p"],
    package_option_names_the_package: false,
};

const PIPX_RUN: Grammar = Grammar {
    ecosystem: Ecosystem::Pypi,
    flags: &["--no-cache", "-v", "--verbose", "-q", "--quiet"],
    package_options: &["--spec"],
    value_options: &["--python"],
    package_option_names_the_package: true,
};

const CONTAINER_RUN: Grammar = Grammar {
    ecosystem: Ecosystem::Oci,
    flags: &[
        "-i",
        "--interactive",
        "-t",
        "--tty",
        "-it",
        "-ti",
        "--rm",
        "--init",
        "--read-only",
    ],
    package_options: &[],
    // Only options that widen nothing: mounts, networks, devices, capabilities added,
    // security options and env files are not read, so a line with one stays a summary
    // (their values matter as much as the image).
    value_options: &[
        "-e",
        "--env",
        "--name",
        "-w",
        "--workdir",
        "-u",
        "--user",
        "--platform",
        "--pull",
        "-l",
        "--label",
        "--cap-drop",
        "-m",
        "--memory",
        "--cpus",
        "--pids-limit",
    ],
    package_option_names_the_package: true,
};

/// What the runner `command` with `args` fetches, when it can be read exactly; `env`
/// is the names the declaration sets in the server's environment.
///
/// ```
/// use demiurge_mcp::authority::preview::fetched;
/// let args = ["-y".to_string(), "@modelcontextprotocol/server-memory".to_string()];
/// let shown = fetched("npx", &args, &[]).unwrap();
/// assert_eq!(shown.packages, ["@modelcontextprotocol/server-memory"]);
/// assert!(fetched("npx", &["--registry".into(), "x".into(), "y".into()], &[]).is_none());
/// assert!(fetched("npx", &args, &["npm_config_registry"]).is_none());
/// ```
pub fn fetched(command: &str, args: &[String], env: &[&str]) -> Option<Fetched> {
    if command.contains(['/', '\\']) || env.iter().any(|name| redirects(name)) {
        return None;
    }
    let program = command;
    let program = program
        .strip_suffix(".cmd")
        .or_else(|| program.strip_suffix(".exe"))
        .unwrap_or(program);
    let first = args.first().map(String::as_str);
    let second = args.get(1).map(String::as_str);
    let (runner, grammar, rest) = match (program, first, second) {
        ("npx", ..) => ("npx", &NPX, args),
        ("bunx", ..) => ("bunx", &BUNX, args),
        ("bun", Some("x"), _) => ("bun x", &BUNX, &args[1..]),
        ("pnpm", Some("dlx"), _) => ("pnpm dlx", &PNPM_DLX, &args[1..]),
        ("uvx", ..) => ("uvx", &UVX, args),
        ("uv", Some("tool"), Some("run")) => ("uv tool run", &UVX, &args[2..]),
        ("pipx", Some("run"), _) => ("pipx run", &PIPX_RUN, &args[1..]),
        ("docker", Some("run"), _) => ("docker run", &CONTAINER_RUN, &args[1..]),
        ("podman", Some("run"), _) => ("podman run", &CONTAINER_RUN, &args[1..]),
        _ => return None,
    };
    let (packages, runs) = read(grammar, rest)?;
    Some(Fetched {
        runner: runner.to_string(),
        ecosystem: grammar.ecosystem,
        packages,
        runs,
    })
}

/// The packages `rest` names under `grammar` and the command run when it is not the
/// package's own, or `None` when any item before the first positional is not
/// understood or any name breaks its grammar.
fn read(grammar: &Grammar, rest: &[String]) -> Option<(Vec<String>, Option<String>)> {
    let mut named = Vec::new();
    let mut items = rest.iter();
    let positional = loop {
        let item = items.next()?;
        if item == "--" {
            break items.next()?;
        }
        if !item.starts_with('-') {
            break item;
        }
        let (option, inline) = match item.split_once('=') {
            Some((option, value)) => (option, Some(value)),
            None => (item.as_str(), None),
        };
        if grammar.flags.contains(&option) && inline.is_none() {
            continue;
        }
        let names_package = grammar.package_options.contains(&option);
        if !names_package && !grammar.value_options.contains(&option) {
            return None;
        }
        let value = match inline {
            Some(value) => value,
            None => items.next()?.as_str(),
        };
        if names_package {
            named.push(value.to_string());
        }
    };
    let after = items.next().is_some();
    let (packages, runs) = match (named.is_empty(), grammar.ecosystem) {
        // A container's command is whatever follows its image.
        (_, Ecosystem::Oci) => (
            vec![positional.clone()],
            after.then(|| "(declared arguments)".to_string()),
        ),
        (true, _) => (vec![positional.clone()], None),
        // `npx -p pkg bin`, `uvx --from pkg bin`, `pipx run --spec pkg bin`: the
        // positional is the command, which a reviewer must read too.
        (false, _) if grammar.package_option_names_the_package || named_from(rest) => {
            if !is_command_name(positional) {
                return None;
            }
            (named, Some(positional.clone()))
        }
        (false, _) => {
            named.push(positional.clone());
            (named, None)
        }
    };
    packages
        .iter()
        .all(|name| fits(grammar.ecosystem, name))
        .then_some((packages, runs))
}

/// Whether `uvx`'s `--from` names the package (the positional is then its command).
fn named_from(rest: &[String]) -> bool {
    rest.iter()
        .any(|item| item == "--from" || item.starts_with("--from="))
}

/// A command a package provides: a plain executable name.
fn is_command_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !name.starts_with(['.', '-'])
}

/// Whether `name` is a well-formed package of `ecosystem` that may be shown.
fn fits(ecosystem: Ecosystem, name: &str) -> bool {
    use std::sync::LazyLock;
    static NPM: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(?:@[A-Za-z0-9][A-Za-z0-9.+_~^-]*)?$",
        )
        .expect("valid regex")
    });
    static PYPI: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?(?:(?:==|>=|<=|~=|@)[A-Za-z0-9][A-Za-z0-9.*+!_-]*)?$",
        )
        .expect("valid regex")
    });
    static OCI: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"^(?:[a-z0-9][a-z0-9.-]*(?::[0-9]{1,5})?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$",
        )
        .expect("valid regex")
    });
    let grammar = match ecosystem {
        Ecosystem::Npm => &NPM,
        Ecosystem::Pypi => &PYPI,
        Ecosystem::Oci => &OCI,
    };
    const ARCHIVES: &[&str] = &[".tgz", ".tar", ".gz", ".zip", ".whl", ".egg", ".bz2", ".xz"];
    let lower = name.to_ascii_lowercase();
    name.len() <= MAX_NAME
        && !ARCHIVES.iter().any(|a| lower.ends_with(a))
        && grammar.is_match(name)
        && crate::redact::Redactor::new().secret_spans(name).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(command: &str, args: &[&str]) -> Option<Vec<String>> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        fetched(command, &args, &[]).map(|f| f.packages)
    }

    #[test]
    fn runners_name_what_they_fetch() {
        let cases: &[(&str, &[&str], &str)] = &[
            (
                "npx",
                &["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                "@modelcontextprotocol/server-filesystem",
            ),
            ("npx", &["--yes", "pkg@1.2.3"], "pkg@1.2.3"),
            ("npx.cmd", &["-y", "pkg@latest"], "pkg@latest"),
            ("npx", &["-y", "--package=tool-pkg", "tool-bin"], "tool-pkg"),
            ("pnpm", &["dlx", "@scope/a"], "@scope/a"),
            ("bunx", &["b-pkg"], "b-pkg"),
            ("bun", &["x", "b-pkg"], "b-pkg"),
            ("uvx", &["mcp-server-time"], "mcp-server-time"),
            (
                "uvx",
                &["--python", "3.12", "mcp-server-git==0.6"],
                "mcp-server-git==0.6",
            ),
            (
                "uv",
                &["tool", "run", "mcp-server-fetch"],
                "mcp-server-fetch",
            ),
            (
                "pipx",
                &["run", "--spec", "Pkg[extra]", "bin"],
                "Pkg[extra]",
            ),
            (
                "docker",
                &[
                    "run",
                    "-i",
                    "--rm",
                    "-e",
                    "TOKEN",
                    "ghcr.io/github/github-mcp-server",
                ],
                "ghcr.io/github/github-mcp-server",
            ),
            (
                "podman",
                &["run", "-i", "mcp/time:latest"],
                "mcp/time:latest",
            ),
            (
                "docker",
                &["run", "--rm", "--", "localhost:5000/a/b"],
                "localhost:5000/a/b",
            ),
        ];
        for (command, args, package) in cases {
            assert_eq!(
                shown(command, args).as_deref(),
                Some(&[package.to_string()][..]),
                "{command} {args:?}"
            );
        }
        assert_eq!(
            shown("uvx", &["--with", "extra", "mcp-tool"]).unwrap(),
            ["extra", "mcp-tool"],
            "uvx's --with adds packages beside the one that runs"
        );
        // A package option's positional is the command run, and is said.
        let runs = |command: &str, args: &[&str]| {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            fetched(command, &args, &[]).and_then(|f| f.runs)
        };
        assert_eq!(
            runs(
                "npx",
                &[
                    "-y",
                    "-p",
                    "@modelcontextprotocol/server-memory",
                    "sh",
                    "-c",
                    "x"
                ]
            )
            .as_deref(),
            Some("sh")
        );
        assert_eq!(
            runs("uvx", &["--from", "mcp-server-time", "python", "-c", "x"]).as_deref(),
            Some("python")
        );
        assert_eq!(
            runs("docker", &["run", "-i", "python:3.12", "python", "-c", "x"]).as_deref(),
            Some("(declared arguments)")
        );
        assert_eq!(
            runs("npx", &["-y", "pkg", "--flag"]),
            None,
            "the package's own command"
        );
    }

    #[test]
    fn anything_not_read_exactly_stays_a_summary() {
        let cases: &[(&str, &[&str])] = &[
            // Options that could change the source or take the next item.
            ("npx", &["--registry", "http://evil", "pkg"]),
            ("npx", &["--registry=http://evil", "pkg"]),
            ("uvx", &["--index-url", "http://evil", "pkg"]),
            ("pnpm", &["dlx", "-c", "pkg && other"]),
            ("docker", &["run", "--privileged", "img"]),
            ("docker", &["run", "-v"]),
            (
                "docker",
                &[
                    "run",
                    "-v",
                    "/var/run/docker.sock:/var/run/docker.sock",
                    "img",
                ],
            ),
            ("docker", &["run", "--network", "host", "img"]),
            (
                "docker",
                &["run", "--security-opt", "apparmor=unconfined", "img"],
            ),
            ("docker", &["run", "--env-file", ".env", "img"]),
            // A runner given by path is whatever that file is.
            ("./tools/npx", &["-y", "pkg"]),
            ("/usr/bin/npx", &["-y", "pkg"]),
            // Local archives, and a command that is no plain name.
            ("npx", &["-y", "pkg.tgz"]),
            ("uvx", &["pkg-1.0-py3-none-any.whl"]),
            ("npx", &["-y", "-p", "pkg", "./evil.sh"]),
            // A flag given a value is not that flag.
            ("npx", &["-y=pkg", "other"]),
            // Names outside the grammar.
            ("npx", &["-y", "git+https://host/x.git"]),
            ("npx", &["-y", "./local"]),
            ("npx", &["-y", "UPPER"]),
            ("npx", &["-y", "pkg\nforged: line"]),
            ("npx", &["-y", "pkg with space"]),
            ("uvx", &["git+https://github.com/x/y"]),
            ("uvx", &["pkg @ https://host/x.whl"]),
            ("docker", &["run", "Image"]),
            ("docker", &["run", "img:tag@sha256:short"]),
            // An uninterpolated reference is never resolved for the preview.
            ("npx", &["-y", "${PACKAGE}"]),
            ("uvx", &["${PACKAGE:-pkg}"]),
            // Not a runner, or a runner without its subcommand.
            ("node", &["server.js"]),
            ("pnpm", &["exec", "pkg"]),
            ("docker", &["exec", "-i", "box"]),
            ("uv", &["run", "pkg"]),
            ("npx", &[]),
            ("npx", &["-y"]),
        ];
        for (command, args) in cases {
            assert_eq!(shown(command, args), None, "{command} {args:?}");
        }
        let long = format!("p{}", "a".repeat(MAX_NAME));
        assert_eq!(shown("npx", &[&long]), None);
        // A declared environment that moves the source or replaces the runner.
        let args = vec!["-y".to_string(), "pkg".to_string()];
        for env in [
            "PATH",
            "NODE_OPTIONS",
            "npm_config_registry",
            "NPM_CONFIG_USERCONFIG",
        ] {
            assert!(fetched("npx", &args, &[env]).is_none(), "{env}");
        }
        for env in ["UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_INDEX_URL"] {
            assert!(
                fetched("uvx", &["pkg".to_string()], &[env]).is_none(),
                "{env}"
            );
        }
        assert!(fetched("npx", &args, &["REGION"]).is_some());
    }
}
