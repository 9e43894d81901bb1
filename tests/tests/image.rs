//! The operator image as `scripts/build-image` built it from
//! `init/Dockerfile` (issue 30, "what ships is what is tested"), read the
//! way a runtime reads it: the OCI layout's index, manifest, config and
//! layer, each checked against its digest; the config is the Dockerfile's
//! final stage (ENTRYPOINT, CMD, USER, ENV); the layer holds the stage's
//! COPYs and nothing else (no `target/`), root-owned, with `/plugins` 0555
//! and the agent jar 0444 and the pinned jar's bytes; the binary is a
//! static executable (no ELF interpreter, no shared library); and the
//! binary RUNS in the image's root file system (only the layer, the
//! runtime's `/proc` and an emptyDir mounted) with the image's
//! environment, as the image's user 65532 and as a Cassandra member's 999:
//! `--help`, `crd` (the committed CRD: an image built from other sources
//! fails here) and `install` as the members' init container runs it,
//! whose installed copy then runs too. A second implementation reads it
//! too: go-containerregistry's registry takes the layout and its client
//! pulls back the same config and files. And the test world runs that
//! binary in the operator's image (`KUBESIM_OPERATOR_IMAGE_BINARY`).
//!
//! Needs `scripts/build-image`: `scripts/test` runs it, then these tests
//! (ignored in a plain `cargo test`; `TEST_IMAGE=0 scripts/test` skips
//! both). There is no Docker engine here, so the image is built from the
//! Dockerfile by that script (read its header for what a registry build
//! adds: the distroless base's layers). Runs as root (to enter the image's
//! root and change user).

#[allow(dead_code)]
mod dockerfile_syntax;
#[allow(dead_code)]
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use dockerfile_syntax::{Instruction, dockerfile, final_stage, flag, repo};
use serde_json::Value;

/// The uid and gid a Cassandra member's containers run as
/// (docker-library/cassandra's user; the controller's runAsUser).
const CASSANDRA: (u32, u32) = (999, 999);

fn image_dir() -> PathBuf {
    let dir = repo().join("target/image");
    assert!(
        dir.join("oci/index.json").is_file(),
        "no image at {}: run scripts/build-image (scripts/test does)",
        dir.display()
    );
    dir
}

fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A blob of the layout, checked against its digest and size as a runtime
/// checks what it pulls.
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().expect("a digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let bytes = std::fs::read(layout.join("blobs/sha256").join(hex))
        .unwrap_or_else(|e| panic!("blob {digest}: {e}"));
    assert_eq!(
        sha256_hex(&bytes),
        hex,
        "blob {digest} does not hash to its name"
    );
    assert_eq!(
        Some(bytes.len() as u64),
        descriptor["size"].as_u64(),
        "blob {digest}'s size"
    );
    bytes
}

/// One entry of a tar archive (USTAR: what the layer is written as;
/// anything else is refused, not guessed at).
#[derive(Debug, Clone)]
struct Entry {
    path: String,
    kind: u8,
    mode: u32,
    uid: u32,
    gid: u32,
    data: Vec<u8>,
}

fn octal(field: &[u8]) -> u64 {
    let text = std::str::from_utf8(field).unwrap();
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    u64::from_str_radix(text, 8).unwrap_or_else(|_| panic!("not octal: {text:?}"))
}

fn untar(bytes: &[u8]) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at + 512 <= bytes.len() {
        let header = &bytes[at..at + 512];
        if header.iter().all(|&b| b == 0) {
            return entries;
        }
        assert_eq!(&header[257..263], b"ustar\0", "a USTAR header at {at}");
        let stored: u64 = octal(&header[148..156]);
        let mut sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        sum = sum - header[148..156].iter().map(|&b| u64::from(b)).sum::<u64>() + 8 * 32;
        assert_eq!(sum, stored, "the header's checksum at {at}");
        let text = |f: &[u8]| {
            String::from_utf8(f.iter().take_while(|&&b| b != 0).copied().collect()).unwrap()
        };
        let (name, prefix) = (text(&header[0..100]), text(&header[345..500]));
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let kind = header[156];
        assert!(
            matches!(kind, b'0' | 0 | b'5'),
            "{path}: entry type {:?}: the layer holds files and directories only",
            kind as char
        );
        let size = octal(&header[124..136]) as usize;
        let data = bytes[at + 512..at + 512 + size].to_vec();
        entries.push(Entry {
            path,
            kind: if kind == 0 { b'0' } else { kind },
            mode: octal(&header[100..108]) as u32,
            uid: octal(&header[108..116]) as u32,
            gid: octal(&header[116..124]) as u32,
            data,
        });
        at += 512 + size.div_ceil(512) * 512;
    }
    panic!("the archive ends without its end-of-archive blocks");
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("gzip")
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the layer is not gzip");
    out.stdout
}

