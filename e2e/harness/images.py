"""Container images for real nodes, built locally: no registry is pulled from or pushed to.

Each image is an OCI image-layout archive that `ctr -n k8s.io images import` takes, named
`tfop.local/<name>:<key>`. The key hashes the image's inputs (a source file, a package list,
pinned requirements), so a second run builds nothing and an input that changes makes a new ref.

- pause: the Kubernetes sandbox image, pause.c from the pinned k8s.io/kubernetes module.
- base:  Debian bookworm minbase (debootstrap) with python3 and ca-certificates.
- tf:    base plus a layer with TensorFlow (CPU) and its dependencies, installed by the
         host's pip for bookworm's Python 3.11 (pip in a chroot lacks the host's CA bundle).
- python: base plus pip, as `python:3.11-slim` behaves (`python` and `pip` on PATH, pip installs
         system-wide), trusting what this machine trusts (its CA bundle: the package index is
         reached through a proxy whose CA only the host has). The operator's PYTHON_IMAGE.
- operator: the project's own Dockerfile built by buildah (Debian's package: no daemon, and no
         Docker engine runs here), with PYTHON_IMAGE the python image; its dependencies come
         from the package index in the Dockerfile's build stage, as in any build of it.

Archives go to ~/.cache/tfop-e2e/images (or $TFOP_E2E_IMAGE_CACHE), beside e2e.build's binaries.
Building needs root (debootstrap, chroot), gcc with a static libc (libc6-dev), GNU tar and
buildah.

    python -m e2e.harness.images [--images pause,base,tf,python,operator] [--force] [--check]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from e2e import build

# Part of every key: changing how archives or layers are made must not reuse old archives.
FORMAT_VERSION = "1"
REGISTRY = "tfop.local"
IMAGES = ("pause", "base", "tf", "python", "operator")  # dependency order
PARENT = {"tf": "base", "python": "base", "operator": "python"}

SUITE = "bookworm"
BASE_PACKAGES = ("python3", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# TensorFlow and every wheel pip resolves for it, pinned: the tf key then names all the layer's
# contents. To move TensorFlow, resolve the new tensorflow-cpu alone (pip download as _build_tf
# does) and copy the versions here, then hold back what it cannot run with (below).
# protobuf: TF 2.20's metadata asks only >=5.28.0, but its graph writer (tf.io.write_graph, and so
# MonitoredTrainingSession's graph.pbtxt) passes text_format's float_format, which protobuf 7
# removed (a TypeError); 6.33 is the newest line that keeps it.
TF_REQUIREMENTS = (
    "tensorflow-cpu==2.20.0",
    "absl-py==2.5.1", "astunparse==1.6.3", "certifi==2026.10.19.post1", "charset-normalizer==3.5.3",
    "flatbuffers==25.12.19", "gast==0.7.0", "google-pasta==0.2.0", "grpcio==1.85.3", "h5py==3.16.0",
    "idna==3.20", "keras==3.15.1", "libclang==18.1.1", "markdown==3.11.3", "markdown-it-py==4.3.0",
    "markupsafe==3.0.4", "mdurl==0.1.2", "ml-dtypes==0.6.0", "namex==0.1.0", "numpy==2.4.6",
    "opt-einsum==3.4.0", "optree==0.20.0", "packaging==26.4", "pillow==13.0.0", "protobuf==6.33.6",
    "pygments==2.21.0", "requests==2.34.2", "rich==15.0.0", "setuptools==84.2.1", "six==1.17.0",
    "tensorboard==2.20.0", "tensorboard-data-server==0.7.2", "termcolor==3.3.0",
    "typing-extensions==4.16.0", "urllib3==2.8.0", "werkzeug==3.1.9", "wheel==0.48.0", "wrapt==2.5.2",
)
# Bookworm's python3 (3.11.2) and glibc (2.36) decide which wheels run in the image.
TARGET_PYTHON = "3.11"
TARGET_GLIBC_MINOR = 36
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # on Debian python3's sys.path

ARCHITECTURE = "amd64"  # the wheels' platform tags below say x86_64 too
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_CONFIG = {"Env": [PATH_ENV, "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"], "Cmd": ["python3"]}
# What --check runs in each image's root file system.
CHECK_COMMANDS = {
    "pause": ["/pause", "-v"],
    "base": ["python3", "-c", "import ssl, sys; print(sys.version.split()[0], ssl.OPENSSL_VERSION)"],
    "tf": ["python3", "-c", "import tensorflow as tf; print('tensorflow', tf.__version__)"],
    "python": ["pip", "--version"],
    "operator": ["tfop", "--version"],
}
# pip for the python image: pinned, so its key names its contents.
PIP_REQUIREMENT = "pip==25.3"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_SCRIPT = """#!/usr/bin/python3
import sys
from pip._internal.cli.main import main
sys.exit(main())
"""
# What the Dockerfile's COPY lines read, besides the Dockerfile: the operator's key hashes them.
REPO = Path(__file__).resolve().parents[2]
OPERATOR_INPUTS = ("Dockerfile", "pyproject.toml", "setup.cfg", "constraints.txt", "README.md", "tfop", "templates",
                   "crds", "rbac")

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
# containerd's import names an image by this annotation; the OCI one carries the tag alone.
CONTAINERD_NAME_ANNOTATION = "io.containerd.image.name"
OCI_REF_ANNOTATION = "org.opencontainers.image.ref.name"

CHUNK = 1 << 20


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class Image:
    name: str
    ref: str
    archive: Path


@dataclass(frozen=True)
class LayerBlob:
    """A layer taken as it is from another image's archive."""
    archive: Path
    digest: str


