"""Exec credential plugins: the kubeconfig's `exec`, what a plugin prints, when it runs again, and a
real plugin (a small Python script) run by the async runner."""
from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from tfop.kube.exec_credential import (ExecAuthenticator, ExecCredential, ExecPluginError, exec_env, exec_info,
                                       parse_credential, refresh_time, run_plugin)
from tfop.kube.kubeconfig import ConfigError, Endpoint, ExecConfig, exec_config, from_kubeconfig, load

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
CLUSTER = {"server": "https://10.0.0.5:6443"}


def kubeconfig(user: dict, cluster: dict | None = None) -> dict:
    return {"current-context": "dev", "contexts": [{"name": "dev", "context": {"cluster": "c", "user": "u"}}],
            "clusters": [{"name": "c", "cluster": cluster or CLUSTER}], "users": [{"name": "u", "user": user}]}


# ------------------------------------------------------------------ the kubeconfig's exec section
def test_exec_section_is_read(tmp_path):
    spec = {"apiVersion": V1, "command": "bin/plugin", "args": ["get-token", 3], "interactiveMode": "Never",
            "env": [{"name": "A", "value": "1"}, {"name": "B"}, {"value": "nameless"}], "installHint": "get it"}
    assert exec_config(spec, CLUSTER, tmp_path) == ExecConfig(
        command=str(tmp_path / "bin/plugin"), args=("get-token", "3"), env=(("A", "1"), ("B", "")),
        api_version=V1, install_hint="get it")
    assert exec_config({"apiVersion": V1BETA1, "command": "aws"}, CLUSTER, tmp_path).command == "aws"  # on PATH
    assert exec_config({"apiVersion": V1, "command": "/abs/p"}, CLUSTER, tmp_path).command == "/abs/p"


@pytest.mark.parametrize("spec, message", [
    ({"apiVersion": V1}, "user.exec has no command"),
    ("aws", "user.exec has no command"),
    ({"command": "aws"}, "user.exec apiVersion None is not supported: use client.authentication.k8s.io/v1 or "
                         "client.authentication.k8s.io/v1beta1"),
    ({"command": "aws", "apiVersion": "client.authentication.k8s.io/v1alpha1"}, "user.exec apiVersion "),
    ({"command": "aws", "apiVersion": V1, "interactiveMode": "Always"},
     "user.exec interactiveMode Always needs a terminal, which the operator does not have: use IfAvailable or Never"),
    ({"command": "aws", "apiVersion": V1, "interactiveMode": "Sometimes"}, "user.exec interactiveMode 'Sometimes'"),
    ({"command": "aws", "apiVersion": V1, "args": "get-token"}, "user.exec args and env must be lists"),
])
def test_an_exec_section_no_plugin_could_run_from(tmp_path, spec, message):
    with pytest.raises(ConfigError) as err:
        exec_config(spec, CLUSTER, tmp_path)
    assert str(err.value).startswith(message)


def test_load_names_the_file_of_a_bad_exec_section(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig({"exec": {"command": "aws"}})))
    with pytest.raises(ConfigError, match=rf"^kubeconfig {path} \(context 'dev'\): user.exec apiVersion None"):
        load(str(path), None, {})


def test_a_token_or_certificate_beside_exec_wins_as_in_client_go(tmp_path):
    plugin = {"apiVersion": V1, "command": "aws"}
    assert from_kubeconfig(kubeconfig({"exec": plugin}), tmp_path).exec_plugin.command == "aws"
    assert from_kubeconfig(kubeconfig({"exec": plugin, "token": "t"}), tmp_path).exec_plugin is None
    with_cert = {"exec": plugin, "client-certificate": "c.crt", "client-key": "c.key"}
    assert from_kubeconfig(kubeconfig(with_cert), tmp_path).exec_plugin is None


def test_cluster_info_is_given_only_when_asked_for(tmp_path):
    (tmp_path / "ca.crt").write_bytes(b"CA PEM")
    cluster = {"server": "https://h:1", "certificate-authority": "ca.crt", "tls-server-name": "kubernetes",
               "proxy-url": "http://p:1",
               "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"audience": "x"}},
                              {"name": "other", "extension": {"no": 1}}]}
    asked = exec_config({"apiVersion": V1, "command": "p", "provideClusterInfo": True}, cluster, tmp_path)
    assert json.loads(exec_info(asked)) == {
        "apiVersion": V1, "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {
            "server": "https://h:1", "tls-server-name": "kubernetes", "certificate-authority-data": "Q0EgUEVN",
            "proxy-url": "http://p:1", "config": {"audience": "x"}}}}
    plain = exec_config({"apiVersion": V1BETA1, "command": "p"}, cluster, tmp_path)
    assert json.loads(exec_info(plain)) == {"apiVersion": V1BETA1, "kind": "ExecCredential",
                                            "spec": {"interactive": False}}
    with pytest.raises(ConfigError, match="certificate-authority .*/gone.crt: No such file"):
        exec_config({"apiVersion": V1, "command": "p", "provideClusterInfo": True},
                    {**cluster, "certificate-authority": "gone.crt"}, tmp_path)


