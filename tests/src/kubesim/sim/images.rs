//! What the sim knows of each image besides its program (issue 10): the
//! image's default user and its accounts (`/etc/passwd`), the volumes it
//! declares, and the files the database images lay out and own, as their
//! official Dockerfiles do. The table is pure; [`database_layer`] writes
//! a container's writable layer (I/O).
//!
//! - `cassandra` (docker-library/cassandra): no `USER`, so the entrypoint
//!   runs as root and steps down to `cassandra` (999:999, `groupadd -r
//!   cassandra --gid=999; useradd -r -g cassandra --uid=999`) with gosu;
//!   `CASSANDRA_CONF=/etc/cassandra`, `/var/lib/cassandra` and
//!   `/var/log/cassandra` are owned by cassandra with mode 1777 (the conf
//!   files `a+rwX`); `$CASSANDRA_HOME/conf`, `data` and `logs` are links to
//!   them; `VOLUME /var/lib/cassandra`.
//! - `scylladb/scylla` (scylladb's dist/docker build script): no user
//!   either (the entrypoint runs as root); the package's postinst creates
//!   the system user `scylla` with `adduser --system --group`, so its
//!   number is not pinned by the build: the sim gives it 999:999 like
//!   cassandra's. `/var/lib/scylla` is `chown -R scylla:scylla` and the
//!   image's volume; `/etc/scylla` (package files) and `/var/log/scylla`
//!   belong to root.
//! - the operator image: distroless `nonroot`, user 65532:65532.
//! - anything else: root, with only root in its passwd.

use super::kubelet::{CASSANDRA_HOME, Image};
use std::os::unix::fs::{PermissionsExt, lchown, symlink};
use std::path::{Path, PathBuf};

/// An account in the image's `/etc/passwd`: name, uid, primary gid.
pub type Account = (&'static str, u32, u32);

/// What the runtime learns from an image's config and files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The image config's `User` (`""` is root): a number, `uid:gid`, or
    /// a name.
    pub user: &'static str,
    /// The image's `/etc/passwd`.
    pub passwd: &'static [Account],
    /// The image config's `Volumes`: containerd gives each a writable
    /// directory of its own, so they stay writable under
    /// `readOnlyRootFilesystem`.
    pub volumes: &'static [&'static str],
}

/// The uid and gid of the database images' user.
pub const DB_USER: u32 = 999;

const CASSANDRA_PASSWD: &[Account] = &[("root", 0, 0), ("cassandra", DB_USER, DB_USER)];
const SCYLLA_PASSWD: &[Account] = &[("root", 0, 0), ("scylla", DB_USER, DB_USER)];
const DISTROLESS_PASSWD: &[Account] = &[
    ("root", 0, 0),
    ("nobody", 65534, 65534),
    ("nonroot", 65532, 65532),
];
const ROOT_PASSWD: &[Account] = &[("root", 0, 0)];

/// The table entry of an image.
pub fn info(image: &Image) -> ImageInfo {
    match image {
        Image::Operator => ImageInfo {
            user: "65532",
            passwd: DISTROLESS_PASSWD,
            volumes: &[],
        },
        Image::Database { kind, .. } if kind == "scylla" => ImageInfo {
            user: "",
            passwd: SCYLLA_PASSWD,
            volumes: &["/var/lib/scylla"],
        },
        Image::Database { .. } => ImageInfo {
            user: "",
            passwd: CASSANDRA_PASSWD,
            volumes: &["/var/lib/cassandra"],
        },
        Image::Other => ImageInfo {
            user: "",
            passwd: ROOT_PASSWD,
            volumes: &[],
        },
    }
}

impl ImageInfo {
    /// The primary group of a uid in the image's passwd (0 when the uid
    /// has no account, as containerd does).
    pub fn group_of(&self, uid: u32) -> u32 {
        self.passwd.iter().find(|a| a.1 == uid).map_or(0, |a| a.2)
    }

    /// The image user as the kubelet sees it: `(Some(uid), "")` when
    /// numeric (`""` is root), `(None, name)` otherwise; and the group the
    /// config names or the user's primary group.
    pub fn user(&self) -> (Option<u32>, &'static str, Option<u32>) {
        let (u, g) = match self.user.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (self.user, None),
        };
        let uid = match u {
            "" => Some(0),
            u => u
                .parse::<u32>()
                .ok()
                .or_else(|| self.passwd.iter().find(|a| a.0 == u).map(|a| a.1)),
        };
        let numeric = u.is_empty() || u.parse::<u32>().is_ok();
        let gid = g
            .and_then(|g| g.parse::<u32>().ok())
            .or_else(|| uid.map(|uid| self.group_of(uid)));
        if numeric {
            (uid, "", gid)
        } else {
            (None, self.user, gid)
        }
    }
}

fn io(what: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", what.display())
}

fn mkdir(p: &Path, mode: u32, owner: u32) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| io(p, e))?;
    lchown(p, Some(owner), Some(owner)).map_err(|e| io(p, e))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).map_err(|e| io(p, e))
}

/// `chown -R owner:owner` and `chmod -R a+rwX`.
fn own_tree(p: &Path, owner: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(p).map_err(|e| io(p, e))?;
    lchown(p, Some(owner), Some(owner)).map_err(|e| io(p, e))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    // a+rwX: x for all when a directory or executable by someone.
    let x = if meta.is_dir() || mode & 0o111 != 0 {
        0o111
    } else {
        0
    };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode | 0o666 | x))
        .map_err(|e| io(p, e))?;
    if meta.is_dir() {
        for e in std::fs::read_dir(p).map_err(|e| io(p, e))? {
            own_tree(&e.map_err(|e| io(p, e))?.path(), owner)?;
        }
    }
    Ok(())
}

