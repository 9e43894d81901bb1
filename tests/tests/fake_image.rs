//! The fake Cassandra as the official image's `bin/cassandra` starts it
//! (issue 10, part 1): root refused without `-R`, with the launcher's
//! message and exit code, before anything else; the directories created
//! and checked as `StartupChecks.checkDataDirs` does, as the user the
//! process runs as. Real processes: the fake binary, as root and as the
//! image's database user (999, through `setpriv`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

const ROOT_REFUSED: &str = "Running Cassandra as root user or group is not recommended - please start Cassandra using a different system user.\nIf you really want to force running Cassandra as root, use -R command line option.\n";

/// A configuration directory with the image's 4.1 cassandra.yaml (every
/// directory unset) and a storage dir under `root`, readable by anyone.
fn image_dirs(root: &Path) -> std::path::PathBuf {
    let conf = root.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::copy(
        testworld::harness::fixtures()
            .unwrap()
            .join("cassandra/4.1/cassandra.yaml"),
        conf.join("cassandra.yaml"),
    )
    .expect("the 4.1 fixture (shared/fixtures beside the repository)");
    for dir in [root, conf.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        conf.join("cassandra.yaml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    conf
}

/// Runs the fake with `args` as `user` (uid, gid; `None`: root), with
/// the image's environment and `env` on top, and nothing to join (no
/// kubesim: a start that gets past the checks fails on that).
fn run(user: Option<(u32, u32)>, conf: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let fake = env!("CARGO_BIN_EXE_fake-cassandra");
    let mut cmd = match user {
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "--",
                fake,
            ]);
            c
        }
        None => Command::new(fake),
    };
    cmd.args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CASSANDRA_CONF", conf)
        .env("CASSANDRA_HOME", "/opt/cassandra")
        .env("CASSANDRA_VERSION", "4.1.8")
        .env("KUBESIM_URL", "http://127.0.0.1:9")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("the fake runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn root_is_refused_without_dash_r_before_anything_is_read() {
    // Not even a configuration: the launcher checks the user first.
    let out = run(None, Path::new("/nonexistent"), &["-f"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), ROOT_REFUSED);
    // A root group alone is refused too.
    let out = run(Some((999, 0)), Path::new("/nonexistent"), &["-f"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), ROOT_REFUSED);
}

#[test]
fn root_with_dash_r_and_user_999_get_past_the_check() {
    let work = tempfile::tempdir().unwrap();
    let conf = image_dirs(work.path());
    let storage = work.path().join("storage");
    std::fs::create_dir_all(&storage).unwrap();
    std::fs::set_permissions(&storage, std::fs::Permissions::from_mode(0o777)).unwrap();
    let storagedir = format!("-Dcassandra.storagedir={}", storage.display());
    for (user, args) in [
        (None, vec!["-f", "-R", storagedir.as_str()]),
        (Some((999, 999)), vec!["-f", storagedir.as_str()]),
    ] {
        let out = run(user, &conf, &args, &[]);
        let all = text(&out);
        assert!(!all.contains("Running Cassandra as root"), "{all}");
        // It went on to its directories, then to the ring (absent here).
        assert!(
            storage.join("data").is_dir() && storage.join("hints").is_dir(),
            "{all}"
        );
        assert_ne!(out.status.code(), Some(0), "{all}");
    }
}

#[test]
fn directories_the_user_cannot_write_stop_the_start() {
    let work = tempfile::tempdir().unwrap();
    let conf = image_dirs(work.path());
    // Owned by root, 0755: user 999 can neither create nor write in it.
    let locked = work.path().join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The start as user 999 stops with code 3 and `problem` on <locked>/data.
    let refused = |problem: &str| {
        let storagedir = format!("-Dcassandra.storagedir={}", locked.display());
        let out = run(Some((999, 999)), &conf, &["-f", &storagedir], &[]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        assert!(
            text(&out).contains(&format!("{problem} {}/data", locked.display())),
            "{}",
            text(&out)
        );
    };
    refused("Has no permission to create directory");
    // The directory exists but belongs to root: no write permission.
    std::fs::create_dir_all(locked.join("data")).unwrap();
    refused("Insufficient permissions on directory");
}

#[test]
fn the_storagedir_in_jvm_extra_opts_is_overridden_by_the_launchers() {
    // JVM_EXTRA_OPTS names a writable storage dir, but bin/cassandra's own
    // -Dcassandra.storagedir=$CASSANDRA_HOME/data comes after it: the
    // process looks under /opt/cassandra/data (absent here: refused).
    let work = tempfile::tempdir().unwrap();
    let conf = image_dirs(work.path());
    let wanted = work.path().join("wanted");
    let out = run(
        Some((999, 999)),
        &conf,
        &["-f"],
        &[
            (
                "CASSANDRA_HOME",
                work.path().join("home").display().to_string(),
            ),
            (
                "JVM_EXTRA_OPTS",
                format!("-Dcassandra.storagedir={}", wanted.display()),
            ),
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "Has no permission to create directory {}/home/data/data",
            work.path().display()
        )),
        "{}",
        text(&out)
    );
    assert!(!wanted.exists());
}

/// The JVM of Cassandra 4.0+ opens its GC log in `$CASSANDRA_HOME/logs`
/// before anything else and refuses to start when it cannot (a read-only
/// root filesystem without a logs volume); 3.11's Java 8 only warns.
#[test]
fn an_unwritable_log_directory_stops_the_jvm_of_4_x_only() {
    let work = tempfile::tempdir().unwrap();
    let conf = image_dirs(work.path());
    let home = work.path().join("home");
    std::fs::create_dir_all(home.join("logs")).unwrap();
    for dir in [home.as_path(), home.join("logs").as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let gc_log = format!("{}/logs/gc.log", home.display());
    let home_env = ("CASSANDRA_HOME", home.display().to_string());
    let out = run(
        Some((999, 999)),
        &conf,
        &["-f"],
        std::slice::from_ref(&home_env),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "Error opening log file '{gc_log}': Permission denied"
        )) && text(&out).contains("Error: Could not create the Java Virtual Machine."),
        "{}",
        text(&out)
    );
    let out = run(
        Some((999, 999)),
        &conf,
        &["-f"],
        &[home_env, ("CASSANDRA_VERSION", "3.11.6".to_string())],
    );
    assert!(
        text(&out).contains(&format!(
            "warning: Cannot open file {gc_log} due to Permission denied"
        )),
        "{}",
        text(&out)
    );
    // It went on to its directory checks (home/data cannot be made).
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
}
