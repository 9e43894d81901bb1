//! The init container's role (`cassandra-operator install`): copy the running
//! binary, and the plugins the image carries (the Jolokia agent jar), into
//! the volume shared with the database container, so that the sidecar can run
//! there as its entrypoint.
//!
//! Every file is written to a temporary name in the target directory, synced,
//! made executable and renamed over the destination: a container that starts
//! while (or after) an install is interrupted sees either the old file or the
//! new one, never half of one. Files already identical are left alone, so an
//! init container that runs again (a Pod restart) changes nothing.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crds::contract::pod::{BINARY_NAME, subcommand};
use crds::contract::{PLUGINS, SHARED_DIR};
use thiserror::Error;
use tracing::info;

/// `cassandra-operator install`.
#[derive(clap::Args, Debug, Clone)]
pub struct InstallArgs {
    /// Directory to install into: the volume shared with the database
    /// container.
    #[arg(long = subcommand::INSTALL_TARGET, env = "INSTALL_TARGET", default_value = SHARED_DIR)]
    pub target: PathBuf,
    /// Directory of plugins (e.g. the Jolokia agent jar) to copy into
    /// `<target>/plugins`.
    #[arg(long, env = "INSTALL_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// The binary to install (default: the one running).
    #[arg(long, hide = true)]
    pub source: Option<PathBuf>,
}

/// An install step that failed.
#[derive(Debug, Error)]
pub enum InstallError {
    /// The running binary's path could not be found.
    #[error("finding the running binary: {0}")]
    FindBinary(#[source] io::Error),
    /// The target directory could not be created.
    #[error("creating {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    /// The plugins directory could not be read.
    #[error("reading plugins directory {path}: {source}")]
    ReadPlugins { path: PathBuf, source: io::Error },
    /// A file could not be copied.
    #[error("installing {from} as {to}: {source}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
}

/// What an install did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Files written.
    pub written: Vec<PathBuf>,
    /// Files that were already up to date.
    pub unchanged: Vec<PathBuf>,
}

/// Installs the binary and the plugins.
pub fn install(args: &InstallArgs) -> Result<Report, InstallError> {
    let source = match &args.source {
        Some(source) => source.clone(),
        None => std::env::current_exe().map_err(InstallError::FindBinary)?,
    };
    let mut report = Report::default();
    create_dir(&args.target)?;
    install_file(&source, &args.target.join(BINARY_NAME), 0o755, &mut report)?;

    if let Some(plugins) = &args.plugins {
        install_tree(plugins, &args.target.join(PLUGINS), &mut report)?;
    }
    for path in &report.written {
        info!(path = %path.display(), "installed");
    }
    for path in &report.unchanged {
        info!(path = %path.display(), "already up to date");
    }
    Ok(report)
}

fn create_dir(path: &Path) -> Result<(), InstallError> {
    fs::create_dir_all(path).map_err(|source| InstallError::CreateDir {
        path: path.to_path_buf(),
        source,
    })
}

fn install_tree(from: &Path, to: &Path, report: &mut Report) -> Result<(), InstallError> {
    let read_err = |source| InstallError::ReadPlugins {
        path: from.to_path_buf(),
        source,
    };
    create_dir(to)?;
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(read_err)?
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        // Follow symlinks: images often link a versioned jar to a stable name.
        let meta = fs::metadata(&path).map_err(read_err)?;
        let dest = to.join(entry.file_name());
        if meta.is_dir() {
            install_tree(&path, &dest, report)?;
        } else if meta.is_file() {
            install_file(
                &path,
                &dest,
                meta.permissions().mode() & 0o777 | 0o444,
                report,
            )?;
        }
    }
    Ok(())
}

fn install_file(
    from: &Path,
    to: &Path,
    mode: u32,
    report: &mut Report,
) -> Result<(), InstallError> {
    let copy_err = |source| InstallError::Copy {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        source,
    };
    let content = fs::read(from).map_err(copy_err)?;
    let up_to_date = fs::metadata(to).is_ok_and(|meta| meta.permissions().mode() & 0o777 == mode)
        && fs::read(to).is_ok_and(|existing| existing == content);
    if up_to_date {
        report.unchanged.push(to.to_path_buf());
        return Ok(());
    }
    let dir = to.parent().unwrap_or(Path::new("."));
    let file_name = to
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&content)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&tmp, to)?;
        // The rename is durable only once the directory is synced.
        fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(copy_err(e));
    }
    report.written.push(to.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(source: &Path, target: &Path, plugins: Option<&Path>) -> InstallArgs {
        InstallArgs {
            target: target.to_path_buf(),
            plugins: plugins.map(Path::to_path_buf),
            source: Some(source.to_path_buf()),
        }
    }

    #[test]
    fn installs_binary_executable_and_plugins() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("bin");
        fs::write(&source, b"\x7fELF binary").unwrap();
        let plugins = dir.path().join("plugins-src");
        fs::create_dir_all(plugins.join("lib")).unwrap();
        fs::write(plugins.join("jolokia-agent.jar"), b"jar").unwrap();
        fs::write(plugins.join("lib/extra.jar"), b"extra").unwrap();
        let target = dir.path().join("shared/nested");

        let report = install(&args(&source, &target, Some(&plugins))).unwrap();

        let bin = target.join(BINARY_NAME);
        assert_eq!(fs::read(&bin).unwrap(), b"\x7fELF binary");
        assert_eq!(
            fs::metadata(&bin).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(
            fs::read(target.join("plugins/jolokia-agent.jar")).unwrap(),
            b"jar"
        );
        assert_eq!(
            fs::read(target.join("plugins/lib/extra.jar")).unwrap(),
            b"extra"
        );
        assert_eq!(report.written.len(), 3);
        assert!(report.unchanged.is_empty());
        // no temporary file is left behind
        let leftovers: Vec<_> = fs::read_dir(&target)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn second_install_changes_nothing_and_an_update_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("bin");
        fs::write(&source, b"v1").unwrap();
        let target = dir.path().join("shared");
        install(&args(&source, &target, None)).unwrap();
        let bin = target.join(BINARY_NAME);
        let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&bin).unwrap());

        let again = install(&args(&source, &target, None)).unwrap();
        assert_eq!(again.written, Vec::<PathBuf>::new());
        assert_eq!(again.unchanged, vec![bin.clone()]);
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(&bin).unwrap()),
            inode,
            "an identical file must not be rewritten"
        );

        fs::write(&source, b"v2").unwrap();
        let update = install(&args(&source, &target, None)).unwrap();
        assert_eq!(update.written, vec![bin.clone()]);
        assert_eq!(fs::read(&bin).unwrap(), b"v2");
    }

    #[test]
    fn replacing_a_running_binary_keeps_the_old_inode_intact() {
        // The rename leaves a process that has the old file open (or mapped)
        // reading the old content, which writing in place would corrupt.
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("bin");
        fs::write(&source, b"old").unwrap();
        let target = dir.path().join("shared");
        install(&args(&source, &target, None)).unwrap();
        let mut open_old = fs::File::open(target.join(BINARY_NAME)).unwrap();
        fs::write(&source, b"new content").unwrap();
        install(&args(&source, &target, None)).unwrap();
        let mut old = String::new();
        io::Read::read_to_string(&mut open_old, &mut old).unwrap();
        assert_eq!(old, "old");
    }

    #[test]
    fn missing_plugins_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("bin");
        fs::write(&source, b"x").unwrap();
        let missing = dir.path().join("nope");
        let err = install(&args(&source, &dir.path().join("t"), Some(&missing))).unwrap_err();
        assert!(
            err.to_string().contains("reading plugins directory"),
            "{err}"
        );
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
