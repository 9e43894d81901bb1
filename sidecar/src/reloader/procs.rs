//! Finding the processes to signal, from `/proc`. The parsing of
//! `/proc/<pid>/stat` and `/proc/<pid>/cmdline` and the name matching are
//! pure; [`scan`] and [`read_process`] read `/proc`.
//!
//! A process matches a name when its `comm` (the kernel's name of the
//! process: the basename of the executed file, a script's own name rather
//! than its interpreter's, at most 15 bytes) or the basename of its `argv[0]`
//! equals the name. Names longer than 15 bytes also match a `comm` equal to
//! their first 15 bytes, since the kernel truncates `comm` to that length.
//! Zombies never match (they cannot reload anything), nor does the reloader
//! itself.

use std::io;
use std::path::Path;

/// The length the kernel truncates `comm` to (TASK_COMM_LEN - 1).
const COMM_MAX: usize = 15;

/// What the reloader needs to know about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    /// The kernel's name of the process (`/proc/<pid>/comm`).
    pub comm: String,
    /// Start time in clock ticks since boot: with the pid, the identity of a
    /// process (a pid may be reused, not with the same start time).
    pub start_ticks: u64,
}

impl Process {
    /// Pid and start time: one process, even across pid reuse.
    pub fn identity(&self) -> (i32, u64) {
        (self.pid, self.start_ticks)
    }
}

/// The fields of `/proc/<pid>/stat` the reloader uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub state: char,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. `comm` sits between the first `(` and the last
/// `)`: it may itself contain spaces and parentheses.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    if close < open {
        return None;
    }
    let comm = stat[open + 1..close].to_owned();
    let mut fields = stat[close + 1..].split_ascii_whitespace();
    // Field 3 is the state; field 22 the start time (19 fields further).
    let state = fields.next()?.chars().next()?;
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(Stat {
        comm,
        state,
        start_ticks,
    })
}

/// The basename of `argv[0]` from `/proc/<pid>/cmdline` (NUL-separated), if
/// there is one (kernel threads have an empty command line).
pub fn argv0_basename(cmdline: &[u8]) -> Option<&[u8]> {
    let argv0 = cmdline.split(|&b| b == 0).next()?;
    if argv0.is_empty() {
        return None;
    }
    let base = argv0.rsplit(|&b| b == b'/').next()?;
    (!base.is_empty()).then_some(base)
}

/// Whether a process with this `comm` and `argv[0]` basename is one named
/// `wanted`.
pub fn name_matches(wanted: &str, comm: &str, argv0: Option<&[u8]>) -> bool {
    if wanted.is_empty() {
        return false;
    }
    if comm == wanted || argv0 == Some(wanted.as_bytes()) {
        return true;
    }
    // The kernel cut `comm` at 15 bytes, possibly inside a UTF-8 character;
    // `comm` was read lossily, so cut and convert `wanted` the same way.
    wanted.len() > COMM_MAX && comm == String::from_utf8_lossy(&wanted.as_bytes()[..COMM_MAX])
}

/// Reads one process from a `/proc` tree; `None` when it does not exist (any
/// more), is a zombie, or its files cannot be read. `wanted` filters by name
/// when given.
pub fn read_process(proc_root: &Path, pid: i32, wanted: Option<&str>) -> Option<Process> {
    let dir = proc_root.join(pid.to_string());
    // A process may exit between any two reads: every failure means "gone".
    let stat = parse_stat(&String::from_utf8_lossy(
        &std::fs::read(dir.join("stat")).ok()?,
    ))?;
    if stat.state == 'Z' || stat.state == 'X' {
        return None;
    }
    if let Some(wanted) = wanted {
        let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
        if !name_matches(wanted, &stat.comm, argv0_basename(&cmdline)) {
            return None;
        }
    }
    Some(Process {
        pid,
        comm: stat.comm,
        start_ticks: stat.start_ticks,
    })
}

