//! Starting a container: the image's program and files, the environment
//! as the kubelet builds it (downward API, ConfigMaps, `$(VAR)`
//! expansion), the mount script run in the container's own mount and PID
//! namespaces (in its Pod's network namespace), and the identity its
//! `securityContext` asks for, set last. I/O.

use super::*;
use crate::kubesim::sim::RealCassandra;

pub(super) struct Running {
    pub(super) child: tokio::process::Child,
    pub(super) outer: u32,
    pub(super) inner: u32,
    pub(super) env: BTreeMap<String, String>,
    /// The container's `setpriv` arguments, for its exec probes and hooks.
    pub(super) identity: Vec<String>,
}

/// What an image provides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// The operator image: its entrypoint is the operator binary.
    Operator,
    /// A database image: `cassandra` or `scylla`, and its tag.
    Database {
        /// `cassandra` or `scylla`
        kind: String,
        /// The image tag (`3.11.1`).
        tag: String,
    },
    /// Anything else: its command runs as a host program.
    Other,
}

/// Classifies an image reference.
pub fn classify(image: &str, operator_images: &[String]) -> Image {
    let (repo, tag) = match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, t),
        _ => (image, "latest"),
    };
    let repo = repo.split('@').next().unwrap_or(repo);
    if operator_images.iter().any(|o| o == repo) {
        return Image::Operator;
    }
    let last = repo.rsplit('/').next().unwrap_or(repo);
    if last == "cassandra" || last == "scylla" {
        return Image::Database {
            kind: last.to_string(),
            tag: tag.to_string(),
        };
    }
    Image::Other
}

/// The fixtures directory of a database image's default configuration.
pub fn fixtures_dir(root: &Path, kind: &str, tag: &str) -> Option<PathBuf> {
    if kind == "scylla" {
        return Some(root.join("scylla"));
    }
    let base = root.join("cassandra");
    if tag == "latest" {
        let mut versions: Vec<String> = std::fs::read_dir(&base)
            .ok()?
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        versions.sort_by_key(|v| {
            v.split('.')
                .map(|p| p.parse::<u32>().unwrap_or(0))
                .collect::<Vec<_>>()
        });
        return versions.last().map(|v| base.join(v));
    }
    let mut parts = tag.split(['.', '-']);
    let mm = format!("{}.{}", parts.next()?, parts.next().unwrap_or("0"));
    let dir = base.join(mm);
    dir.is_dir().then_some(dir)
}

/// Expands `$(VAR)` references as the kubelet does (`$$` escapes).
pub fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(a) = after.strip_prefix('$') {
            out.push('$');
            rest = a;
        } else if let Some(body) = after.strip_prefix('(')
            && let Some(end) = body.find(')')
            && let Some(v) = env.get(&body[..end])
        {
            out.push_str(v);
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub(super) fn field_value(pod: &Value, path: &str, ip: &str, host_ip: &str) -> Option<String> {
    let quoted = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    if let Some(k) = quoted("metadata.labels") {
        return Some(s(pod, &format!("/metadata/labels/{}", k.replace('/', "~1"))).to_string());
    }
    if let Some(k) = quoted("metadata.annotations") {
        return Some(
            s(
                pod,
                &format!("/metadata/annotations/{}", k.replace('/', "~1")),
            )
            .to_string(),
        );
    }
    Some(match path {
        "metadata.name" => s(pod, "/metadata/name").to_string(),
        "metadata.namespace" => s(pod, "/metadata/namespace").to_string(),
        "metadata.uid" => s(pod, "/metadata/uid").to_string(),
        "spec.nodeName" => s(pod, "/spec/nodeName").to_string(),
        "spec.serviceAccountName" => s(pod, "/spec/serviceAccountName").to_string(),
        "status.podIP" | "status.podIPs" => ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        _ => return None,
    })
}

pub(super) fn resource_value(
    pod: &Value,
    this: &Value,
    r: &Value,
    allocatable: &Value,
) -> Option<String> {
    let container = match s(r, "/containerName") {
        "" => this.clone(),
        name => pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)?
            .iter()
            .find(|c| c["name"] == name)?
            .clone(),
    };
    let resource = s(r, "/resource");
    let (kind, what) = resource.split_once('.')?;
    let divisor = match r.get("divisor") {
        Some(Value::String(d)) => d.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "1".to_string(),
    };
    let from = |k: &str| {
        container
            .pointer(&format!("/resources/{k}/{what}"))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
    };
    let value = match kind {
        "limits" => from("limits").or_else(|| allocatable.get(what)?.as_str().map(str::to_string)),
        _ => from("requests")
            .or_else(|| from("limits"))
            .or(Some("0".into())),
    }?;
    divide_ceil(&value, &divisor).map(|v| v.to_string())
}