def test_the_plugin_environment_adds_to_the_process_one():
    config = ExecConfig(command="p", env=(("A", "mine"), ("C", "3")))
    env = exec_env(config, {"A": "process", "B": "2"})
    assert (env["A"], env["B"], env["C"]) == ("mine", "2", "3")
    assert json.loads(env["KUBERNETES_EXEC_INFO"])["spec"] == {"interactive": False}


# ------------------------------------------------------------------ what a plugin prints
def credential(status: dict | None = None, version: str = V1, **extra) -> str:
    doc = {"apiVersion": version, "kind": "ExecCredential", **extra}
    if status is not None:
        doc["status"] = status
    return json.dumps(doc)


EPOCH_2030 = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("printed, version, expected", [
    (credential({"token": "abc"}), V1, ExecCredential(token="abc")),
    (credential({"token": "abc"}, V1BETA1), V1BETA1, ExecCredential(token="abc")),
    (credential({"token": "abc", "expirationTimestamp": "2030-01-01T00:00:00Z"}), V1,
     ExecCredential(token="abc", expires_at=EPOCH_2030)),
    (credential({"token": "abc", "expirationTimestamp": "2030-01-01T01:00:00+01:00"}), V1,
     ExecCredential(token="abc", expires_at=EPOCH_2030)),
    (credential({"token": "abc", "expirationTimestamp": "2030-01-01T00:00:00.5Z"}), V1,
     ExecCredential(token="abc", expires_at=EPOCH_2030 + 0.5)),
    (credential({"clientCertificateData": "CERT", "clientKeyData": "KEY"}), V1,
     ExecCredential(client_certificate="CERT", client_key="KEY")),
    (credential({"token": "t", "clientCertificateData": "CERT", "clientKeyData": "KEY", "expirationTimestamp": ""}),
     V1, ExecCredential(token="t", client_certificate="CERT", client_key="KEY")),
    (credential({"token": "abc"}, spec={"interactive": False}).encode(), V1, ExecCredential(token="abc")),
])
def test_what_a_plugin_prints(printed, version, expected):
    assert parse_credential(printed, version) == expected


@pytest.mark.parametrize("printed, message", [
    ("", "did not print an ExecCredential as JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"\xff\xfe", "did not print an ExecCredential as JSON: "),
    ("[1, 2]", "printed JSON that is not an ExecCredential"),
    (json.dumps({"apiVersion": V1, "kind": "Secret"}), "printed JSON that is not an ExecCredential"),
    (credential({"token": "t"}, V1BETA1), "printed apiVersion 'client.authentication.k8s.io/v1beta1'; the "
                                          "kubeconfig asks for client.authentication.k8s.io/v1"),
    (credential(None), "printed an ExecCredential without a status"),
    (credential({}), "printed neither status.token nor a client certificate"),
    (credential({"token": ""}), "printed neither status.token nor a client certificate"),
    (credential({"token": 5}), "printed a status.token that is not a string"),
    (credential({"clientCertificateData": "CERT"}), "printed only one of status.clientCertificateData and"),
    (credential({"token": "a b"}), "printed a status.token with spaces or control characters"),
    (credential({"token": "a\r\nX-Evil: 1"}), "printed a status.token with spaces or control characters"),
    (credential({"token": "t", "expirationTimestamp": "tomorrow"}),
     "printed status.expirationTimestamp 'tomorrow', not an RFC 3339 time"),
    (credential({"token": "t", "expirationTimestamp": 1700000000}), "printed status.expirationTimestamp"),
    ("[" * 100_000, "did not print an ExecCredential as JSON: "),
])
def test_what_is_not_a_credential(printed, message):
    with pytest.raises(ValueError) as err:
        parse_credential(printed, V1)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# ------------------------------------------------------------------ when it runs again
@pytest.mark.parametrize("obtained, expires, refresh", [
    (0, None, None),  # no expiry: until the apiserver refuses it
    (0, 3600, 3240),  # an hour: a tenth (360 s) before
    (0, 900, 810),  # 15 minutes (EKS): 90 s before
    (0, 600, 540),  # 10 minutes: a minute (more than a tenth) before
    (0, 120, 60),  # 2 minutes: a minute before, which is half its life
    (0, 10, 5),  # 10 s: at half its life, not at every request
    (100, 110, 105),
    (100, 100, 100),  # expires as obtained: at once
    (100, 90, 95),  # expired before it came: at once (95 < 100)
])
def test_refresh_time(obtained, expires, refresh):
    assert refresh_time(obtained, expires) == refresh


# ------------------------------------------------------------------ a real plugin, run by the async runner
PLUGIN = '''#!{python}
import json, os, sys, time
from datetime import datetime, timezone
here = os.path.dirname(os.path.abspath(__file__))
count = os.path.join(here, "runs")
runs = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(runs))
open(os.path.join(here, "exec-info"), "w").write(os.environ.get("KUBERNETES_EXEC_INFO", ""))
mode = os.environ.get("PLUGIN_MODE", "ok")
if mode == "fail" or (mode == "fail-after-first" and runs > 1):
    print("no credentials for you\\nsecond line", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    time.sleep(60)
if mode == "chatty":
    sys.stdout.write("x" * (2 << 20))
    sys.exit(0)
expires = datetime.fromtimestamp(time.time() + float(os.environ["LIFETIME"]), timezone.utc)
status = {{"token": "token-%d" % runs, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}
print(json.dumps({{"apiVersion": os.environ["API_VERSION"], "kind": "ExecCredential", "status": status}}))
'''


def plugin(tmp_path: Path, mode: str = "ok", lifetime: int = 100, version: str = V1) -> ExecConfig:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(0o755)
    return ExecConfig(command=str(script), args=("get-token",), api_version=version,
                      env=(("PLUGIN_MODE", mode), ("LIFETIME", str(lifetime)), ("API_VERSION", version)))


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text()) if (tmp_path / "runs").exists() else 0


