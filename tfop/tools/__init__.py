"""Commands around the operator: the CLI, manifests, RBAC, the CRD, doctor, gang toggle, offline render."""