/// The image as the layout holds it: its one manifest's config and layer.
struct Image {
    index: Value,
    config: Value,
    layer: Vec<Entry>,
}

fn image() -> Image {
    let layout = image_dir().join("oci");
    let read_json = |bytes: &[u8]| -> Value { serde_json::from_slice(bytes).unwrap() };
    let oci_layout = read_json(&std::fs::read(layout.join("oci-layout")).unwrap());
    assert_eq!(oci_layout["imageLayoutVersion"], "1.0.0");
    let index = read_json(&std::fs::read(layout.join("index.json")).unwrap());
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "one image: {index}");
    assert_eq!(
        manifests[0]["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let manifest = read_json(&blob(&layout, &manifests[0]));
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = read_json(&blob(&layout, &manifest["config"]));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "the final stage's own layer: {manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let tar = gunzip(&blob(&layout, &layers[0]));
    // The config names the layer by its uncompressed digest (diff_id): a
    // runtime refuses a layer that does not match.
    assert_eq!(
        config["rootfs"]["diff_ids"],
        serde_json::json!([format!("sha256:{}", sha256_hex(&tar))])
    );
    Image {
        index,
        config,
        layer: untar(&tar),
    }
}

/// The final stage's COPYs: (source stage, source, destination).
fn copies(stage: &[Instruction]) -> Vec<(String, String, String)> {
    stage
        .iter()
        .filter(|i| i.keyword == "COPY")
        .map(|i| {
            (
                flag(i, "from").expect("COPY --from").to_string(),
                i.args[0].clone(),
                i.args[1].clone(),
            )
        })
        .collect()
}

fn exec_form(i: &Instruction) -> Value {
    serde_json::from_str(&i.args.join(" "))
        .unwrap_or_else(|e| panic!("{i:?} is not in exec (JSON) form: {e}"))
}

/// The image's config is the Dockerfile's final stage: what the kubelet
/// starts (ENTRYPOINT and CMD), as whom (USER) and with which environment
/// (ENV, on BuildKit's default PATH), for amd64 Linux, named as the
/// controller's default image, in the OCI layout and in the tarball
/// `docker load` reads.
#[test]
#[ignore = "needs the image: scripts/test builds it and runs these; or scripts/build-image, then --ignored"]
fn the_config_is_the_dockerfiles_final_stage() {
    let instructions = dockerfile();
    let (from, stage) = final_stage(&instructions);
    assert!(
        from.args[0].starts_with("gcr.io/distroless/static"),
        "a static base, as the static binary needs: {from:?}"
    );
    let image = image();
    let config = &image.config["config"];
    let last = |keyword: &str| {
        stage
            .iter()
            .rfind(|i| i.keyword == keyword)
            .unwrap_or_else(|| panic!("the final stage has no {keyword}"))
    };
    assert_eq!(config["Entrypoint"], exec_form(last("ENTRYPOINT")));
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/cassandra-operator"])
    );
    assert_eq!(config["Cmd"], exec_form(last("CMD")));
    assert_eq!(config["User"], last("USER").args.join(" "));
    assert_eq!(config["User"], "65532:65532");
    let mut env =
        vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()];
    for i in stage.iter().filter(|i| i.keyword == "ENV") {
        for pair in &i.args {
            assert!(pair.contains('='), "ENV in KEY=VALUE form: {i:?}");
            env.push(pair.clone());
        }
    }
    assert!(env.contains(&"INSTALL_PLUGINS=/plugins".to_string()));
    assert_eq!(config["Env"], serde_json::json!(env));
    let keys: Vec<&String> = config.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["Cmd", "Entrypoint", "Env", "User"],
        "nothing the Dockerfile does not say"
    );
    assert_eq!(image.config["architecture"], "amd64");
    assert_eq!(image.config["os"], "linux");

    let name = crds::v1alpha1::DEFAULT_OPERATOR_IMAGE;
    let annotations = &image.index["manifests"][0]["annotations"];
    assert_eq!(annotations["io.containerd.image.name"], name);
    assert_eq!(
        annotations["org.opencontainers.image.ref.name"],
        name.rsplit_once(':').unwrap().1
    );
    // The tarball: the same layout, with docker save's manifest.json.
    let archive = untar(&std::fs::read(image_dir().join("cassandra-operator.tar")).unwrap());
    let file = |path: &str| {
        archive
            .iter()
            .find(|e| e.path == path)
            .unwrap_or_else(|| panic!("{path} is not in the tarball"))
            .data
            .clone()
    };
    let saved: Value = serde_json::from_slice(&file("manifest.json")).unwrap();
    assert_eq!(saved[0]["RepoTags"], serde_json::json!([name]));
    let layout = image_dir().join("oci");
    for path in [&saved[0]["Config"], &saved[0]["Layers"][0]] {
        let path = path.as_str().unwrap();
        assert_eq!(
            file(path),
            std::fs::read(layout.join(path)).unwrap(),
            "{path}"
        );
    }
    assert_eq!(
        file("index.json"),
        std::fs::read(layout.join("index.json")).unwrap()
    );
}

