"""What the apiserver serves, asked through the official client: the built-in gang APIs `auto` and
doctor look for (tfop.gang.registry.served_keys), and whether pods keep `spec.schedulingGroup`."""
from __future__ import annotations

from typing import Any

from tfop.gang.registry import lists_resource, served_keys

# A pod that names a PodGroup: an apiserver without the GenericWorkload gate drops the field silently.
PROBE_POD_NAME = "tfop-gang-field-probe"


def _get(api_client: Any, path: str) -> Any:
    return api_client.call_api(path, "GET", response_type="object", auth_settings=["BearerToken"],
                               _return_http_data_only=True)


def served(api_client: Any, api_version: str, plural: str) -> bool:
    """Does discovery list `plural` under /apis/<api_version>?"""
    from kubernetes.client.exceptions import ApiException

    try:
        found = _get(api_client, f"/apis/{api_version}")
    except ApiException as err:
        if err.status == 404:  # that API version is not served
            return False
        raise
    return lists_resource(found, plural)


def served_group_apis(api_client: Any) -> set[str]:
    """The served_key of every built-in gang API discovery lists."""
    return {key for key, (api_version, plural) in served_keys().items() if served(api_client, api_version, plural)}


def keeps_scheduling_group(api_client: Any, namespace: str) -> bool:
    """Does the apiserver keep a pod's spec.schedulingGroup? A dry-run create: nothing is stored."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PROBE_POD_NAME, "namespace": namespace},
           "spec": {"schedulingGroup": {"podGroupName": PROBE_POD_NAME},
                    "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}}
    created = api_client.call_api(f"/api/v1/namespaces/{namespace}/pods", "POST", body=pod,
                                  query_params=[("dryRun", "All")], response_type="object",
                                  header_params={"Content-Type": "application/json"},
                                  auth_settings=["BearerToken"], _return_http_data_only=True)
    return bool(((created or {}).get("spec") or {}).get("schedulingGroup"))
