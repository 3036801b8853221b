"""What the apiserver serves, asked once for every command: the CRDs, the built-in gang APIs that
`--gang-scheduler-name auto` and `tfop doctor` look for (tfop.gang.registry.served_keys), and
whether pods keep `spec.schedulingGroup`. `tfop run` awaits these; `tfop doctor` and `tfop gang`
run them through tfop.kube.blocking.BlockingClient.call.
"""
from __future__ import annotations

from tfop.gang.registry import lists_resource, served_keys
from tfop.kube.client import ApiError, KubeClient

CRDS = ("apiextensions.k8s.io/v1", "customresourcedefinitions")
# A pod that names a PodGroup: an apiserver without the GenericWorkload gate drops the field silently.
PROBE_POD_NAME = "tfop-gang-field-probe"


async def crd_names(client: KubeClient) -> set[str]:
    listing = await client.list(*CRDS)
    return {item["metadata"]["name"] for item in listing.get("items") or []}


async def served(client: KubeClient, api_version: str, plural: str) -> bool:
    """Does discovery list `plural` under /apis/<api_version>?"""
    try:
        found = await client.request("GET", f"/apis/{api_version}")
    except ApiError as err:
        if err.status == 404:  # that API version is not served
            return False
        raise
    return lists_resource(found, plural)


async def served_group_apis(client: KubeClient, keys: dict[str, tuple[str, str]] | None = None) -> set[str]:
    """Which of the built-in gang APIs (served_key -> (api_version, plural); default: all) discovery lists."""
    keys = served_keys() if keys is None else keys
    return {key for key, (api_version, plural) in keys.items() if await served(client, api_version, plural)}


async def gang_apis(client: KubeClient) -> set[str]:
    """What `auto` picks a backend from: the CRDs, and the built-in gang APIs discovery lists."""
    return await crd_names(client) | await served_group_apis(client)


async def keeps_scheduling_group(client: KubeClient, namespace: str) -> bool:
    """Does the apiserver keep a pod's spec.schedulingGroup? A dry-run create: nothing is stored."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PROBE_POD_NAME, "namespace": namespace},
           "spec": {"schedulingGroup": {"podGroupName": PROBE_POD_NAME},
                    "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}
    created = await client.create(pod, "pods", dry_run=True)
    return bool(((created or {}).get("spec") or {}).get("schedulingGroup"))