impl PodCtx {
    pub(super) fn env_for(
        &self,
        c: &Value,
        image: &Image,
        bin: &Path,
        real: Option<&crate::real_cassandra::Release>,
    ) -> BTreeMap<String, String> {
        let pod = self.pod();
        let mut env = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            env.insert(k.to_string(), v);
        };
        put(
            "PATH",
            format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                bin.display()
            ),
        );
        put("HOME", "/root".into());
        let hostname = match s(&pod, "/spec/hostname") {
            "" => s(&pod, "/metadata/name"),
            h => h,
        };
        put("HOSTNAME", hostname.to_string());
        // The `kubernetes` Service as the kubelet gives it to every
        // container (in-cluster configuration: these and the projected
        // ServiceAccount volume; no kubeconfig).
        let (host, port) = (self.access.api.ip(), self.access.api.port());
        put("KUBERNETES_SERVICE_HOST", host.to_string());
        put("KUBERNETES_SERVICE_PORT", port.to_string());
        put("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string());
        put("KUBERNETES_PORT", format!("tcp://{host}:{port}"));
        put("KUBESIM_URL", self.access.sim_url.clone());
        let tag = s(c, "/image")
            .rsplit_once(':')
            .map(|(_, t)| t.to_string())
            .unwrap_or_else(|| "latest".into());
        put("CASSANDRA_VERSION", tag);
        if let Image::Database { kind, .. } = image {
            put("CONFIG_DEFAULTS_DIR", format!("/etc/{kind}"));
            if kind == "cassandra" {
                // The official image's environment.
                put("CASSANDRA_HOME", CASSANDRA_HOME.into());
                put("CASSANDRA_CONF", "/etc/cassandra".into());
                let path = env.get("PATH").cloned().unwrap_or_default();
                env.insert("PATH".into(), format!("{CASSANDRA_HOME}/bin:{path}"));
            }
        }
        if let Some(release) = real {
            // The official image's ENV (Java's too), as in its container.
            let image = crate::real_cassandra::Image::at(Path::new("/"), &release.version);
            // HOME stays the kubelet's (see the module docs of the sim).
            env.extend(image.env().into_iter().filter(|(k, _)| k != "HOME"));
            if let Some(real) = &self.opts.real_cassandra {
                if !real.jvm_extra_opts.is_empty() {
                    env.insert("JVM_EXTRA_OPTS".into(), real.jvm_extra_opts.clone());
                }
                env.extend(real.env.iter().cloned());
            }
        }
        if *image == Image::Operator && self.opts.real_cassandra.is_some() {
            // init/Dockerfile: ENV INSTALL_PLUGINS=/plugins.
            env.insert("INSTALL_PLUGINS".into(), "/plugins".into());
        }
        let ns = ns_of(&pod).unwrap_or("default").to_string();
        for from in c
            .get("envFrom")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = s(from, "/configMapRef/name");
            if name.is_empty() {
                continue;
            }
            if let Ok(cm) = self.store.get(&t("", "configmaps", Some(&ns)), name) {
                let prefix = s(from, "/prefix");
                for (k, v) in cm
                    .get("data")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    env.insert(
                        format!("{prefix}{k}"),
                        v.as_str().unwrap_or_default().to_string(),
                    );
                }
            }
        }
        for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
            let name = s(e, "/name").to_string();
            let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
                Some(expand(v, &env))
            } else if let Some(f) = e.pointer("/valueFrom/fieldRef") {
                field_value(&pod, s(f, "/fieldPath"), &self.ip, &self.host_ip)
            } else if let Some(r) = e.pointer("/valueFrom/resourceFieldRef") {
                resource_value(&pod, c, r, &self.allocatable)
            } else if let Some(k) = e.pointer("/valueFrom/configMapKeyRef") {
                self.store
                    .get(&t("", "configmaps", Some(&ns)), s(k, "/name"))
                    .ok()
                    .and_then(|cm| {
                        cm.pointer(&format!("/data/{}", s(k, "/key")))
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
            } else {
                Some(String::new())
            };
            if let Some(v) = value {
                env.insert(name, v);
            }
        }
        env
    }
}

pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub(super) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

