#!/usr/bin/env python3
"""The operator image of init/Dockerfile, assembled without a Docker engine.

scripts/build-image runs this (read it first): `plan` reads the Dockerfile
and prints what the host must provide (the toolchain, the rustup target and
apt packages of the build stage, its cargo command); `assemble` writes the
image from the Dockerfile's final stage into an OCI image layout, a
`docker load`-able tarball of it, and the unpacked layer.

Only the standard library: tarfile, gzip, hashlib and json are all an OCI
image needs (image-spec v1.1: a layout of content-addressed blobs, a
manifest, a config). A Dockerfile instruction this does not model is an
error, never skipped: the image must be what the Dockerfile says or not be.
"""

import datetime
import gzip
import hashlib
import io
import json
import os
import shlex
import shutil
import stat
import sys
import tarfile
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# BuildKit's config for a `FROM scratch` final stage starts with this PATH
# (its system.DefaultPathEnv); a distroless base brings the same one.
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def die(message):
    sys.stderr.write(f"scripts/assemble-image.py: {message}\n")
    sys.exit(2)


class Instruction:
    def __init__(self, line):
        self.line = line
        keyword, _, rest = line.partition(" ")
        self.keyword = keyword.upper()
        self.rest = rest.strip()
        self.flags = {}
        words = self.rest.split()
        # Flags (--name=value) come first; RUN has none that matter here.
        while words and words[0].startswith("--") and self.keyword != "RUN":
            name, _, value = words.pop(0)[2:].partition("=")
            self.flags[name] = value
        self.args = words

    def json_form(self):
        text = " ".join(self.args)
        if not text.startswith("["):
            die(
                f"{self.keyword} in shell form runs /bin/sh -c, which this image has not: {self.line}"
            )
        value = json.loads(text)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            die(f"{self.keyword} is not a JSON list of strings: {self.line}")
        return value

    def __repr__(self):
        return self.line