def cache_dir() -> Path:
    env = os.environ.get("TFOP_E2E_IMAGE_CACHE")
    # Absolute: debootstrap wants its --cache-dir so, and mount points are compared with it.
    return Path(env).absolute() if env else build.cache_root().parent / "images"


def content_key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: ("ab", "c") != ("a", "bc")
    return h.hexdigest()[:16]


def image_key(name: str) -> str:
    """The key names the inputs, not what they fetch: base's key is its suite and package list, so
    a Debian point release or a new mirror reuses the cached image until --force."""
    if name == "pause":
        source = _pause_source()
        return content_key(FORMAT_VERSION, name, source.read_bytes(), " ".join(_pause_command(source)))
    if name == "base":
        return content_key(FORMAT_VERSION, name, SUITE, "minbase", *BASE_PACKAGES)
    if name == "tf":
        return content_key(FORMAT_VERSION, name, image_key("base"), TARGET_PYTHON, *_wheel_platforms(),
                           *TF_REQUIREMENTS)
    if name == "python":
        return content_key(FORMAT_VERSION, name, image_key("base"), PIP_REQUIREMENT, PIP_SCRIPT,
                           HOST_CA_BUNDLE.read_bytes())
    if name == "operator":
        return content_key(FORMAT_VERSION, name, image_key("python"), *_operator_inputs())
    raise ImageError(f"unknown image {name!r}; known: {', '.join(IMAGES)}")


def image(name: str) -> Image:
    """The image of the current inputs, whether built or not."""
    key = image_key(name)
    return Image(name=name, ref=f"{REGISTRY}/{name}:{key}", archive=cache_dir() / f"{name}-{key}.tar")


def ensure(names: list[str], force: bool = False) -> dict[str, Image]:
    """Build the images not cached yet (their parents first, one at a time: 2 cores)."""
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ImageError(f"unknown images {unknown}; known: {', '.join(IMAGES)}")
    wanted = set(names) | {PARENT[n] for n in names if n in PARENT}
    t0 = time.monotonic()
    result, timings = {}, {}
    for name in (n for n in IMAGES if n in wanted):
        result[name], timings[name] = _ensure_one(name, force=force and name in names)
    built = {n: t for n, t in timings.items() if t is not None}
    total = time.monotonic() - t0
    if built:
        print("[e2e.harness.images] timings: " + ", ".join(f"{n} {t:.0f}s" for n, t in built.items())
              + f"; total {total:.0f}s", flush=True)
    else:
        print(f"[e2e.harness.images] all cached ({total:.2f}s)", flush=True)
    return {n: result[n] for n in names}


def _ensure_one(name: str, force: bool) -> tuple[Image, float | None]:
    img = image(name)
    if img.archive.is_file() and not force:
        print(f"[e2e.harness.images] {name}: cached {img.ref}", flush=True)
        return img, None
    with build.one_builder(cache_dir() / f".{name}.lock", f"[e2e.harness.images] {name}"):
        if img.archive.is_file() and not force:
            print(f"[e2e.harness.images] {name}: cached {img.ref}", flush=True)
            return img, None
        return img, _build_locked(img)