/// Starts container `c` of `image` as `id`, the identity the kubelet
/// checked before it created anything.
pub(super) async fn start_container(
    ctx: &Arc<PodCtx>,
    c: &Value,
    image: &Image,
    id: &security::Identity,
    volumes: &HashMap<String, PathBuf>,
    restart: u32,
) -> Result<Running, String> {
    let name = s(c, "/name");
    let strings = |p: &str| -> Option<Vec<String>> {
        c.get(p).and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
    };
    let operator = || {
        ctx.opts
            .operator_binary
            .clone()
            .ok_or_else(|| "kubesim has no operator binary (--operator-binary)".to_string())
    };
    let mut argv = match (strings("command"), &image) {
        (Some(cmd), _) if !cmd.is_empty() => {
            let mut a = cmd;
            a.extend(strings("args").unwrap_or_default());
            a
        }
        (_, Image::Operator) => {
            let mut a = vec![operator()?.display().to_string()];
            a.extend(strings("args").unwrap_or_default());
            a
        }
        (_, Image::Database { .. }) => {
            strings("args").unwrap_or_else(|| vec!["cassandra".into(), "-f".into()])
        }
        (_, Image::Other) => {
            return Err(format!(
                "kubesim does not know the entrypoint of image {:?}: give a command",
                s(c, "/image")
            ));
        }
    };
    if argv[0] == OPERATOR_COMMAND {
        argv[0] = operator()?.display().to_string();
    }
    let cdir = ctx.dir.join("containers").join(name);
    // A restarted container starts from its image again.
    let _ = std::fs::remove_dir_all(&cdir);
    let bin = cdir.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| format!("create {}: {e}", bin.display()))?;
    let mut mounts: Vec<(PathBuf, String, bool)> = Vec::new();
    if *image == Image::Operator
        && let Ok(op) = operator()
    {
        let _ = std::os::unix::fs::symlink(op, bin.join("cassandra-operator"));
    }
    // A released 4.1 or 5.0 of the cassandra image runs the real thing
    // when the sim is asked to; not fetched, it cannot start (as an image
    // that cannot be pulled).
    let real = match (&ctx.opts.real_cassandra, &image) {
        (Some(rc), Image::Database { kind, tag })
            if kind == "cassandra" && RealCassandra::runs(tag) =>
        {
            let fixtures = ctx.opts.fixtures.as_deref().ok_or_else(|| {
                "kubesim has no fixtures (--fixtures): the release's bin/ and conf/".to_string()
            })?;
            Some(
                crate::real_cassandra::Release::cached_in(&rc.cache, fixtures, tag)
                    .map_err(|e| e.to_string())?,
            )
        }
        _ => None,
    };
    if *image == Image::Operator
        && let Some(real) = &ctx.opts.real_cassandra
    {
        let plugins = images::operator_plugins(&cdir, &real.jolokia_agent())?;
        mounts.push((plugins, "/plugins".to_string(), false));
    }
    if let Some(release) = &real {
        let layer = images::real_cassandra_layer(&cdir, release)?;
        mounts.extend(layer.into_iter().map(|(h, p)| (h, p, false)));
    } else if let Image::Database { kind, tag } = &image {
        if let Some(fake) = &ctx.opts.fake_cassandra {
            let _ = std::os::unix::fs::symlink(fake, bin.join("cassandra"));
            if kind == "scylla" {
                let _ = std::os::unix::fs::symlink(fake, bin.join("scylla"));
                // The image's disk benchmark (tests/src/bin/fake-iotune.rs).
                let iotune = fake.with_file_name("fake-iotune");
                if iotune.is_file() {
                    let _ = std::os::unix::fs::symlink(iotune, bin.join("iotune"));
                }
            }
        }
        if let Some(root) = &ctx.opts.fixtures {
            let Some(src) = fixtures_dir(root, kind, tag) else {
                return Err(format!(
                    "no default configuration for {kind}:{tag} under {}",
                    root.display()
                ));
            };
            let etc = cdir.join("etc").join(kind);
            copy_dir(&src, &etc).map_err(|e| format!("copy {}: {e}", src.display()))?;
        }
        // The image's files, owned as in the image; the volume mounts
        // below cover them where the pod mounts volumes.
        let layer = images::database_layer(&cdir, kind, ctx.opts.fake_cassandra.as_deref())?;
        mounts.extend(layer.into_iter().map(|(h, p)| (h, p, false)));
    }
    for m in c
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(host) = volumes.get(s(m, "/name")) else {
            return Err(format!("volume {:?} not found", s(m, "/name")));
        };
        let mut host = host.clone();
        let sub = s(m, "/subPath");
        if !sub.is_empty() {
            host = host.join(sub);
            if !host.exists() {
                std::fs::create_dir_all(&host).map_err(|e| e.to_string())?;
            }
        }
        mounts.push((
            host,
            s(m, "/mountPath").to_string(),
            m.get("readOnly") == Some(&json!(true)),
        ));
    }
    let env = ctx.env_for(c, image, &bin, real.as_ref());
    let argv: Vec<String> = argv.iter().map(|a| expand(a, &env)).collect();
    let info = images::info(image);
    let mut script = String::from("set -e\n");
    // runc resolves every mount's source on the host before the container
    // sees any of them; here the container shares the host's filesystem and
    // the mounts are made one by one, so a volume mounted over a directory
    // that holds the sim's own files (an emptyDir on /tmp while the work
    // dir is under /tmp) comes last, and the sim's directory (the image's
    // files, the binaries on PATH) is put back, read-only, through a file
    // descriptor opened before it was covered.
    let sim_dir = ctx.dir.clone();
    mounts.sort_by_key(|(_, path, _)| sim_dir.starts_with(path));
    let sim = quote(&sim_dir.display().to_string());
    for (host, path, ro) in &mounts {
        let (h, p) = (quote(&host.display().to_string()), quote(path));
        let covers_sim = sim_dir.starts_with(path);
        if covers_sim {
            script.push_str(&format!("exec 9< {sim}\n"));
        }
        script.push_str(&format!(
            "if [ -d {h} ]; then mkdir -p {p}; else mkdir -p \"$(dirname {p})\"; [ -e {p} ] || touch {p}; fi\nmount --bind {h} {p}\n"
        ));
        if *ro {
            script.push_str(&format!("mount -o remount,bind,ro {p}\n"));
        }
        if covers_sim {
            script.push_str(&format!(
                "mkdir -p {sim}\nmount --bind /proc/self/fd/9 {sim}\nmount -o remount,bind,ro {sim}\nexec 9<&-\n"
            ));
        }
    }
    if let Some(wd) = c.get("workingDir").and_then(Value::as_str) {
        script.push_str(&format!("mkdir -p {0}; cd {0}\n", quote(wd)));
    }
    if id.read_only_root {
        let writable: Vec<String> = mounts
            .iter()
            .filter(|m| !m.2 && !m.0.starts_with(&cdir))
            .map(|m| m.1.clone())
            .chain(info.volumes.iter().map(|v| v.to_string()))
            .collect();
        script.push_str(&security::read_only_root_script(&writable));
    }
    // The identity changes last: the mounts above need root.
    let identity = security::setpriv_args(id);
    let setpriv: Vec<String> = identity.iter().map(|a| quote(a)).collect();
    script.push_str(&format!("exec setpriv {} -- \"$@\"\n", setpriv.join(" ")));
    let logs = ctx.dir.join("logs").join(name);
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let log_path = logs.join(format!("{restart}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    // Every container of a Pod joins the Pod's network namespace.
    let mut cmd = match &ctx.netns {
        Some(ns) => {
            let mut c = tokio::process::Command::new("nsenter");
            c.arg(format!("--net={}", ns.display()))
                .args(["--", "setpriv"]);
            c
        }
        None => tokio::process::Command::new("setpriv"),
    };
    cmd.args([
        "--pdeathsig",
        "KILL",
        "unshare",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
    ])
    .args(["--mount-proc", "--propagation", "private", "sh", "-c"])
    .arg(&script)
    .arg("sh")
    .args(&argv)
    .env_clear()
    .envs(&env)
    .current_dir(&cdir)
    .stdin(Stdio::null())
    .stdout(log)
    .stderr(log2)
    .process_group(0)
    .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| format!("start {name}: {e}"))?;
    let outer = child.id().unwrap_or(0);
    let inner = inner_pid(outer).await.unwrap_or(outer);
    Ok(Running {
        child,
        outer,
        inner,
        env,
        identity,
    })
}

/// The container's PID 1: the child of unshare (the child of setpriv's
/// exec, the same process). Waits up to 20 s: on a starved machine (a JVM
/// logged a 12 s pause here) unshare forks late. `None`: not yet; see
/// [`container_init`].
pub(super) async fn inner_pid(outer: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
            && let Some(pid) = text.split_whitespace().next().and_then(|p| p.parse().ok())
        {
            return Some(pid);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// The container's PID 1 now: `inner` when it was found at start, else
/// the child unshare has by now. Signals go to it, not to unshare: a
/// container's processes run under another user (setpriv), which clears
/// the parent-death signal `unshare --kill-child` sets, so killing unshare
/// alone left the container running, ports and all, beside its restarted
/// self.
pub(super) fn container_init(outer: u32, inner: u32) -> u32 {
    if inner != outer {
        return inner;
    }
    std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(inner)
}