/// Every live process named `wanted` in a `/proc` tree, except `own_pid`,
/// by ascending pid.
pub fn scan(proc_root: &Path, wanted: &str, own_pid: i32) -> io::Result<Vec<Process>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(proc_root)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == own_pid || pid <= 0 {
            continue;
        }
        if let Some(p) = read_process(proc_root, pid, Some(wanted)) {
            found.push(p);
        }
    }
    found.sort_by_key(|p| p.pid);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(pid: i32, comm: &str, state: char, start: u64) -> String {
        format!(
            "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 {start} 2408448 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
        )
    }

    #[test]
    fn stat_with_spaces_and_parentheses_in_comm() {
        let s = parse_stat(&stat_line(42, "a (weird) name", 'S', 12345)).unwrap();
        assert_eq!(s.comm, "a (weird) name");
        assert_eq!(s.state, 'S');
        assert_eq!(s.start_ticks, 12345);
        assert_eq!(parse_stat("42 (truncated"), None);
        assert_eq!(parse_stat("42 (x) S 1 2"), None);
    }

    #[test]
    fn real_stat_of_this_process_parses() {
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        let s = parse_stat(&own).unwrap();
        assert!(s.start_ticks > 0);
        assert!(matches!(s.state, 'R' | 'S'));
    }

    #[test]
    fn argv0_is_the_basename_of_the_first_argument() {
        assert_eq!(
            argv0_basename(b"/usr/bin/contrail-vrouter-agent\0--config\0x\0"),
            Some(&b"contrail-vrouter-agent"[..])
        );
        assert_eq!(argv0_basename(b"nginx\0"), Some(&b"nginx"[..]));
        assert_eq!(argv0_basename(b""), None);
        assert_eq!(argv0_basename(b"\0"), None);
        assert_eq!(argv0_basename(b"/usr/bin/\0"), None);
    }

    #[test]
    fn names_match_on_comm_or_argv0() {
        assert!(name_matches("vrouter", "vrouter", None));
        assert!(name_matches("vrouter", "sh", Some(b"vrouter")));
        assert!(!name_matches("vrouter", "vrouter2", Some(b"vrouter2")));
        assert!(!name_matches("vrouter", "vroute", None));
        assert!(!name_matches("", "", Some(b"")));
        // A script run directly: comm is the script, argv[0] the interpreter.
        assert!(name_matches("reload-me.sh", "reload-me.sh", Some(b"sh")));
    }

    #[test]
    fn long_names_match_the_truncated_comm() {
        let name = "contrail-vrouter-agent";
        assert!(name_matches(name, "contrail-vroute", Some(b"sh")));
        assert!(!name_matches(name, "contrail-vrout", None));
        // A short name is never matched by a prefix.
        assert!(!name_matches("contrail-vroute", "contrail-vrout", None));
        // A comm the kernel cut inside a multi-byte character, read lossily.
        let wide = "ééééééééé"; // 18 bytes
        let cut = String::from_utf8_lossy(&wide.as_bytes()[..15]).into_owned();
        assert!(cut.ends_with('\u{fffd}'));
        assert!(name_matches(wide, &cut, None));
        assert!(!name_matches("ééééééé-other", &cut, None));
    }

    fn fake_proc(entries: &[(i32, String, &[u8])]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (pid, stat, cmdline) in entries {
            let dir = root.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("stat"), stat).unwrap();
            std::fs::write(dir.join("cmdline"), cmdline).unwrap();
        }
        std::fs::create_dir(root.path().join("sys")).unwrap();
        root
    }

    #[test]
    fn scan_finds_matching_live_processes_but_not_itself_or_zombies() {
        let root = fake_proc(&[
            (1, stat_line(1, "pause", 'S', 10), b"/pause\0"),
            (7, stat_line(7, "agent", 'S', 300), b"/usr/bin/agent\0-c\0"),
            (9, stat_line(9, "agent", 'Z', 400), b""),
            (12, stat_line(12, "agent", 'S', 500), b"agent\0"),
            (30, stat_line(30, "python3", 'R', 600), b"/usr/bin/agent\0"),
            (40, stat_line(40, "other", 'S', 700), b"/bin/other\0"),
        ]);
        // A process that vanished between readdir and read: a directory
        // without files.
        std::fs::create_dir(root.path().join("55")).unwrap();
        let found = scan(root.path(), "agent", 12).unwrap();
        assert_eq!(
            found,
            vec![
                Process {
                    pid: 7,
                    comm: "agent".into(),
                    start_ticks: 300
                },
                Process {
                    pid: 30,
                    comm: "python3".into(),
                    start_ticks: 600
                },
            ]
        );
        // pid 1 is signalled only when it is the one named.
        let found = scan(root.path(), "pause", 12).unwrap();
        assert_eq!(found.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1]);
        assert!(scan(&root.path().join("absent"), "agent", 1).is_err());
    }
}