def _build_locked(img: Image) -> float:
    print(f"[e2e.harness.images] building {img.ref}", flush=True)
    t0 = time.monotonic()
    # Left by a build that was killed; under this lock no other build of the image runs.
    for stale_dir in cache_dir().glob(f"work-{img.name}-*"):
        _remove_tree(stale_dir)
    for stale_archive in cache_dir().glob(f"{img.name}-*.tar.tmp*"):
        stale_archive.unlink()
    partial = img.archive.with_name(img.archive.name + f".tmp{os.getpid()}")
    with _work_dir(f"work-{img.name}") as work:
        config, layers = RECIPES[img.name](work)
        step = time.monotonic()
        try:
            write_oci_archive(partial, img.ref, config, layers)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        print(f"[e2e.harness.images] {img.name}: archive written in {time.monotonic() - step:.1f}s", flush=True)
    partial.rename(img.archive)
    dt = time.monotonic() - t0
    size = img.archive.stat().st_size / 1e6
    print(f"[e2e.harness.images] {img.name}: done in {dt:.0f}s, {size:.0f} MB -> {img.archive}", flush=True)
    return dt


# --- recipes: each fills a work dir and returns (image config, layers) ---------------------------

def _pause_source() -> Path:
    return build.module_dir("kubernetes", "k8s.io/kubernetes") / "build" / "pause" / "linux" / "pause.c"


def _pause_command(source: Path) -> list[str]:
    """Kubernetes' own flags (build/pause/Makefile), its VERSION stamped with the module's release."""
    makefile = (source.parent.parent / "Makefile").read_text()
    tag = next(line.split("=", 1)[1].strip() for line in makefile.splitlines() if line.startswith("TAG ?="))
    release = source.parents[3].name.partition("@")[2]
    return ["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-{release}", "-o", "pause",
            source.name]


