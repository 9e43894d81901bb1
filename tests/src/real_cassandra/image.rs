//! The official `cassandra:` image's file system, laid out under a root
//! directory, and the environment its Dockerfile sets. File system I/O.
//!
//! What `docker-library-cassandra/<minor>/Dockerfile` makes (fixtures):
//!
//! - `/opt/cassandra` (`CASSANDRA_HOME`): the release tarball, whose
//!   `bin/` comes from the fixtures (modes kept) and whose `lib/` holds
//!   symbolic links to the jars `scripts/fetch-cassandra` cached;
//! - its `conf/` moved to `/etc/cassandra` (`CASSANDRA_CONF`) and linked
//!   back (`/opt/cassandra/conf -> /etc/cassandra`);
//! - `/var/lib/cassandra` and `/var/log/cassandra`, linked as
//!   `/opt/cassandra/data` and `/opt/cassandra/logs`;
//! - the three directories owned by `cassandra` (uid and gid 999), mode
//!   1777, and the configuration world-writable (`chmod -R a+rwX`);
//! - Java at `/opt/java/openjdk` (`JAVA_HOME`), here a link to the Java the
//!   release was fetched with.
//!
//! Links inside the tree are relative, so it reads the same whether it is
//! seen at `<root>` or mounted at `/`.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::{Error, Release};

/// The `cassandra` user and group of the official image (`groupadd -r
/// cassandra --gid=999; useradd -r -g cassandra --uid=999 cassandra`).
pub const CASSANDRA_UID: u32 = 999;
/// See [`CASSANDRA_UID`].
pub const CASSANDRA_GID: u32 = 999;

/// The `PATH` of the image's base (debian:bookworm-slim), which the
/// Dockerfile prepends to.
const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The release's launcher scripts, from the fixtures' `bin/`.
const BIN_FILES: &[&str] = &["cassandra", "cassandra.in.sh", "nodetool", "stop-server"];

/// A laid-out image.
#[derive(Debug, Clone)]
pub struct Image {
    root: PathBuf,
    version: String,
}

impl Image {
    /// Lay out the image of `release` under `root` (which must be empty or
    /// absent). Needs root for the ownership of the image's directories.
    pub fn lay_out(root: &Path, release: &Release) -> Result<Image, Error> {
        let image = Image {
            root: root.to_path_buf(),
            version: release.version.clone(),
        };
        image.write(release)?;
        Ok(image)
    }

    /// An image of `version` already laid out at `root` (`/` inside its
    /// container, where [`Image::env`] then names its paths).
    pub fn at(root: &Path, version: &str) -> Image {
        Image {
            root: root.to_path_buf(),
            version: version.to_string(),
        }
    }

    fn write(&self, release: &Release) -> Result<(), Error> {
        let home = self.cassandra_home();
        for dir in [
            home.join("bin"),
            home.join("lib"),
            self.conf(),
            self.data(),
            self.logs(),
            self.root.join("opt/java"),
        ] {
            std::fs::create_dir_all(&dir).map_err(lay_out(&dir))?;
        }
        // A temporary directory is 0700: the cassandra user must traverse it.
        set_mode(&self.root, 0o755)?;
        for name in BIN_FILES {
            let to = home.join("bin").join(name);
            // fs::copy keeps the permission bits (755 or 644 upstream).
            std::fs::copy(release.fixtures.join("bin").join(name), &to).map_err(lay_out(&to))?;
        }
        for entry in read_dir(&release.lib)? {
            if entry.extension().is_some_and(|e| e == "jar") {
                let name = entry.file_name().unwrap_or_default();
                let to = home.join("lib").join(name);
                symlink(&entry, &to).map_err(lay_out(&to))?;
            }
        }
        for entry in read_dir(&release.fixtures)? {
            if entry.is_file() {
                let to = self.conf().join(entry.file_name().unwrap_or_default());
                std::fs::copy(&entry, &to).map_err(lay_out(&to))?;
                set_mode(&to, 0o666)?;
            }
        }
        for (link, target) in [
            ("conf", "../../etc/cassandra"),
            ("data", "../../var/lib/cassandra"),
            ("logs", "../../var/log/cassandra"),
        ] {
            let link = home.join(link);
            symlink(target, &link).map_err(lay_out(&link))?;
        }
        let java = self.java_home();
        symlink(&release.java_home, &java).map_err(lay_out(&java))?;
        for dir in [self.conf(), self.data(), self.logs()] {
            chown_cassandra(&dir)?;
            set_mode(&dir, 0o1777)?;
        }
        for entry in read_dir(&self.conf())? {
            chown_cassandra(&entry)?;
        }
        Ok(())
    }

    /// The directory the image is laid out in (`/` of the container).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Cassandra release version of the image (`CASSANDRA_VERSION`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `/opt/cassandra`.
    pub fn cassandra_home(&self) -> PathBuf {
        self.root.join("opt/cassandra")
    }

    /// `/etc/cassandra`.
    pub fn conf(&self) -> PathBuf {
        self.root.join("etc/cassandra")
    }

    /// `/var/lib/cassandra`.
    pub fn data(&self) -> PathBuf {
        self.root.join("var/lib/cassandra")
    }

    /// `/var/log/cassandra`.
    pub fn logs(&self) -> PathBuf {
        self.root.join("var/log/cassandra")
    }

    /// `/opt/java/openjdk`.
    pub fn java_home(&self) -> PathBuf {
        self.root.join("opt/java/openjdk")
    }

    /// The environment the Dockerfile sets (`ENV`), with the image's paths
    /// under the root, and `HOME` as gosu sets it for the cassandra user.
    pub fn env(&self) -> Vec<(String, String)> {
        let home = self.cassandra_home();
        let java = self.java_home();
        vec![
            ("JAVA_HOME".into(), java.display().to_string()),
            ("CASSANDRA_HOME".into(), home.display().to_string()),
            ("CASSANDRA_CONF".into(), self.conf().display().to_string()),
            ("CASSANDRA_VERSION".into(), self.version.clone()),
            (
                "PATH".into(),
                format!(
                    "{}:{}:{BASE_PATH}",
                    home.join("bin").display(),
                    java.join("bin").display()
                ),
            ),
            (
                "HOME".into(),
                self.root.join("home/cassandra").display().to_string(),
            ),
        ]
    }
}

fn lay_out(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::LayOut {
        path: path.to_path_buf(),
        source,
    }
}

fn read_dir(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut entries = std::fs::read_dir(dir)
        .map_err(lay_out(dir))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(lay_out(dir))?;
    entries.sort();
    Ok(entries)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(lay_out(path))
}

fn chown_cassandra(path: &Path) -> Result<(), Error> {
    std::os::unix::fs::chown(path, Some(CASSANDRA_UID), Some(CASSANDRA_GID)).map_err(lay_out(path))
}