class Clock:
    """The wall clock, moved on by the test (the plugin's expiry is in wall-clock time)."""
    def __init__(self):
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


def test_the_plugin_runs_when_first_needed_then_again_before_expiry_and_after_a_401(tmp_path):
    clock = Clock()
    auth = ExecAuthenticator(plugin(tmp_path, lifetime=100), Endpoint(server="https://h:1"), os.environ, clock=clock)

    async def scenario():
        assert auth.token() is None and runs(tmp_path) == 0  # nothing runs before a request needs it
        first = await auth.credential()
        assert (first.token, runs(tmp_path), auth.token()) == ("token-1", 1, "token-1")
        assert (await auth.credential()).token == "token-1" and runs(tmp_path) == 1  # kept
        clock.ahead = 45  # a 100 s token is run again at half its life (refresh_time)
        assert (await auth.credential()).token == "token-1" and runs(tmp_path) == 1
        clock.ahead = 52
        second = await auth.credential()
        assert (second.token, runs(tmp_path)) == ("token-2", 2)
        # The apiserver refused token-2 (revoked): one run for every request that carried it.
        assert await asyncio.gather(*(auth.rejected(second) for _ in range(5))) == [True] * 5
        assert (auth.token(), runs(tmp_path)) == ("token-3", 3)
        assert await auth.rejected(first) is True and runs(tmp_path) == 3  # long replaced: try the current
        clock.ahead = 110  # due again: many requests at once, one run
        got = await asyncio.gather(*(auth.credential() for _ in range(20)))
        assert {c.token for c in got} == {"token-4"} and runs(tmp_path) == 4
    asyncio.run(scenario())
    info = json.loads((tmp_path / "exec-info").read_text())
    assert info == {"apiVersion": V1, "kind": "ExecCredential", "spec": {"interactive": False}}


def test_a_failing_run_keeps_a_credential_that_still_holds(tmp_path, caplog):
    clock = Clock()
    auth = ExecAuthenticator(plugin(tmp_path, mode="fail-after-first", lifetime=100), Endpoint(server="https://h:1"),
                             os.environ, clock=clock)

    async def scenario():
        held = await auth.credential()
        clock.ahead = 60  # due, and the plugin fails now: the held token lasts 40 s more
        assert await auth.credential() == held and runs(tmp_path) == 2
        assert await auth.credential() == held and runs(tmp_path) == 2  # not again at once
        clock.ahead = 71  # 10 s later it tries again
        assert await auth.credential() == held and runs(tmp_path) == 3
        assert await auth.rejected(held) is False and runs(tmp_path) == 4  # a 401, and no new one: the 401 stands
        clock.ahead = 101  # expired, and the plugin still fails: the request fails, saying why
        with pytest.raises(ExecPluginError, match=r"exited with code 3: no credentials for you$"):
            await auth.credential()
    asyncio.run(scenario())
    assert re.search(r"exited with code 3: no credentials for you; keeping the current credential, which "
                     r"expires in (39|40)s", caplog.text)


