"""`tfop run` and `tfop doctor` without usable credentials or apiserver: one line, exit 1.

Each case is a kubeconfig (or none) in a temporary folder; the commands run
through click's CliRunner. The unreachable apiserver is 127.0.0.1 port 1,
which refuses at once. `tfop run` says it in its log (one ERROR record),
`tfop doctor` on stderr; neither prints a traceback.
"""
from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tfop.kube.kubeconfig import ConfigError, Endpoint, load, tls_context
from tfop.tools.cli import cli

REFUSING = "https://127.0.0.1:1"  # nothing listens on port 1: connection refused at once


def kubeconfig(cluster: dict | None = None, user: dict | None = None, current: str = "dev",
               context: dict | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "contexts": [{"name": "dev", "context": context or {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster if cluster is not None
                      else {"server": REFUSING, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}],
    }


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# name -> (the kubeconfig file's text, or None for no file; what the one line says)
CASES = {
    "no kubeconfig": (None, "no kubeconfig: $KUBECONFIG is not set, {home}/.kube/config does not exist, and this "
                            "is not a pod (KUBERNETES_SERVICE_HOST is not set): pass --kubeconfig or set KUBECONFIG"),
    "not YAML": ("clusters: [\n  - {", "kubeconfig {path} is not YAML: line 2, column 3: expected the node "
                                       "content, but found '-'"),
    "not a mapping": ("- a\n- b\n", "kubeconfig {path} is not a mapping of clusters, users and contexts"),
    "missing context": (kubeconfig(current="prod"), "kubeconfig {path}: no context named 'prod' (contexts: dev)"),
    "missing cluster": (kubeconfig(context={"cluster": "gone", "user": "u"}),
                        "kubeconfig {path}: context 'dev' names cluster 'gone', which is not in the file"),
    "no server": (kubeconfig(cluster={"insecure-skip-tls-verify": True}),
                  "kubeconfig {path}: cluster 'c' (context 'dev') has no server"),
    "missing CA file": (kubeconfig(cluster={"server": REFUSING, "certificate-authority": "pki/ca.crt"}),
                        "kubeconfig {path} (context 'dev'): certificate-authority {dir}/pki/ca.crt: no such file"),
    "missing client certificate": (
        kubeconfig(user={"client-certificate": "/nonexistent/u.crt", "client-key": "/nonexistent/u.key"}),
        "kubeconfig {path} (context 'dev'): client-certificate /nonexistent/u.crt: no such file"),
    "CA that is no certificate": (kubeconfig(cluster={"server": REFUSING, "certificate-authority": "ca.crt"}),
                                  "kubeconfig {path} (context 'dev'): the certificate authority does not load: "),
    "embedded data not base64": (kubeconfig(user={"client-certificate-data": "abc", "client-key-data": b64("k")}),
                                 "kubeconfig {path} (context 'dev'): embedded data does not decode: "),
    "unreachable apiserver": (kubeconfig(), "cannot reach the apiserver at https://127.0.0.1:1: "),
}


@pytest.fixture
def home(tmp_path):
    """An environment with no kubeconfig and no service account but what a case writes."""
    (tmp_path / "ca.crt").write_text("not a certificate\n")
    return tmp_path


def _env(home: Path) -> dict:
    return {"HOME": str(home), "KUBECONFIG": None, "KUBERNETES_SERVICE_HOST": None, "KUBERNETES_SERVICE_PORT": None}


def _write(home: Path, content) -> list[str]:
    if content is None:
        return []
    path = home / "kubeconfig"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return ["--kubeconfig", str(path)]


def _expected(home: Path, message: str) -> str:
    return message.format(home=home, path=home / "kubeconfig", dir=home)


def _says(line: str, expected: str) -> bool:
    """The whole line when the case gives it whole; its start when the rest is the library's words."""
    return line == expected if not expected.endswith(": ") else line.startswith(expected)


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_says_one_line(case, home, caplog):
    content, message = CASES[case]
    caplog.set_level(logging.INFO)
    result = CliRunner(env=_env(home)).invoke(cli, ["run", "--health-probe-bind-address", "0", *_write(home, content)])
    assert isinstance(result.exception, SystemExit) and result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].name == "tfop", [r.getMessage() for r in errors]
    assert _says(errors[0].getMessage(), _expected(home, message)), errors[0].getMessage()
    assert "\n" not in errors[0].getMessage()


@pytest.mark.parametrize("case", sorted(CASES))
def test_doctor_says_one_line(case, home):
    content, message = CASES[case]
    result = CliRunner(env=_env(home)).invoke(cli, ["doctor", *_write(home, content)])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert _says(lines[0][len("Error: "):], _expected(home, message)), lines[0]


def test_doctor_names_a_missing_context_flag(home):
    args = _write(home, kubeconfig())
    result = CliRunner(env=_env(home)).invoke(cli, ["doctor", *args, "--context", "prod"])
    assert (result.exit_code, result.output) == (1, f"Error: kubeconfig {home / 'kubeconfig'}: no context named "
                                                    "'prod' (contexts: dev)\n")


def test_run_refuses_gang_flags_before_connecting(home):
    result = CliRunner(env=_env(home)).invoke(cli, ["run", "--gang-scheduler-name", "Not A Name"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.splitlines()[-1].startswith("Error: --gang-scheduler-name='Not A Name' is neither")


def test_run_prints_one_line_on_stderr(home):
    """The real process, logging as the operator logs: one line on stderr and exit code 1."""
    args = _write(home, kubeconfig())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "KUBERNETES_SERVICE"))}
    done = subprocess.run([sys.executable, "-m", "tfop", "run", "--health-probe-bind-address", "0", *args],
                          env={**env, "HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and " ERROR tfop: cannot reach the apiserver at https://127.0.0.1:1: " in lines[0], lines


# ------------------------------------------------------------------ kubeconfig.load and tls_context
def test_load_keeps_what_only_the_official_loader_reads(home):
    path = home / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(user={"auth-provider": {"name": "oidc"}})))
    assert load(str(path), None, {}) is None
    assert load(None, None, {"KUBECONFIG": f"{path}{os.pathsep}{path}"}) is None  # merged lists


def test_load_names_where_the_endpoint_came_from(home):
    path = home / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig()))
    endpoint = load(str(path), None, {})
    assert endpoint.source == f"kubeconfig {path} (context 'dev')"
    assert endpoint == Endpoint(server=REFUSING, verify=False, token="t")  # the source is not compared


def test_tls_context_loads_what_the_files_hold(home):
    assert tls_context(Endpoint(server=REFUSING, verify=False)).check_hostname is False
    with pytest.raises(ConfigError, match=r"^the credentials for https://127.0.0.1:1: tokenFile /no/token: "
                                          r"no such file$"):
        tls_context(Endpoint(server=REFUSING, token_file="/no/token"))
    unreadable = home / "token"
    unreadable.write_text("t")
    unreadable.chmod(0)
    if not os.access(unreadable, os.R_OK):  # root reads it anyway
        with pytest.raises(ConfigError, match="tokenFile .*/token: cannot be read$"):
            tls_context(Endpoint(server=REFUSING, token_file=str(unreadable)))
