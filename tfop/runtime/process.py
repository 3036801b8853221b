"""kopf runs the operator's process: the login, start-up settings, signals and the clean stop.

It watches nothing itself: TFJobs and their children come through tfop's informers
(tfop/kube/informer.py). This is the one module that knows kopf.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable

import kopf

from tfop.kube.credentials import Credentials


def connection_info(credentials: Credentials) -> kopf.ConnectionInfo:
    """What kopf's own session connects with: the credentials every tfop request uses."""
    return kopf.ConnectionInfo(
        server=credentials.server, ca_path=credentials.ca_file, ca_data=credentials.ca_data,
        insecure=not credentials.verify, token=credentials.bearer(), certificate_path=credentials.cert_file,
        private_key_path=credentials.key_file,
    )


def build_registry(credentials: Credentials, on_cleanup: Callable[[], Awaitable[None]]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        # Asked again after a 401 to kopf's requests: an exec plugin's token may have been renewed.
        return connection_info(credentials)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = False  # we post our own, fewer, Events
        # Our namespaces are exact names and the CRD is known: no need to list namespaces or CRDs.
        settings.scanning.disabled = True
        settings.watching.server_timeout = 290

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        await on_cleanup()  # the replica's clean stop, inside kopf's

    return registry
