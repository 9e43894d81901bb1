//! `init/Dockerfile` and the root's `.dockerignore`, read as BuildKit reads
//! them (no Docker engine here): the agent jar the image ships is pinned by
//! the checksum of the jar the tests run, no `--chmod` takes the search bit
//! from the directories a copy creates, the jar ends up readable by the
//! members' users, and the build context keeps the workspace while leaving
//! `target/`, `.git` and secrets out.
//!
//! Needs `scripts/fetch-cassandra 4.1.8` (scripts/test runs it): the
//! Jolokia agent jar the tests run.

use std::path::{Path, PathBuf};

use testworld::real_cassandra::Release;
use testworld::real_cassandra::release::JOLOKIA_AGENT;

#[allow(dead_code)]
mod dockerfile_syntax;
use dockerfile_syntax::{Instruction, dockerfile, flag, repo};

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every download the image build makes is pinned by its SHA-256 (`ADD
/// --checksum`), and the Jolokia agent's is the SHA-256 of the jar the
/// tests run (`scripts/fetch-cassandra` fetches it from Maven Central):
/// the image ships the agent the tests proved, and a changed download fails
/// the build instead of running inside every Cassandra member with the
/// database's privileges, as an unpinned `ADD` of a URL would have let it.
#[test]
fn the_agent_jar_is_pinned_to_the_jar_the_tests_run() {
    let instructions = dockerfile();
    let downloads: Vec<&Instruction> = instructions
        .iter()
        .filter(|i| i.keyword == "ADD" && i.args.iter().any(|a| a.contains("://")))
        .collect();
    assert!(!downloads.is_empty(), "the image fetches the agent");
    for add in &downloads {
        let sum = flag(add, "checksum")
            .and_then(|c| c.strip_prefix("sha256:"))
            .unwrap_or_else(|| panic!("an ADD of a URL without --checksum=sha256:…: {add:?}"));
        assert!(
            sum.len() == 64 && sum.bytes().all(|b| b.is_ascii_hexdigit()),
            "{add:?}"
        );
    }
    let agent = downloads
        .iter()
        .find(|a| a.args[0].contains("/org/jolokia/jolokia-jvm/"))
        .expect("the Jolokia agent's ADD");
    let file_name = Path::new(JOLOKIA_AGENT)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        agent.args[0].ends_with(&format!("/{file_name}")),
        "the image fetches {} and the tests run {file_name}",
        agent.args[0]
    );
    assert_eq!(agent.args[1], "/plugins/jolokia-jvm-agent.jar");
    let release = Release::cached("4.1.8")
        .unwrap_or_else(|e| panic!("{e}: run scripts/fetch-cassandra 4.1.8"));
    let jar = std::fs::read(&release.jolokia_agent).unwrap();
    assert_eq!(
        flag(agent, "checksum"),
        Some(format!("sha256:{}", sha256_hex(&jar)).as_str()),
        "the SHA-256 of {}",
        release.jolokia_agent.display()
    );
}

