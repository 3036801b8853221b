"""e2e.harness.images without building a real image: keys, the OCI archive it writes, the build order and cache."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from e2e.harness import images


@pytest.fixture(autouse=True)
def image_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TFOP_E2E_IMAGE_CACHE", str(cache))
    return cache


@pytest.fixture
def fake_pause_source(tmp_path, monkeypatch):
    pause_dir = tmp_path / "kubernetes@v1.2.3" / "build" / "pause"
    (pause_dir / "linux").mkdir(parents=True)
    (pause_dir / "Makefile").write_text("IMAGE = $(REGISTRY)/pause\nTAG ?= 3.10.1\n")
    source = pause_dir / "linux" / "pause.c"
    source.write_text("int main(void) { return 0; }\n")
    monkeypatch.setattr(images, "_pause_source", lambda: source)
    return source


def small_layer(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def archive_files(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def layer_names(layer: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return tar.getnames()


def test_content_key_keeps_parts_apart():
    assert images.content_key("ab", "c") != images.content_key("a", "bc")
    assert images.content_key("a", b"b") == images.content_key(b"a", "b")
    assert len(images.content_key("x")) == 16


def test_base_key_names_suite_and_packages_and_tf_follows_it(monkeypatch):
    base, tf = images.image_key("base"), images.image_key("tf")
    monkeypatch.setattr(images, "DEFAULT_MIRROR", "http://elsewhere.example/debian")
    assert images.image_key("base") == base
    monkeypatch.setattr(images, "BASE_PACKAGES", (*images.BASE_PACKAGES, "procps"))
    assert images.image_key("base") != base
    assert images.image_key("tf") != tf


def test_tf_key_follows_its_requirements(monkeypatch):
    tf = images.image_key("tf")
    monkeypatch.setattr(images, "TF_REQUIREMENTS", ("tensorflow-cpu==2.19.0",))
    assert images.image_key("tf") != tf


def test_the_operator_key_reads_what_the_dockerfile_copies():
    """Every path a COPY line names is an input of the operator's key, and nothing else but the Dockerfile."""
    copied = set()
    for line in (images.REPO / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            copied |= {w.rstrip("*") for w in words[1:-1]}
    assert copied | {"Dockerfile"} == set(images.OPERATOR_INPUTS)


def test_the_operator_key_follows_its_sources_and_the_python_image_not_bytecode(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    small_layer(repo, {name: name for name in images.OPERATOR_INPUTS if "." in name or name == "Dockerfile"})
    small_layer(repo, {"tfop/__init__.py": "", "templates/pod.j2": "", "crds/c.yaml": "", "rbac/r.yaml": ""})
    monkeypatch.setattr(images, "REPO", repo)
    key, python = images.image_key("operator"), images.image_key("python")
    small_layer(repo, {"tfop/__pycache__/__init__.cpython-311.pyc": "bytecode", "e2e/x.py": "not copied"})
    assert images.image_key("operator") == key
    small_layer(repo, {"tfop/__init__.py": "__version__ = '1'"})
    assert images.image_key("operator") != key
    key = images.image_key("operator")
    monkeypatch.setattr(images, "PIP_REQUIREMENT", "pip==1.0")
    assert images.image_key("python") != python and images.image_key("operator") != key


def test_pause_key_follows_the_source_and_the_command_stamps_the_release(fake_pause_source):
    key = images.image_key("pause")
    assert "-DVERSION=v3.10.1-v1.2.3" in images._pause_command(fake_pause_source)
    fake_pause_source.write_text("int main(void) { return 1; }\n")
    assert images.image_key("pause") != key


def test_image_ref_and_archive_carry_the_key(image_cache):
    img = images.image("base")
    key = images.image_key("base")
    assert img == images.Image("base", f"tfop.local/base:{key}", image_cache / f"base-{key}.tar")


def test_oci_archive_blobs_are_named_by_their_digest_and_linked(tmp_path):
    layer = small_layer(tmp_path / "layer", {"hello": "hi\n", "sub/file": "x"})
    archive = tmp_path / "img.tar"
    config = {"Env": ["PATH=/bin"], "Entrypoint": ["/hello"]}

    manifest_digest = images.write_oci_archive(archive, "tfop.local/demo:k1", config, [layer])

    files = archive_files(archive)
    names = list(files)
    assert names[0] == "oci-layout" and names[-1] == "index.json"
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.rpartition("/")[2] == hashlib.sha256(data).hexdigest()

    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["digest"] == manifest_digest
    assert entry["annotations"] == {"io.containerd.image.name": "tfop.local/demo:k1",
                                    "org.opencontainers.image.ref.name": "k1"}
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}

    def blob(descriptor):
        data = files["blobs/sha256/" + descriptor["digest"].removeprefix("sha256:")]
        assert len(data) == descriptor["size"]
        return data

    manifest = json.loads(blob(entry))
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    image_config = json.loads(blob(manifest["config"]))
    assert image_config["config"] == config
    assert (image_config["architecture"], image_config["os"]) == ("amd64", "linux")
    (layer_descriptor,) = manifest["layers"]
    assert layer_descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    assert image_config["rootfs"] == {"type": "layers", "diff_ids": [layer_descriptor["digest"]]}
    assert layer_names(blob(layer_descriptor)) == ["./hello", "./sub", "./sub/file"]
    assert images.read_manifest(archive) == (image_config, [layer_descriptor["digest"]])


def test_a_layer_from_another_archive_is_copied_as_it_is(tmp_path):
    parent = tmp_path / "parent.tar"
    images.write_oci_archive(parent, "tfop.local/p:1", {}, [small_layer(tmp_path / "a", {"a": "1"})])
    (parent_layer,) = images.read_manifest(parent)[1]
    child = tmp_path / "child.tar"
    own_layer = small_layer(tmp_path / "b", {"b": "2"})
    images.write_oci_archive(child, "tfop.local/c:1", {}, [images.LayerBlob(parent, parent_layer), own_layer])
    config, layers = images.read_manifest(child)
    assert layers[0] == parent_layer and len(layers) == 2
    assert config["rootfs"]["diff_ids"] == layers


def test_layer_leaves_out_what_the_runtime_mounts(tmp_path):
    root = small_layer(tmp_path / "rootfs", {"proc/1/status": "", "sys/x": "", "dev/null": "", "etc/os": "",
                                             "usr/proc/kept": ""})
    archive = tmp_path / "img.tar"
    images.write_oci_archive(archive, "tfop.local/r:1", {}, [root])
    (digest,) = images.read_manifest(archive)[1]
    names = layer_names(archive_files(archive)["blobs/sha256/" + digest.removeprefix("sha256:")])
    assert names == ["./dev", "./etc", "./etc/os", "./proc", "./sys",
                     "./usr", "./usr/proc", "./usr/proc/kept"]


def test_debian_mirror_is_the_hosts_source_for_the_suite(tmp_path):
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    assert images.debian_mirror(apt) == images.DEFAULT_MIRROR
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment: with a colon\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian http://other.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert images.debian_mirror(apt) == "http://mirror.example/debian"
    (apt / "sources.list").write_text(
        "deb-src http://src.example/debian bookworm main\n"
        "deb [ arch=amd64 signed-by=/k.gpg ] http://list.example/debian bookworm main\n")
    assert images.debian_mirror(apt) == "http://list.example/debian"


def test_ensure_builds_the_parent_first_then_finds_both_cached(tmp_path, monkeypatch, capsys):
    built = []

    def recipe(name):
        def build(work):
            built.append(name)
            return {"Env": []}, [small_layer(work / "layer", {name: name})]
        return build

    monkeypatch.setattr(images, "RECIPES", {"base": recipe("base"), "tf": recipe("tf")})
    first = images.ensure(["tf"])
    assert built == ["base", "tf"]
    assert list(first) == ["tf"] and first["tf"].archive.is_file()

    capsys.readouterr()
    assert images.ensure(["tf"]) == first
    assert built == ["base", "tf"]
    assert "all cached" in capsys.readouterr().out

    images.ensure(["tf"], force=True)
    assert built == ["base", "tf", "tf"]  # force rebuilds the named image, not its parent


def test_a_build_removes_what_a_killed_build_of_the_same_image_left(image_cache, monkeypatch):
    stale_dir = image_cache / "work-base-k1ll3d"
    small_layer(stale_dir, {"rootfs/etc/os": ""})
    stale_archive = image_cache / "base-0123.tar.tmp999"
    stale_archive.write_bytes(b"partial")
    other_check = image_cache / "check-base-running"
    other_check.mkdir()
    monkeypatch.setattr(images, "RECIPES", {"base": lambda work: ({}, [small_layer(work / "l", {"a": ""})])})
    images.ensure(["base"])
    assert not stale_dir.exists() and not stale_archive.exists()
    assert other_check.exists()
    assert sorted(p.name for p in image_cache.iterdir()) == sorted(
        [".base.lock", images.image("base").archive.name, "check-base-running"])


def test_ensure_refuses_unknown_images():
    with pytest.raises(images.ImageError, match="unknown images"):
        images.ensure(["gpu"])


def test_mounts_under_sees_the_root_mount_and_nothing_in_a_new_dir(tmp_path):
    assert Path("/") in images.mounts_under(Path("/"))
    assert images.mounts_under(tmp_path) == []