/// ELF64 program headers (type, offset, file size) of `bytes`.
fn program_headers(bytes: &[u8]) -> Vec<(u32, usize, usize)> {
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not ELF64");
    assert_eq!(bytes[5], 1, "not little-endian");
    assert_eq!(u16_at(18), 62, "not x86-64");
    let (phoff, phentsize, phnum) = (u64_at(32), usize::from(u16_at(54)), usize::from(u16_at(56)));
    (0..phnum)
        .map(|n| {
            let at = phoff + n * phentsize;
            (u32_at(at), u64_at(at + 8), u64_at(at + 32))
        })
        .collect()
}

/// The layer holds what the final stage copies and the directories above
/// it, nothing else (no build output, no `target/`), owned by root as a
/// COPY without `--chown` leaves it: the binary executable by every user,
/// `/plugins` 0555 (a directory without its search bit is the BuildKit
/// `--chmod` failure of issue 30: no member user could read the jar), the
/// jar 0444 and the very bytes the Dockerfile pins; and the binary is
/// static (no `PT_INTERP`, no `DT_NEEDED`): it runs in the image without a
/// libc and, once installed, inside any database image.
#[test]
#[ignore = "needs the image: scripts/test builds it and runs these; or scripts/build-image, then --ignored"]
fn the_layer_holds_the_copies_static_and_readable() {
    let instructions = dockerfile();
    let (_, stage) = final_stage(&instructions);
    let layer = image().layer;
    let paths: Vec<&str> = layer.iter().map(|e| e.path.trim_end_matches('/')).collect();
    let mut expected = Vec::new();
    for (_, _, dest) in copies(stage) {
        let mut parent = Path::new(&dest);
        while let Some(p) = parent.parent().filter(|p| *p != Path::new("/")) {
            expected.push(p.to_string_lossy().trim_start_matches('/').to_string());
            parent = p;
        }
        expected.push(dest.trim_start_matches('/').to_string());
    }
    expected.push("plugins/jolokia-jvm-agent.jar".to_string());
    expected.sort();
    expected.dedup();
    let mut sorted: Vec<&str> = paths.clone();
    sorted.sort();
    assert_eq!(sorted, expected, "the layer's entries");
    assert!(
        !paths
            .iter()
            .any(|p| p.split('/').any(|e| e == "target" || e == ".."))
    );
    let entry = |path: &str| {
        layer
            .iter()
            .find(|e| e.path.trim_end_matches('/') == path)
            .unwrap()
    };
    for e in &layer {
        assert_eq!((e.uid, e.gid), (0, 0), "{} is root's", e.path);
        let kind = if e.path.ends_with('/') { b'5' } else { b'0' };
        assert_eq!(e.kind, kind, "{}", e.path);
    }
    let modes: BTreeMap<&str, String> = layer
        .iter()
        .map(|e| (e.path.trim_end_matches('/'), format!("{:o}", e.mode)))
        .collect();
    assert_eq!(modes["plugins"], "555", "/plugins");
    assert_eq!(modes["plugins/jolokia-jvm-agent.jar"], "444", "the jar");
    assert_eq!(
        modes["usr/local/bin/cassandra-operator"], "755",
        "the binary"
    );
    for dir in ["usr", "usr/local", "usr/local/bin"] {
        assert_eq!(modes[dir], "755", "/{dir}");
    }

    let pinned = instructions
        .iter()
        .find(|i| {
            i.keyword == "ADD"
                && i.args.last().map(String::as_str) == Some("/plugins/jolokia-jvm-agent.jar")
        })
        .and_then(|i| flag(i, "checksum"))
        .expect("the agent's pinned ADD");
    assert_eq!(
        format!(
            "sha256:{}",
            sha256_hex(&entry("plugins/jolokia-jvm-agent.jar").data)
        ),
        pinned
    );

    let binary = &entry("usr/local/bin/cassandra-operator").data;
    let headers = program_headers(binary);
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    assert!(
        !headers.iter().any(|(t, _, _)| *t == PT_INTERP),
        "the binary names an ELF interpreter: it is not static"
    );
    // A static PIE keeps a dynamic section for its own relocations, but
    // needs no library.
    for (_, offset, size) in headers.iter().filter(|(t, _, _)| *t == PT_DYNAMIC) {
        for tag in binary[*offset..offset + size].chunks_exact(16) {
            let tag = i64::from_le_bytes(tag[..8].try_into().unwrap());
            assert_ne!(tag, 1, "the binary needs a shared library (DT_NEEDED)");
            if tag == 0 {
                break;
            }
        }
    }
    // What the test world runs (KUBESIM_OPERATOR_IMAGE_BINARY from
    // scripts/test) is this file.
    assert_eq!(
        &std::fs::read(image_dir().join("rootfs/usr/local/bin/cassandra-operator")).unwrap(),
        binary,
        "target/image/rootfs is not the image's layer"
    );
    println!("the image's binary: {} bytes, static", binary.len());
}