def _build_pause(work: Path) -> tuple[dict, list]:
    source = _pause_source()
    shutil.copy(source, work / source.name)
    _run(_pause_command(source), "pause: gcc", cwd=work)
    layer = work / "layer"
    layer.mkdir()
    (work / "pause").rename(layer / "pause")
    # As Kubernetes' pause image: it runs as nobody unless the pod says otherwise.
    return {"Env": [PATH_ENV], "Entrypoint": ["/pause"], "User": "65535:65535"}, [layer]


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's first `deb` source for SUITE (its proxy or mirror works here), else Debian's."""
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        for line in path.read_text().splitlines() if path.is_file() else []:
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()  # without [options]
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                return words[1]
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith(("#", " ", "\t")))
            fields = {k.strip(): v.split() for k, v in fields.items()}
            if "deb" in fields.get("Types", []) and SUITE in fields.get("Suites", []) and fields.get("URIs"):
                return fields["URIs"][0]
    return DEFAULT_MIRROR


def _build_base(work: Path) -> tuple[dict, list]:
    rootfs = work / "rootfs"
    debs = cache_dir() / "debs"  # kept, so a forced rebuild downloads nothing again
    debs.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
          f"--cache-dir={debs}", SUITE, str(rootfs), mirror], f"base: debootstrap {SUITE} from {mirror}")
    for leftovers in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (rootfs / leftovers).glob("*"):
            if entry.is_file() or entry.is_symlink():
                entry.unlink()
    for host_file in ("etc/resolv.conf", "etc/hostname"):  # copied from the host; the runtime mounts its own
        (rootfs / host_file).write_text("")
    return PYTHON_CONFIG, [rootfs]


def _wheel_platforms() -> list[str]:
    # pip does not expand manylinux_2_X to older glibcs; manylinux2014 expands to 2010 and 1.
    newest_first = range(TARGET_GLIBC_MINOR, 16, -1)
    return [f"manylinux_2_{minor}_x86_64" for minor in newest_first] + ["manylinux2014_x86_64"]


def _build_tf(work: Path) -> tuple[dict, list]:
    wheels = cache_dir() / "wheels"  # kept, so a forced rebuild downloads nothing again
    target_args = ["--only-binary=:all:", "--python-version", TARGET_PYTHON, "--implementation", "cp",
                   "--abi", "cp" + TARGET_PYTHON.replace(".", "")]
    for platform in _wheel_platforms():
        target_args += ["--platform", platform]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "download", "--no-cache-dir", "--dest", str(wheels), *target_args, *TF_REQUIREMENTS],
         "tf: pip download")
    layer = work / "layer"
    site_packages = _layer_dirs(layer, SITE_PACKAGES)
    _run([*pip, "install", "--no-index", "--find-links", str(wheels), "--target", str(site_packages),
          *target_args, *TF_REQUIREMENTS], "tf: pip install")
    # Console scripts start with the host interpreter's path, which the image does not have;
    # TensorFlow's C++ headers (218 MB) serve only to compile custom ops.
    shutil.rmtree(site_packages / "bin", ignore_errors=True)
    shutil.rmtree(site_packages / "tensorflow" / "include", ignore_errors=True)
    base = image("base")
    return PYTHON_CONFIG, [LayerBlob(base.archive, d) for d in read_manifest(base.archive)[1]] + [layer]


def _build_python(work: Path) -> tuple[dict, list]:
    wheels = cache_dir() / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "download", "--no-cache-dir", "--no-deps", "--only-binary=:all:", "--dest", str(wheels),
          PIP_REQUIREMENT], "python: pip download")
    layer = work / "layer"
    site_packages = _layer_dirs(layer, SITE_PACKAGES)
    _run([*pip, "install", "--no-index", "--no-deps", "--find-links", str(wheels), "--target", str(site_packages),
          PIP_REQUIREMENT], "python: pip install")
    shutil.rmtree(site_packages / "bin", ignore_errors=True)  # scripts naming the host's interpreter
    bin_dir = _layer_dirs(layer, "usr/local/bin")
    for name in ("pip", "pip3"):
        (bin_dir / name).write_text(PIP_SCRIPT)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to("/usr/bin/python3")
    shutil.copy(HOST_CA_BUNDLE, _layer_dirs(layer, "etc/ssl/certs") / "ca-certificates.crt")
    (layer / "etc" / "pip.conf").write_text(f"[global]\ncert = /{HOST_CA_BUNDLE.relative_to('/')}\n")
    # Debian marks its Python as managed by apt; an image's own Python is the image's to install into.
    config = {"Env": [PATH_ENV, "LANG=C.UTF-8", "PIP_BREAK_SYSTEM_PACKAGES=1"], "Cmd": ["python3"]}
    base = image("base")
    return config, [LayerBlob(base.archive, d) for d in read_manifest(base.archive)[1]] + [layer]


def _operator_inputs() -> list[str]:
    """Each file the build reads, as `path sha256`, in order (no bytecode caches: the build context's
    own, which the wheel leaves out)."""
    entries = []
    for top in OPERATOR_INPUTS:
        root = REPO / top
        files = [root] if root.is_file() else sorted(f for f in root.rglob("*") if f.is_file()
                                                    and "__pycache__" not in f.parts and f.suffix != ".pyc")
        entries += [f"{f.relative_to(REPO)} {hashlib.sha256(f.read_bytes()).hexdigest()}" for f in files]
    return entries


def _build_operator(work: Path) -> tuple[dict, list]:
    """buildah builds the Dockerfile as docker would (two stages, a bind mount from the first), its
    storage in the work dir; its layers are written as ours, uncompressed (buildah keeps the base's
    layers as it pulled them, compressed or not)."""
    python = image("python")
    tag = f"{REGISTRY}/operator:build"
    buildah = ["buildah", "--root", str(work / "storage"), "--runroot", str(work / "run"),
               "--storage-driver", "overlay"]
    _run([*buildah, "pull", "--quiet", f"oci-archive:{python.archive}"], "operator: python image into buildah")
    # chroot isolation: each RUN in a chroot of the build's root file system, on the host's network
    # (the package index), without a runtime's namespaces; the Dockerfile is not changed for it.
    _run([*buildah, "build", "--isolation", "chroot", "--network", "host", "--pull-never",
          "--build-arg", f"PYTHON_IMAGE={python.ref}", "--file", str(REPO / "Dockerfile"), "--tag", tag, str(REPO)],
         "operator: buildah build (Dockerfile)")
    layout = work / "layout"
    _run([*buildah, "push", "--disable-compression", tag, f"oci:{layout}"], "operator: buildah push")
    index = json.loads((layout / "index.json").read_text())
    blob = lambda digest: layout / "blobs" / "sha256" / digest.removeprefix("sha256:")  # noqa: E731
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    config = json.loads(blob(manifest["config"]["digest"]).read_text())["config"]
    _run([*buildah, "rmi", "--all", "--force"], "operator: buildah storage emptied")
    return config, [blob(layer["digest"]) for layer in manifest["layers"]]


RECIPES = {"pause": _build_pause, "base": _build_base, "tf": _build_tf, "python": _build_python,
           "operator": _build_operator}


def _layer_dirs(root: Path, inside: str) -> Path:
    """root/inside with each level below root 0755, whatever the umask: a layer's directories
    replace the image's."""
    path = root
    for part in Path(inside).parts:
        path = path / part
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    return path