def instructions(text):
    """Logical instructions: comment lines (and parser directives) dropped,
    continuation lines joined, as the Dockerfile frontend reads them."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not current and not line):
            continue
        if "<<" in line:
            die(f"heredocs are not modelled: {line}")
        if line.endswith("\\"):
            current += line[:-1] + " "
        else:
            current += line
            if current.strip():
                out.append(Instruction(current.strip()))
            current = ""
    if current.strip():
        die("a continuation at the end of the Dockerfile")
    return out


def stages(dockerfile):
    """[(from instruction, name or None, [instructions])]."""
    with open(dockerfile) as f:
        parsed = instructions(f.read())
    result = []
    for i in parsed:
        if i.keyword == "FROM":
            name = i.args[2] if len(i.args) == 3 and i.args[1].upper() == "AS" else None
            if len(i.args) not in (1, 3) or i.flags:
                die(f"a FROM this does not model: {i}")
            result.append((i, name, []))
        elif i.keyword == "ARG" and not result:
            die(f"global ARGs are not modelled: {i}")
        else:
            if not result:
                die(f"an instruction before the first FROM: {i}")
            result[-1][2].append(i)
    if not result:
        die("no FROM")
    return result


def run_commands(i):
    """The commands of a RUN in shell form, split at `&&`."""
    if i.rest.startswith("["):
        die(f"RUN in exec form is not modelled: {i}")
    commands, current = [], []
    for word in shlex.split(i.rest):
        if word == "&&":
            commands.append(current)
            current = []
        elif word in (";", "||", "|") or word.startswith(("$(", "`")):
            die(f"only `&&` between commands is modelled: {i}")
        else:
            current.append(word)
    commands.append(current)
    return commands


class BuildStage:
    """The stage that builds the binary: toolchain, prerequisites, cargo, cp."""

    def __init__(self, frm, body):
        image = frm.args[0]
        repo, _, tag = image.partition(":")
        if repo not in ("rust", "docker.io/library/rust"):
            die(f"the build stage's base is not the rust image: {frm}")
        self.toolchain = tag.split("-")[0]
        self.plan = [("toolchain", self.toolchain)]
        self.files = {}  # path in the stage -> path on the host
        workdir = "/"
        for i in body:
            if i.keyword == "WORKDIR":
                workdir = i.args[0]
            elif i.keyword == "COPY":
                # The build context (the repository, less .dockerignore) is
                # the working copy itself here.
                if i.flags or i.args != [".", "."]:
                    die(f"a COPY this does not model in the build stage: {i}")
                self.src = workdir
            elif i.keyword == "RUN":
                for cmd in run_commands(i):
                    self.command(cmd, workdir, i)
            else:
                die(f"an instruction this does not model in the build stage: {i}")

    def command(self, cmd, workdir, i):
        if cmd[:3] == ["rustup", "target", "add"]:
            self.plan += [("rustup-target", t) for t in cmd[3:]]
        elif cmd[:2] == ["apt-get", "update"]:
            pass
        elif cmd[:2] == ["apt-get", "install"]:
            self.plan += [("apt", p) for p in cmd[2:] if not p.startswith("-")]
        elif cmd[:2] == ["rm", "-rf"] and all(p.startswith("/var/lib/apt/lists") for p in cmd[2:]):
            pass
        elif cmd[:2] == ["cargo", "build"]:
            if workdir != getattr(self, "src", None):
                die(f"cargo runs outside the copied context: {i}")
            self.plan.append(("cargo", " ".join(cmd)))
        elif cmd[0] == "cp" and len(cmd) == 3:
            if os.path.isabs(cmd[1]):
                die(f"a cp from outside the context: {i}")
            self.files[cmd[2]] = os.path.join(REPO, cmd[1])
        else:
            die(f"a command this does not model in the build stage: {cmd} in {i}")

    def lookup(self, path):
        if path not in self.files:
            die(f"the build stage has no {path}")
        host = self.files[path]
        if not os.path.isfile(host):
            die(f"{host} is missing: the build stage's cargo command did not produce it")
        # `cp` writes a new file with the source's mode less the umask (022).
        mode = stat.S_IMODE(os.stat(host).st_mode) & ~0o022
        return [("", "file", host, mode)]


class FilesStage:
    """A stage that fetches pinned downloads and sets their modes."""

    def __init__(self, frm, body, fetch):
        self.entries = {}  # path -> [kind, host path or None, mode]
        for i in body:
            if i.keyword == "ADD":
                if len(i.args) != 2 or "://" not in i.args[0] or set(i.flags) != {"checksum"}:
                    die(f"only `ADD --checksum=sha256:… URL DEST` is modelled: {i}")
                checksum = i.flags["checksum"]
                if not checksum.startswith("sha256:"):
                    die(f"not a sha256 checksum: {i}")
                url, dest = i.args
                if dest.endswith("/"):
                    dest += url.rsplit("/", 1)[1]
                host = fetch(url, checksum[len("sha256:"):])
                # Parents an ADD creates are 0755; an ADD of a URL leaves 0600.
                parent = os.path.dirname(dest)
                while parent != "/":
                    self.entries.setdefault(parent, ["dir", None, 0o755])
                    parent = os.path.dirname(parent)
                self.entries[dest] = ["file", host, 0o600]
            elif i.keyword == "RUN":
                for cmd in run_commands(i):
                    if cmd[0] != "chmod" or len(cmd) != 3:
                        die(f"only `chmod MODE PATH` is modelled in {frm}: {cmd}")
                    if cmd[2] not in self.entries:
                        die(f"chmod of {cmd[2]}, which the stage has not: {i}")
                    self.entries[cmd[2]][2] = int(cmd[1], 8)
            else:
                die(f"an instruction this does not model in {frm}: {i}")

    def lookup(self, path):
        """(relative path, kind, host path, mode) of path and what is under it."""
        if path not in self.entries:
            die(f"{path} is not in the stage")
        out = []
        for p, (kind, host, mode) in sorted(self.entries.items()):
            if p == path or p.startswith(path.rstrip("/") + "/"):
                out.append((os.path.relpath(p, path) if p != path else "", kind, host, mode))
        return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetcher(cache_dirs, download_dir):
    """A download pinned by its SHA-256: a cached copy with that sum (what
    scripts/fetch-cassandra fetched for the tests), else downloaded here;
    a mismatch is an error either way."""

    def fetch(url, sha256):
        name = url.rsplit("/", 1)[1]
        for d in cache_dirs:
            for root, _, files in os.walk(d):
                if name in files and sha256_file(os.path.join(root, name)) == sha256:
                    return os.path.join(root, name)
        os.makedirs(download_dir, exist_ok=True)
        path = os.path.join(download_dir, name)
        if not (os.path.isfile(path) and sha256_file(path) == sha256):
            with urllib.request.urlopen(url, timeout=120) as r, open(path + ".part", "wb") as f:
                shutil.copyfileobj(r, f)
            got = sha256_file(path + ".part")
            if got != sha256:
                die(f"{url} has SHA-256 {got}, the Dockerfile pins {sha256}")
            os.replace(path + ".part", path)
        return path

    return fetch


def plan(dockerfile):
    parsed = stages(dockerfile)
    used = {i.flags.get("from") for i in parsed[-1][2] if i.keyword == "COPY"}
    for frm, name, body in parsed[:-1]:
        if name in used and frm.args[0].split(":")[0] in ("rust", "docker.io/library/rust"):
            for kind, value in BuildStage(frm, body).plan:
                print(f"{kind}\t{value}")


def layer_and_config(dockerfile, fetch, epoch):
    parsed = stages(dockerfile)
    named = {}
    for frm, name, body in parsed[:-1]:
        if frm.args[0].split(":")[0] in ("rust", "docker.io/library/rust"):
            named[name] = BuildStage(frm, body)
        else:
            named[name] = FilesStage(frm, body, fetch)
    frm, _, body = parsed[-1]
    entries = {}  # path in the image -> (kind, host, mode)
    env = [DEFAULT_PATH]
    config = {}
    history = [{"created": epoch, "created_by": f"FROM {frm.args[0]} (not pulled: this layer only)", "empty_layer": True}]
    for i in body:
        if i.keyword == "COPY":
            if set(i.flags) != {"from"} or len(i.args) != 2:
                die(f"only `COPY --from=STAGE SRC DEST` is modelled in the final stage: {i}")
            stage = named.get(i.flags["from"]) or die(f"no stage {i.flags['from']}: {i}")
            src, dest = i.args
            for rel, kind, host, mode in stage.lookup(src):
                path = os.path.normpath(os.path.join(dest, rel)) if rel else dest
                parent = os.path.dirname(path)
                while parent != "/":
                    entries.setdefault(parent, ("dir", None, 0o755))
                    parent = os.path.dirname(parent)
                entries[path] = (kind, host, mode)
            history.append({"created": epoch, "created_by": i.line})
            continue
        if i.keyword == "ENV":
            words = shlex.split(i.rest)
            if words and "=" not in words[0]:
                pairs = [(words[0], " ".join(words[1:]))]
            else:
                pairs = [w.split("=", 1) for w in words]
            for k, v in pairs:
                env = [e for e in env if e.split("=", 1)[0] != k] + [f"{k}={v}"]
        elif i.keyword == "USER":
            config["User"] = i.rest
        elif i.keyword == "ENTRYPOINT":
            config["Entrypoint"] = i.json_form()
            config.pop("Cmd", None)  # an ENTRYPOINT resets the CMD before it
        elif i.keyword == "CMD":
            config["Cmd"] = i.json_form()
        else:
            die(f"an instruction this does not model in the final stage: {i}")
        history.append({"created": epoch, "created_by": i.line, "empty_layer": True})
    config["Env"] = env
    return entries, config, history


def tar_layer(entries, mtime):
    """The layer: sorted, root-owned, fixed times, USTAR (what the image
    test reads)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(entries):
            kind, host, mode = entries[path]
            info = tarfile.TarInfo(path.lstrip("/") + ("/" if kind == "dir" else ""))
            info.mode, info.uid, info.gid, info.mtime = mode, 0, 0, mtime
            info.uname = info.gname = ""
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = os.path.getsize(host)
                with open(host, "rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def write_blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return f"sha256:{digest}", len(data)


def assemble(dockerfile, tag, out):
    epoch_seconds = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    epoch = datetime.datetime.fromtimestamp(epoch_seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    fetch = fetcher(
        [os.path.join(REPO, "target", "cassandra")], os.path.join(out, "downloads")
    )
    entries, config, history = layer_and_config(dockerfile, fetch, epoch)
    layer = tar_layer(entries, epoch_seconds)
    gz = gzip.compress(layer, compresslevel=6, mtime=0)

    layout = os.path.join(out, "oci")
    shutil.rmtree(layout, ignore_errors=True)
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)
    layer_digest, layer_size = write_blob(blobs, gz)
    image_config = {
        "created": epoch,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": history,
    }
    config_digest, config_size = write_blob(
        blobs, json.dumps(image_config, indent=2, sort_keys=True).encode()
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": layer_size,
            }
        ],
    }
    manifest_digest, manifest_size = write_blob(
        blobs, json.dumps(manifest, indent=2, sort_keys=True).encode()
    )
    repository, _, version = tag.rpartition(":")
    if not repository or "/" in version:
        die(f"not REPOSITORY:TAG: {tag}")
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "platform": {"architecture": "amd64", "os": "linux"},
                # containerd and Docker 25+ name the image from the first,
                # OCI tools (skopeo's oci:DIR:TAG) from the second.
                "annotations": {
                    "io.containerd.image.name": tag,
                    "org.opencontainers.image.ref.name": version,
                },
            }
        ],
    }
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    # docker load before Docker 25 reads manifest.json (docker save's
    # format) beside the layout; both read the same blobs.
    with open(os.path.join(layout, "manifest.json"), "w") as f:
        json.dump(
            [
                {
                    "Config": f"blobs/sha256/{config_digest[7:]}",
                    "RepoTags": [tag],
                    "Layers": [f"blobs/sha256/{layer_digest[7:]}"],
                }
            ],
            f,
            indent=2,
        )

    archive = os.path.join(out, "cassandra-operator.tar")
    with tarfile.open(archive + ".part", "w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(layout):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                info = tar.gettarinfo(path, os.path.relpath(path, layout))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = epoch_seconds
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    os.replace(archive + ".part", archive)

    # The layer unpacked, as a runtime lays it out (owners and modes as in
    # the layer): the file the test world runs.
    rootfs = os.path.join(out, "rootfs")
    if os.path.isdir(rootfs):
        for root, dirs, _ in os.walk(rootfs):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(rootfs)
    os.makedirs(rootfs)
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        try:
            tar.extractall(rootfs, numeric_owner=True, filter="fully_trusted")
        except TypeError:  # Python before 3.11.4 has no filters (and trusts)
            tar.extractall(rootfs, numeric_owner=True)
    os.chmod(rootfs, 0o755)

    print(f"layer {layer_digest} ({layer_size} bytes), config {config_digest}, manifest {manifest_digest}")
    for path in sorted(entries):
        kind, host, mode = entries[path]
        print(f"  {mode:04o} {path}" + (f"  <- {os.path.relpath(host, REPO)}" if host else ""))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "plan":
        plan(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "assemble":
        assemble(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        die("usage: assemble-image.py plan DOCKERFILE | assemble DOCKERFILE REPOSITORY:TAG OUT_DIR")


if __name__ == "__main__":
    main()