/// The layer unpacked into a fresh directory as a runtime does (owners and
/// modes from the layer), with the mount points a Pod gets: `/proc`, and
/// an emptyDir (0777) at `/mnt/shared` as in a member Pod.
fn root_file_system(layer: &[Entry]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let mut dirs = Vec::new();
    for e in layer {
        let path = root.path().join(e.path.trim_end_matches('/'));
        if e.kind == b'5' {
            std::fs::create_dir_all(&path).unwrap();
            dirs.push((path, e));
        } else {
            std::fs::write(&path, &e.data).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode)).unwrap();
            std::os::unix::fs::chown(&path, Some(e.uid), Some(e.gid)).unwrap();
        }
    }
    // Directories last: a 0555 directory is written into first.
    for (path, e) in dirs {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(e.mode)).unwrap();
        std::os::unix::fs::chown(&path, Some(e.uid), Some(e.gid)).unwrap();
    }
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(root.path().join("proc")).unwrap();
    std::fs::create_dir_all(root.path().join("mnt/shared")).unwrap();
    std::fs::set_permissions(
        root.path().join("mnt/shared"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    root
}

/// Runs `argv` in the image's root as `uid:gid` with the image's
/// environment: a new mount and PID namespace with `/proc` mounted (the
/// binary finds itself through `/proc/self/exe`), chroot, then the user's
/// ids with no other group (root's capabilities go with the uid).
fn run_in_image(root: &Path, env: &[String], (uid, gid): (u32, u32), argv: &[&str]) -> Output {
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--pid", "--fork"])
        .arg(format!("--mount-proc={}", root.join("proc").display()))
        .arg("chroot")
        .arg(format!("--userspec={uid}:{gid}"))
        .arg(format!("--groups={gid}"))
        .arg(root)
        .args(argv)
        .env_clear()
        // containerd's HOME for a user the image's /etc/passwd lacks.
        .env("HOME", "/")
        .stdin(Stdio::null());
    for pair in env {
        let (k, v) = pair.split_once('=').unwrap();
        command.env(k, v);
    }
    command
        .output()
        .expect("unshare and chroot (util-linux, coreutils)")
}

fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The image's binary runs in the image's own root file system, without
/// root: as the image's USER (65532, the operator's Pod) and as uid 999 (a
/// Cassandra member's init container, which runs as the member's user):
/// `--help`; `crd`, which prints the committed CRD (so the image is built
/// from these sources, not a stale build); and `install --target
/// /mnt/shared`, the init container's command, with the image's
/// `INSTALL_PLUGINS`: the binary and the agent jar land in the shared
/// volume byte for byte, 0755 and 0444, and the installed copy runs (as
/// the sidecar, from the database container's side of the volume).
#[test]
#[ignore = "needs the image: scripts/test builds it and runs these; or scripts/build-image, then --ignored"]
fn the_binary_runs_in_the_image_as_its_user_and_as_a_member() {
    assert_eq!(
        nix_uid(),
        0,
        "run as root: the test enters the image's root and changes user"
    );
    let image = image();
    let env: Vec<String> = image.config["config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let entrypoint: Vec<String> =
        serde_json::from_value(image.config["config"]["Entrypoint"].clone()).unwrap();
    let user = image.config["config"]["User"].as_str().unwrap();
    let (u, g) = user.split_once(':').unwrap();
    let image_user = (u.parse().unwrap(), g.parse().unwrap());
    let committed_crd =
        std::fs::read_to_string(repo().join("crds/cassandra.rook.io_clusters.yaml")).unwrap();
    let data = |path: &str| {
        image
            .layer
            .iter()
            .find(|e| e.path == path)
            .unwrap()
            .data
            .clone()
    };
    for id in [image_user, CASSANDRA] {
        let root = root_file_system(&image.layer);
        let run = |args: &[&str]| {
            let argv: Vec<&str> = entrypoint
                .iter()
                .map(String::as_str)
                .chain(args.iter().copied())
                .collect();
            run_in_image(root.path(), &env, id, &argv)
        };
        let help = ok(&format!("--help as {id:?}"), &run(&["--help"]));
        for role in ["controller", "install", "sidecar"] {
            assert!(
                help.contains(role),
                "--help as {id:?} lists {role}:\n{help}"
            );
        }
        assert!(
            ok(&format!("crd as {id:?}"), &run(&["crd"])) == committed_crd,
            "the image's binary prints another CRD than crds/cassandra.rook.io_clusters.yaml: \
             the image is not built from these sources (run scripts/build-image)"
        );
        ok(
            &format!("install as {id:?}"),
            &run(&["install", "--target", "/mnt/shared"]),
        );
        let shared = root.path().join("mnt/shared");
        let installed = |path: &str, mode: u32, bytes: Vec<u8>| {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            let meta = std::fs::metadata(shared.join(path))
                .unwrap_or_else(|e| panic!("install as {id:?} left no {path}: {e}"));
            assert_eq!(
                format!("{:o}", meta.permissions().mode() & 0o7777),
                format!("{mode:o}"),
                "{path} as {id:?}"
            );
            assert_eq!(meta.uid(), id.0, "{path} is the installer's");
            assert!(
                std::fs::read(shared.join(path)).unwrap() == bytes,
                "{path} as {id:?}"
            );
        };
        installed(
            "cassandra-operator",
            0o755,
            data("usr/local/bin/cassandra-operator"),
        );
        installed(
            "plugins/jolokia-jvm-agent.jar",
            0o444,
            data("plugins/jolokia-jvm-agent.jar"),
        );
        ok(
            &format!("the installed copy as {id:?}"),
            &run_in_image(
                root.path(),
                &env,
                id,
                &["/mnt/shared/cassandra-operator", "--help"],
            ),
        );
    }
}

fn nix_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// `crane registry serve`, killed when the test ends.
struct Registry {
    child: std::process::Child,
    address: String,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn crane() -> PathBuf {
    let crane = repo().join("target/tools/bin/crane");
    assert!(
        crane.is_file(),
        "no {}: run scripts/build-image (it builds crane from the Go module proxy)",
        crane.display()
    );
    crane
}

fn registry() -> Registry {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let child = Command::new(crane())
        .args(["registry", "serve", "--address", &address])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let registry = Registry { child, address };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(&registry.address).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "crane registry serve did not listen on {}",
            registry.address
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    registry
}

fn crane_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(crane()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "crane {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Another implementation than the one that wrote the image reads it as
/// a registry and a runtime would (go-containerregistry's `crane`, the
/// library behind ko, kaniko's and many CI pushes): a registry takes the
/// OCI layout as pushed and serves it under the manifest's own digest (the
/// digest a Deployment may pin), `crane validate` finds the served image
/// and the `docker load` tarball well-formed (every layer's digests
/// recomputed), and the image pulled back has the config and, flattened as
/// a runtime unpacks it, the very files, modes and owners of the layer.
#[test]
#[ignore = "needs the image: scripts/test builds it and runs these; or scripts/build-image, then --ignored"]
fn a_registry_takes_the_image_and_gives_it_back() {
    let image = image();
    let registry = registry();
    let reference = format!("{}/cassandra-operator:0.1.0", registry.address);
    let layout = image_dir().join("oci");
    let pushed =
        String::from_utf8(crane_ok(&["push", layout.to_str().unwrap(), &reference])).unwrap();
    let digest = image.index["manifests"][0]["digest"].as_str().unwrap();
    assert_eq!(
        pushed.trim(),
        format!("{}/cassandra-operator@{digest}", registry.address),
        "the registry names the image by the manifest's digest"
    );
    let validated = crane_ok(&["validate", "--remote", &reference]);
    assert!(String::from_utf8_lossy(&validated).starts_with("PASS"));
    let tarball = image_dir().join("cassandra-operator.tar");
    let validated = crane_ok(&["validate", "--tarball", tarball.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&validated).starts_with("PASS"));
    let config: Value = serde_json::from_slice(&crane_ok(&["config", &reference])).unwrap();
    assert_eq!(config, image.config);
    let pulled = untar(&crane_ok(&["export", &reference, "-"]));
    let files = |entries: &[Entry]| -> Vec<(String, u8, u32, u32, u32, Vec<u8>)> {
        let mut files: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.path.trim_end_matches('/').to_string(),
                    e.kind,
                    e.mode,
                    e.uid,
                    e.gid,
                    e.data.clone(),
                )
            })
            .collect();
        files.sort();
        files
    };
    assert!(
        files(&pulled) == files(&image.layer),
        "the file system pulled back differs: {:?}",
        pulled
            .iter()
            .map(|e| format!("{:o} {}", e.mode, e.path))
            .collect::<Vec<_>>()
    );
}

/// The test world runs the image's binary (`scripts/test` sets
/// `KUBESIM_OPERATOR_IMAGE_BINARY`): given the workspace's cargo build
/// as the operator binary, as the e2e worlds give it, a member-like Pod
/// whose init container is the operator image's `install` (as uid 999,
/// with fsGroup, into an emptyDir) leaves in the shared volume the very
/// bytes of the image's binary, which the Pod's next container compares
/// (`cmp`): the sidecar a member runs is the binary that ships.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the image: scripts/test builds it and runs these; or scripts/build-image, then --ignored"]
async fn the_test_world_runs_the_images_binary() {
    let image_binary = image_dir().join("rootfs/usr/local/bin/cassandra-operator");
    assert_eq!(
        std::env::var_os("KUBESIM_OPERATOR_IMAGE_BINARY").map(PathBuf::from),
        Some(image_binary.clone()),
        "run with KUBESIM_OPERATOR_IMAGE_BINARY={} (scripts/test sets it)",
        image_binary.display()
    );
    let work = tempfile::tempdir().unwrap();
    // What the e2e worlds pass: cargo's build of the root package.
    let cargo_build = repo().join("target/debug/cassandra-operator");
    let sim = support::start_sim(work.path(), &["a"], |o| {
        o.operator_binary = Some(cargo_build);
        o.fixtures = Some(testworld::harness::fixtures().unwrap());
    })
    .await;
    let shared = serde_json::json!([{"name": "shared", "mountPath": "/mnt/shared"}]);
    let pod = serde_json::json!({
        "metadata": {"name": "member", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999},
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [{
                "name": "install",
                "image": crds::v1alpha1::DEFAULT_OPERATOR_IMAGE,
                "args": ["install", "--target", "/mnt/shared"],
                "volumeMounts": shared
            }],
            "containers": [{
                "name": "check", "image": "busybox:1.36",
                "command": ["cmp", "/mnt/shared/cassandra-operator", image_binary.to_str().unwrap()],
                "volumeMounts": shared
            }]
        }
    });
    let done = support::run_to_end(sim.store(), pod).await;
    assert_eq!(
        testworld::harness::str_at(&done, "/status/phase"),
        "Succeeded",
        "the installed binary is not the image's: {done}"
    );
}
