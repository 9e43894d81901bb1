//! `init/Dockerfile` read as the Dockerfile frontend reads it, for the
//! tests that check the Dockerfile (dockerfile.rs) and the image built from
//! it (image.rs): one reading, so that both check the same file the same
//! way.

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

/// One instruction of a Dockerfile: its keyword (upper case), its flags
/// (`--name=value`) and its other words, continuation lines joined and
/// comments dropped. Enough for the instructions `init/Dockerfile` uses (no
/// JSON form but in ENTRYPOINT and CMD, no heredocs: asserted).
#[derive(Debug)]
pub struct Instruction {
    pub keyword: String,
    pub flags: Vec<(String, String)>,
    pub args: Vec<String>,
}

pub fn instructions(text: &str) -> Vec<Instruction> {
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            logical.push(std::mem::take(&mut current));
        }
    }
    assert!(current.is_empty(), "a continuation at the end of the file");
    logical
        .iter()
        .map(|line| {
            assert!(!line.contains("<<"), "heredocs are not read here: {line}");
            let mut words = line.split_whitespace();
            let keyword = words.next().unwrap().to_ascii_uppercase();
            let mut flags = Vec::new();
            let mut args = Vec::new();
            for word in words {
                match word.strip_prefix("--") {
                    Some(flag) if args.is_empty() && keyword != "RUN" => {
                        let (name, value) = flag.split_once('=').unwrap_or((flag, ""));
                        flags.push((name.to_string(), value.to_string()));
                    }
                    _ => args.push(word.to_string()),
                }
            }
            Instruction {
                keyword,
                flags,
                args,
            }
        })
        .collect()
}

pub fn dockerfile() -> Vec<Instruction> {
    let path = repo().join("init/Dockerfile");
    instructions(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
}

pub fn flag<'i>(instruction: &'i Instruction, name: &str) -> Option<&'i str> {
    instruction
        .flags
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// The final stage's instructions (after the last `FROM`, which is
/// returned first): what the image's own layer and config come from.
pub fn final_stage(instructions: &[Instruction]) -> (&Instruction, &[Instruction]) {
    let from = instructions
        .iter()
        .rposition(|i| i.keyword == "FROM")
        .expect("a FROM");
    (&instructions[from], &instructions[from + 1..])
}