/// The modes of what the image carries at `/plugins`, as the build leaves
/// them: BuildKit 0.21 and later (Docker 28.1) apply a `COPY`/`ADD
/// --chmod` mode to the directories the copy creates too, so a mode
/// without every execute bit makes a directory no member user can enter
/// (the former `COPY --chmod=0444 ... /plugins/` made `/plugins`
/// `r--r--r--`: on a real cluster `install`, uid 999 in a Cassandra member,
/// failed with "Permission denied" and every member stayed in
/// `Init:CrashLoopBackOff`). An `ADD` of a URL leaves its file 0600, so the
/// jar must be given a mode others may read before the final stage copies
/// it: here by a `chmod` in the stage that fetched it.
#[test]
fn plugins_stay_readable_by_the_members_users() {
    let instructions = dockerfile();
    for i in &instructions {
        if let Some(mode) = flag(i, "chmod") {
            let mode = u32::from_str_radix(mode, 8)
                .unwrap_or_else(|_| panic!("a symbolic or bad --chmod: {i:?}"));
            assert_eq!(
                mode & 0o555,
                0o555,
                "--chmod={mode:o} also becomes the mode of the directories the copy creates: {i:?}"
            );
        }
    }
    // The stages: each FROM and the instructions up to the next.
    let mut stages: Vec<(&Instruction, Vec<&Instruction>)> = Vec::new();
    for i in &instructions {
        if i.keyword == "FROM" {
            stages.push((i, Vec::new()));
        } else {
            stages.last_mut().expect("FROM first").1.push(i);
        }
    }
    // The jar's stage: the ADD of the agent, then what its RUNs chmod.
    let (from, stage) = stages
        .iter()
        .find(|(_, body)| {
            body.iter().any(|i| {
                i.keyword == "ADD"
                    && i.args.last().map(String::as_str) == Some("/plugins/jolokia-jvm-agent.jar")
            })
        })
        .expect("the stage that fetches the agent");
    let stage_name = from.args.last().unwrap().clone();
    let mut modes: std::collections::BTreeMap<String, u32> = Default::default();
    for i in stage {
        match i.keyword.as_str() {
            "ADD" | "COPY" => {
                let dest = i.args.last().unwrap().clone();
                let mode = flag(i, "chmod").map_or_else(
                    // ADD of a URL: 0600 unless --chmod says otherwise.
                    || {
                        if i.args[0].contains("://") {
                            0o600
                        } else {
                            0o644
                        }
                    },
                    |m| u32::from_str_radix(m, 8).unwrap(),
                );
                modes.insert(dest, mode);
            }
            "RUN" => {
                let words: Vec<&str> = i.args.iter().map(String::as_str).collect();
                for (n, w) in words.iter().enumerate() {
                    if *w == "chmod" {
                        let mode = u32::from_str_radix(words[n + 1], 8)
                            .unwrap_or_else(|_| panic!("an octal chmod: {i:?}"));
                        modes.insert(words[n + 2].to_string(), mode);
                    }
                }
            }
            _ => {}
        }
    }
    let jar = modes["/plugins/jolokia-jvm-agent.jar"];
    assert_eq!(jar & 0o444, 0o444, "the jar: {jar:o}");
    if let Some(dir) = modes.get("/plugins") {
        assert_eq!(dir & 0o555, 0o555, "/plugins: {dir:o}");
    }
    // The final stage copies the stage's /plugins as it is.
    let last = &stages.last().unwrap().1;
    let copy = last
        .iter()
        .find(|i| i.keyword == "COPY" && flag(i, "from") == Some(stage_name.as_str()))
        .expect("the final stage copies the plugins");
    assert_eq!(copy.args, ["/plugins", "/plugins"], "{copy:?}");
    assert_eq!(flag(copy, "chmod"), None, "{copy:?}");
    assert!(
        last.iter()
            .any(|i| i.keyword == "ENV" && i.args == ["INSTALL_PLUGINS=/plugins"]),
        "install finds the plugins"
    );
}

/// A `.dockerignore` pattern, as BuildKit's pattern matcher reads it
/// (moby/patternmatcher): cleaned, anchored at the context's root, `*` and
/// `?` within one path element, `**` for any number of them, `!` for an
/// exception; a path is left out when the last pattern that matches it or
/// one of its parent directories is not an exception. Character classes and
/// escapes are not supported here (asserted).
#[derive(Debug)]
struct Pattern {
    exception: bool,
    elements: Vec<String>,
}

fn patterns(text: &str) -> Vec<Pattern> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (exception, l) = match l.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, l),
            };
            assert!(
                !l.contains(['[', '\\']),
                "{l}: classes and escapes are not read here"
            );
            Pattern {
                exception,
                elements: l
                    .split('/')
                    .filter(|e| !e.is_empty() && *e != ".")
                    .map(str::to_string)
                    .collect(),
            }
        })
        .collect()
}

fn element_matches(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            element_matches(&pattern[1..], name)
                || (!name.is_empty() && element_matches(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => element_matches(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => element_matches(&pattern[1..], &name[1..]),
        _ => false,
    }
}

fn elements_match(pattern: &[String], path: &[&str]) -> bool {
    match pattern.first() {
        None => path.is_empty(),
        Some(p) if p == "**" => {
            (0..=path.len()).any(|skip| elements_match(&pattern[1..], &path[skip..]))
        }
        Some(p) => {
            !path.is_empty()
                && element_matches(p.as_bytes(), path[0].as_bytes())
                && elements_match(&pattern[1..], &path[1..])
        }
    }
}

/// Whether the build context leaves `path` (relative, `/`-separated) out.
fn ignored(patterns: &[Pattern], path: &str) -> bool {
    let elements: Vec<&str> = path.split('/').collect();
    let mut out = false;
    for pattern in patterns {
        let hit = (1..=elements.len()).any(|n| elements_match(&pattern.elements, &elements[..n]));
        if hit {
            out = !pattern.exception;
        }
    }
    out
}

/// What the context holds: every file under `dir` that is not left out
/// (directories left out are not entered, as the builder does when no
/// exception could bring something back), with its size.
fn context(patterns: &[Pattern], root: &Path, dir: &Path, files: &mut Vec<(String, u64)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if ignored(patterns, &relative) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            context(patterns, root, &path, files);
        } else {
            files.push((relative, meta.len()));
        }
    }
}