@pytest.mark.parametrize("mode, message", [
    ("fail", r"^exec plugin .*/plugin.py: exited with code 3: no credentials for you$"),
    ("chatty", r"^exec plugin .*/plugin.py: printed more than 1048576 bytes$"),
])
def test_a_failing_plugin_is_one_line_naming_it(tmp_path, mode, message):
    with pytest.raises(ExecPluginError, match=message):
        asyncio.run(run_plugin(plugin(tmp_path, mode=mode), os.environ))


def test_a_plugin_that_prints_another_version_is_named(tmp_path):
    config = plugin(tmp_path, version=V1BETA1)
    with pytest.raises(ExecPluginError, match=r"^exec plugin .*/plugin.py: printed apiVersion '.*v1beta1'; the "
                                              r"kubeconfig asks for client.authentication.k8s.io/v1$"):
        asyncio.run(run_plugin(replace(config, api_version=V1), os.environ))


def test_a_hung_plugin_is_killed_at_the_deadline_without_blocking_the_loop(tmp_path):
    async def scenario():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1
        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        with pytest.raises(ExecPluginError, match=r"^exec plugin .*/plugin.py: no answer within 1s$"):
            await run_plugin(plugin(tmp_path, mode="hang"), os.environ, timeout=1)
        ticker.cancel()
        return time.monotonic() - started, ticks
    took, ticks = asyncio.run(scenario())
    assert took < 5 and ticks >= 10  # the loop kept running while the plugin hung
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "plugin.py")], capture_output=True, text=True)
    assert leftover.stdout == ""


def test_a_missing_plugin_says_how_to_install_it(tmp_path):
    config = ExecConfig(command=str(tmp_path / "nope"), install_hint="brew install nope\nor apt-get install nope")
    with pytest.raises(ExecPluginError, match=r"^exec plugin .*/nope: cannot run it: No such file or directory "
                                              r"\(brew install nope\)$"):
        asyncio.run(run_plugin(config, os.environ))


def test_a_plugin_failure_at_start_up_is_one_startup_line(tmp_path):
    from tfop.kube.blocking import BlockingClient
    from tfop.kube.credentials import load_credentials
    from tfop.kube.kubeconfig import StartupError

    config = plugin(tmp_path, mode="fail")
    user = {"exec": {"apiVersion": V1, "command": config.command, "env": [{"name": k, "value": v}
                                                                         for k, v in config.env]}}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig(user, {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True})))
    with pytest.raises(StartupError, match=r"^exec plugin .*/plugin.py: exited with code 3: no credentials for you$"):
        with BlockingClient(load_credentials(str(path), None, {})):
            pass


# ------------------------------------------------------------------ a plugin's client certificate
def self_signed(folder: Path, name: str) -> tuple[str, str]:
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "1", "-subj", f"/CN={name}"],
                   cwd=folder, check=True, capture_output=True)
    return (folder / f"{name}.crt").read_text(), (folder / f"{name}.key").read_text()


def test_a_new_client_certificate_rebuilds_the_tls_context(tmp_path, caplog):
    one, two = self_signed(tmp_path, "one"), self_signed(tmp_path, "two")
    answers = iter([ExecCredential(client_certificate=one[0], client_key=one[1], expires_at=time.time() - 1),
                    ExecCredential(client_certificate=one[0], client_key=one[1], expires_at=time.time() - 1),
                    ExecCredential(token="t", client_certificate=two[0], client_key=two[1]),
                    ExecCredential(client_certificate=two[0], client_key="not a key")])

    async def runner(config, environ):
        return next(answers)
    auth = ExecAuthenticator(ExecConfig(command="p"), Endpoint(server="https://h:1", verify=False), {}, runner=runner)

    async def scenario():
        assert auth.ssl_context() is None
        await auth.credential()
        first = auth.ssl_context()
        await auth.credential()  # expired: run again; the same certificate, the same context
        assert first is not None and auth.ssl_context() is first
        third = await auth.credential()
        second = auth.ssl_context()
        assert second not in (None, first) and third.token == "t"
        # A 401, and the plugin's next certificate does not load: nothing changes, the 401 stands.
        assert await auth.rejected(third) is False
        assert auth.ssl_context() is second and auth.token() == "t"
    asyncio.run(scenario())
    assert "exec plugin p: its client certificate and key do not load: " in caplog.text
    assert not list(Path(tempfile.gettempdir()).glob("tfop-exec-*"))  # the PEM files never stay on disk