# --- the OCI archive ------------------------------------------------------------------------------

def write_oci_archive(dest: Path, ref: str, config: dict, layers: list[Path | LayerBlob]) -> str:
    """Write an OCI image layout as one tar: blobs streamed in and hashed on the way (layers are
    uncompressed, so a layer's digest is its diff_id). Returns the manifest's digest."""
    with open(dest, "wb") as out:
        writer = _TarWriter(out)
        writer.add_bytes("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        layer_descriptors = []
        for layer in layers:
            with _layer_stream(layer) as stream:
                layer_descriptors.append(writer.add_blob_stream(stream, LAYER_MEDIA_TYPE))
        image_config = {"architecture": ARCHITECTURE, "os": "linux", "config": config,
                        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descriptors]}}
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                    "config": writer.add_blob(_json(image_config), CONFIG_MEDIA_TYPE),
                    "layers": layer_descriptors}
        manifest_descriptor = writer.add_blob(_json(manifest), MANIFEST_MEDIA_TYPE)
        manifest_descriptor["platform"] = {"architecture": ARCHITECTURE, "os": "linux"}
        manifest_descriptor["annotations"] = {CONTAINERD_NAME_ANNOTATION: ref,
                                              OCI_REF_ANNOTATION: ref.rpartition(":")[2]}
        index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [manifest_descriptor]}
        writer.add_bytes("index.json", _json(index))
        writer.close()
    return manifest_descriptor["digest"]