/// The matcher reads patterns as BuildKit does, on the cases the file
/// relies on.
#[test]
fn dockerignore_patterns_are_read_as_buildkit_reads_them() {
    let p = patterns("target\n**/target\n!keep/target\n**/*.pem\n/.git\n# target2\n");
    assert!(ignored(&p, "target"));
    assert!(ignored(&p, "target/debug/x"), "a parent matches");
    assert!(ignored(&p, "tests/target/x"));
    assert!(!ignored(&p, "keep/target/x"), "the last match wins");
    assert!(!ignored(&p, "targets"), "a whole element");
    assert!(ignored(&p, "a/b/c.pem"));
    assert!(ignored(&p, "c.pem"), "** matches no element too");
    assert!(ignored(&p, ".git/HEAD"), "a leading / is the root");
    assert!(!ignored(&p, "src/.git"), "anchored at the root");
    assert!(!ignored(&p, "target2"), "comments are not patterns");
}

/// The image's build context (`docker build -f init/Dockerfile .`) leaves
/// out `target/` (tens of GiB here: a context the builder would have
/// spent minutes sending, and where a host build could leak into the
/// image's), `.git` and secrets a working copy may hold, and keeps every
/// file of the workspace `cargo build --locked` reads: without a
/// `.dockerignore`, `COPY . .` copied all of it into the build stage.
#[test]
fn the_build_context_is_the_workspace_without_target_git_or_secrets() {
    let root = repo();
    let text = std::fs::read_to_string(root.join(".dockerignore"))
        .expect("a .dockerignore at the repository root, beside the build context's Cargo.toml");
    let p = patterns(&text);
    for out in [
        "target",
        "target/release/cassandra-operator",
        "tests/target/x",
        ".git",
        ".git/config",
        "tls.key",
        "manifests/ca.pem",
        ".env",
        "manifests/.env.local",
        "kubeconfig",
        "scripts/gke.kubeconfig",
        ".docker/config.json",
        "controller/src/.lib.rs.swp",
    ] {
        assert!(ignored(&p, out), "{out} is sent to the builder");
    }
    let mut files = Vec::new();
    context(&p, &root, &root, &mut files);
    // Cargo reads the workspace's manifests and lock, and every member's
    // manifest and sources (the build stage builds the whole workspace's
    // dependency graph of the binary; every member must load).
    let manifest: toml_like::Members = toml_like::members(&root.join("Cargo.toml"));
    let mut needed = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for member in &manifest.0 {
        needed.push(format!("{member}/Cargo.toml"));
    }
    for need in &needed {
        assert!(
            files.iter().any(|(f, _)| f == need),
            "{need} is not in the build context"
        );
    }
    for member in manifest.0.iter().map(String::as_str).chain(["src"]) {
        let mut sources = Vec::new();
        walk(&root.join(member), &mut sources);
        for source in sources {
            let relative = source
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if relative.split('/').any(|e| e == "target") {
                continue;
            }
            assert!(
                !ignored(&p, &relative),
                "{relative} is left out of the build context"
            );
        }
    }
    let bytes: u64 = files.iter().map(|(_, size)| size).sum();
    println!("build context: {} files, {} KiB", files.len(), bytes / 1024);
    assert!(
        bytes < 64 << 20,
        "the context is {} MiB: what is large in it? {:?}",
        bytes >> 20,
        {
            let mut largest = files.clone();
            largest.sort_by_key(|(_, s)| std::cmp::Reverse(*s));
            largest.truncate(5);
            largest
        }
    );
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The workspace's members, read from the root manifest's
/// `members = [...]` line (the only TOML this test needs).
mod toml_like {
    pub struct Members(pub Vec<String>);

    pub fn members(manifest: &std::path::Path) -> Members {
        let text = std::fs::read_to_string(manifest).unwrap();
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("members"))
            .expect("a members line");
        let list = line.split_once('[').unwrap().1.split_once(']').unwrap().0;
        Members(
            list.split(',')
                .map(|m| m.trim().trim_matches('"').to_string())
                .filter(|m| !m.is_empty())
                .collect(),
        )
    }
}