/// Lays out a database image's files in the container's writable layer
/// `cdir` (the default configuration already copied to `cdir/etc/<kind>`
/// when there is one) and returns the bind mounts `(layer dir, path in
/// the container)` that make them the container's, in mount order.
pub fn database_layer(
    cdir: &Path,
    kind: &str,
    fake: Option<&Path>,
) -> Result<Vec<(PathBuf, String)>, String> {
    let mut mounts = Vec::new();
    let etc = cdir.join("etc").join(kind);
    let var_lib = cdir.join("var/lib").join(kind);
    let var_log = cdir.join("var/log").join(kind);
    if kind == "cassandra" {
        let home = cdir.join("opt-cassandra");
        mkdir(&home.join("bin"), 0o755, 0)?;
        if let Some(fake) = fake {
            let _ = symlink(fake, home.join("bin/cassandra"));
        }
        for (link, to) in [
            ("conf", "/etc/cassandra"),
            ("data", "/var/lib/cassandra"),
            ("logs", "/var/log/cassandra"),
        ] {
            let _ = symlink(to, home.join(link));
        }
        mounts.push((home, CASSANDRA_HOME.to_string()));
        for d in [&etc, &var_lib, &var_log] {
            mkdir(d, 0o1777, DB_USER)?;
        }
        own_tree(&etc, DB_USER)?;
        // chmod 1777 after the a+rwX of the tree, as the Dockerfile.
        std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| io(&etc, e))?;
    } else {
        mkdir(&var_lib, 0o755, DB_USER)?;
        mkdir(&var_log, 0o755, 0)?;
        if etc.is_dir() {
            lchown(&etc, Some(0), Some(0)).map_err(|e| io(&etc, e))?;
        }
    }
    if etc.is_dir() {
        mounts.push((etc, format!("/etc/{kind}")));
    }
    mounts.push((var_lib, format!("/var/lib/{kind}")));
    mounts.push((var_log, format!("/var/log/{kind}")));
    Ok(mounts)
}

/// Lays out the official `cassandra:` image of a real release in the
/// container's writable layer `cdir` ([`crate::real_cassandra::Image`]:
/// `/opt/cassandra` with the release's `bin/` and `lib/`, `/etc/cassandra`
/// with its `conf/`, the data and log directories owned by cassandra,
/// Java at `/opt/java/openjdk`) and returns the bind mounts that make it
/// the container's, in mount order.
pub fn real_cassandra_layer(
    cdir: &Path,
    release: &crate::real_cassandra::Release,
) -> Result<Vec<(PathBuf, String)>, String> {
    let root = cdir.join("image");
    let image = crate::real_cassandra::Image::lay_out(&root, release).map_err(|e| e.to_string())?;
    Ok(vec![
        (image.cassandra_home(), CASSANDRA_HOME.to_string()),
        (image.conf(), "/etc/cassandra".to_string()),
        (image.data(), "/var/lib/cassandra".to_string()),
        (image.logs(), "/var/log/cassandra".to_string()),
        (root.join("opt/java"), "/opt/java".to_string()),
    ])
}

/// The operator image's `/plugins` (`init/Dockerfile`: the Jolokia JVM
/// agent as `jolokia-jvm-agent.jar`, mode 0444) from `agent`, in the
/// container's writable layer `cdir`; the directory to mount at
/// `/plugins`.
pub fn operator_plugins(cdir: &Path, agent: &Path) -> Result<PathBuf, String> {
    let dir = cdir.join("plugins");
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let jar = dir.join("jolokia-jvm-agent.jar");
    std::fs::copy(agent, &jar).map_err(|e| io(agent, e))?;
    std::fs::set_permissions(&jar, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| io(&jar, e))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(&dir, e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn image_users() {
        let cassandra = info(&Image::Database {
            kind: "cassandra".into(),
            tag: "4.1".into(),
        });
        assert_eq!(cassandra.user(), (Some(0), "", Some(0)));
        assert_eq!(cassandra.group_of(999), 999);
        assert_eq!(cassandra.group_of(1234), 0);
        assert_eq!(
            info(&Image::Operator).user(),
            (Some(65532), "", Some(65532))
        );
        assert_eq!(info(&Image::Other).user(), (Some(0), "", Some(0)));
        let named = ImageInfo {
            user: "cassandra",
            ..cassandra.clone()
        };
        assert_eq!(named.user(), (None, "cassandra", Some(999)));
        let pair = ImageInfo {
            user: "999:5",
            ..cassandra
        };
        assert_eq!(pair.user(), (Some(999), "", Some(5)));
    }

    #[test]
    fn cassandra_layer_is_owned_as_in_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc/cassandra");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("cassandra.yaml"), "x").unwrap();
        std::fs::set_permissions(
            etc.join("cassandra.yaml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let mounts = database_layer(dir.path(), "cassandra", None).unwrap();
        let paths: Vec<&str> = mounts.iter().map(|m| m.1.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/opt/cassandra",
                "/etc/cassandra",
                "/var/lib/cassandra",
                "/var/log/cassandra"
            ]
        );
        for (d, _) in &mounts[1..] {
            let m = std::fs::metadata(d).unwrap();
            assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (999, 999, 0o1777));
        }
        let f = std::fs::metadata(etc.join("cassandra.yaml")).unwrap();
        assert_eq!((f.uid(), f.gid(), f.mode() & 0o777), (999, 999, 0o666));
        let home = &mounts[0].0;
        assert_eq!(std::fs::metadata(home).unwrap().uid(), 0);
        assert_eq!(
            std::fs::read_link(home.join("data")).unwrap(),
            Path::new("/var/lib/cassandra")
        );
        assert_eq!(
            std::fs::read_link(home.join("conf")).unwrap(),
            Path::new("/etc/cassandra")
        );
    }
}