def read_manifest(archive: Path) -> tuple[dict, list[str]]:
    """(image config, layer digests) of an archive's one image."""
    with tarfile.open(archive, "r:") as tar:
        def blob(digest: str) -> dict:
            return json.load(tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:")))
        index = json.load(tar.extractfile("index.json"))
        manifest = blob(index["manifests"][0]["digest"])
        return blob(manifest["config"]["digest"]), [layer["digest"] for layer in manifest["layers"]]


class _TarWriter:
    """Appends regular files to a tar. A blob's name is its digest, known only once it is read,
    so its header is written after its content, in the 512 bytes kept for it."""

    def __init__(self, out: BinaryIO):
        self._out = out

    def add_bytes(self, name: str, data: bytes) -> None:
        self._out.write(_tar_header(name, len(data)))
        self._out.write(data + _padding(len(data)))

    def add_blob(self, data: bytes, media_type: str) -> dict:
        return self.add_blob_stream(io.BytesIO(data), media_type)

    def add_blob_stream(self, stream: BinaryIO, media_type: str) -> dict:
        header_at = self._out.tell()
        self._out.write(bytes(tarfile.BLOCKSIZE))
        h, size = hashlib.sha256(), 0
        while chunk := stream.read(CHUNK):
            h.update(chunk)
            self._out.write(chunk)
            size += len(chunk)
        self._out.write(_padding(size))
        end = self._out.tell()
        self._out.seek(header_at)
        self._out.write(_tar_header("blobs/sha256/" + h.hexdigest(), size))
        self._out.seek(end)
        return {"mediaType": media_type, "digest": "sha256:" + h.hexdigest(), "size": size}

    def close(self) -> None:
        self._out.write(bytes(2 * tarfile.BLOCKSIZE))


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    header = info.tobuf(format=tarfile.GNU_FORMAT)
    assert len(header) == tarfile.BLOCKSIZE, name  # short names only: the header size is fixed
    return header


def _padding(size: int) -> bytes:
    return bytes(-size % tarfile.BLOCKSIZE)


def _json(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@contextlib.contextmanager
def _layer_stream(layer: Path | LayerBlob) -> Iterator[BinaryIO]:
    """A layer as a tar stream: a blob of another archive, a tar file as it is, or a directory."""
    if isinstance(layer, LayerBlob):
        with tarfile.open(layer.archive, "r:") as tar:
            yield tar.extractfile("blobs/sha256/" + layer.digest.removeprefix("sha256:"))
        return
    if layer.is_file():  # a builder's blob: uncompressed here, whatever it was stored as
        with open(layer, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with (gzip.open if gzipped else open)(layer, "rb") as stream:
            yield stream
        return
    # The top-level entries are named, not ".", so the layer sets no mode on the image's root.
    entries = sorted(os.listdir(layer))
    if not entries:
        raise ImageError(f"empty layer directory {layer}")
    # The runtime mounts /proc, /sys and /dev; debootstrap's device nodes and mounts stay out.
    cmd = ["tar", "--create", "--file=-", f"--directory={layer}", "--sort=name", "--numeric-owner",
           "--format=gnu", "--anchored", "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./dev/*",
           "--", *(f"./{e}" for e in entries)]
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors)
        try:
            yield proc.stdout
        finally:
            proc.stdout.close()
            code = proc.wait()
        if code != 0:
            errors.seek(0)
            message = errors.read()[-2000:].decode(errors="replace")
            raise ImageError(f"tar of {layer} failed ({code}): {message}")


# --- checking an image: its layers unpacked into a scratch root, a command run there by chroot -----

def check(img: Image) -> str:
    """Run the image's CHECK_COMMANDS entry in its unpacked layers; returns what it printed."""
    config, layer_digests = read_manifest(img.archive)
    env = dict(item.split("=", 1) for item in config["config"].get("Env", []))
    with _work_dir(f"check-{img.name}") as work:
        rootfs = work / "rootfs"
        rootfs.mkdir()
        t0 = time.monotonic()
        for digest in layer_digests:
            untar = subprocess.Popen(["tar", "--extract", "--file=-", f"--directory={rootfs}",
                                      "--numeric-owner"], stdin=subprocess.PIPE)
            with _layer_stream(LayerBlob(img.archive, digest)) as stream, untar.stdin:
                shutil.copyfileobj(stream, untar.stdin, CHUNK)
            if untar.wait() != 0:
                raise ImageError(f"unpacking layer {digest} of {img.archive} failed")
        unpacked = time.monotonic() - t0
        chroot = shutil.which("chroot") or "chroot"
        proc = subprocess.run([chroot, str(rootfs), *CHECK_COMMANDS[img.name]], env=env,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"{img.name} check failed ({proc.returncode}): {proc.stderr[-3000:]}")
    output = proc.stdout.strip()
    print(f"[e2e.harness.images] {img.name}: check ok ({unpacked:.0f}s to unpack): {output}", flush=True)
    return output


# --- processes and scratch directories ------------------------------------------------------------

def _run(cmd: list[str], label: str, cwd: Path | None = None) -> None:
    print(f"[e2e.harness.images] {label}", flush=True)
    t0 = time.monotonic()
    stop = threading.Event()
    threading.Thread(target=_report_progress, args=(label, t0, stop), daemon=True).start()
    try:
        # umask 022: files made for the image must be readable by a container's non-root users.
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, umask=0o022)
    finally:
        stop.set()
    if proc.returncode != 0:
        raise ImageError(f"{label} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    print(f"[e2e.harness.images] {label}: {time.monotonic() - t0:.1f}s", flush=True)


def _report_progress(label: str, start: float, stop: threading.Event) -> None:
    while not stop.wait(30):
        print(f"  ... {label} ({time.monotonic() - start:.0f}s)", flush=True)


@contextlib.contextmanager
def _work_dir(label: str) -> Iterator[Path]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=cache_dir()))
    try:
        yield path
    finally:
        t0 = time.monotonic()
        _remove_tree(path)
        # Deleting tf's 1.3 GB layer can take half a minute on a busy disk: shown, not hidden.
        print(f"[e2e.harness.images] removed {path.name} in {time.monotonic() - t0:.1f}s", flush=True)


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below path, deepest first (from /proc/self/mountinfo)."""
    path, found = path.resolve(), []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, with spaces and the like escaped as octal.
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]))
        if point == path or path in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _remove_tree(path: Path) -> None:
    """rmtree, after unmounting what a killed debootstrap may have left mounted (/proc, /sys, /dev/pts):
    deleting through a mount would delete the host's files."""
    for point in mounts_under(path):
        subprocess.run(["umount", "--lazy", str(point)], check=False)
    left = mounts_under(path)
    if left:
        raise ImageError(f"still mounted, not deleting {path}: {left}")
    shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.harness.images", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default=",".join(IMAGES), help="comma-separated, from: " + ",".join(IMAGES))
    ap.add_argument("--force", action="store_true", help="rebuild the named images even if cached")
    ap.add_argument("--check", action="store_true",
                    help="then unpack each image and run a command in it by chroot (tf: import tensorflow)")
    args = ap.parse_args(argv)
    try:
        ready = ensure([n for n in args.images.split(",") if n], force=args.force)
        for img in ready.values():
            print(f"{img.ref} {img.archive}", flush=True)
            if args.check:
                check(img)
    except (ImageError, build.BuildError) as e:
        print(f"[e2e.harness.images] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
