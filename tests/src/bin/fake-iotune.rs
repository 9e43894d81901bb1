//! `fake-iotune`: the test world's `iotune`, Seastar's disk benchmark that
//! the scylla image ships (`scylla_io_setup` runs it; the sidecar runs it
//! once per data volume). It takes iotune's options, checks that the
//! evaluation directory exists and is writable (iotune writes its test
//! files there), and writes the properties file in iotune's format (one
//! entry per disk: mountpoint, read/write IOPS and bandwidth) with
//! figures of a local NVMe SSD, without measuring anything. Exits 1 with
//! iotune's kind of message on a bad directory, 2 on a bad option.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut directories: Vec<PathBuf> = Vec::new();
    let mut properties: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next());
        match name.as_str() {
            "--evaluation-directory" => match value() {
                Some(v) => directories.push(v.into()),
                None => return bad_option(&name),
            },
            "--properties-file" => match value() {
                Some(v) => properties = Some(v.into()),
                None => return bad_option(&name),
            },
            "--format" | "--options-file" | "--duration" | "--smp" | "--memory" => {
                if value().is_none() {
                    return bad_option(&name);
                }
            }
            _ => return bad_option(&name),
        }
    }
    if directories.is_empty() {
        eprintln!("ERROR: you must pass at least one --evaluation-directory");
        return ExitCode::from(1);
    }
    let mut disks = String::from("disks:\n");
    for dir in &directories {
        let probe = dir.join(".iotune.tmp");
        if let Err(e) = std::fs::write(&probe, b"iotune") {
            eprintln!("ERROR: cannot evaluate {}: {e}", dir.display());
            return ExitCode::from(1);
        }
        let _ = std::fs::remove_file(&probe);
        disks.push_str(&format!(
            "  - mountpoint: {}\n    read_iops: 540317\n    read_bandwidth: 1914761472\n    write_iops: 300300\n    write_bandwidth: 1086951936\n",
            dir.display()
        ));
    }
    match properties {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, disks) {
                eprintln!("ERROR: writing {}: {e}", path.display());
                return ExitCode::from(1);
            }
        }
        None => print!("{disks}"),
    }
    ExitCode::SUCCESS
}

fn bad_option(name: &str) -> ExitCode {
    eprintln!("error: unrecognised option '{name}'");
    ExitCode::from(2)
}
