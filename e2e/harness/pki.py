"""Throw-away PKI for the local control plane, made with the openssl CLI
(always present on Debian; avoids a `cryptography` dependency)."""

from __future__ import annotations

import subprocess
from pathlib import Path

DAYS = "30"


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr}")


def make_ca(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS, "-subj", "/CN=tfop-e2e-ca", cwd=d)


def make_cert(d: Path, name: str, subject: str, *, server_sans: list[str] | None = None) -> None:
    """Leaf cert `name`.crt/.key signed by the CA in `d`. Client certs carry the
    identity in the subject (CN = user, O = group) as kube-apiserver reads it."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
    ext = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if server_sans:
        ext += ["extendedKeyUsage=serverAuth,clientAuth", "subjectAltName=" + ",".join(server_sans)]
    else:
        ext += ["extendedKeyUsage=clientAuth"]
    (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", DAYS, "-extfile", f"{name}.ext", cwd=d)
    (d / f"{name}.csr").unlink()
    (d / f"{name}.ext").unlink()


def make_sa_keypair(d: Path) -> None:
    """RSA key pair the apiserver signs ServiceAccount tokens with."""
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=d)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
