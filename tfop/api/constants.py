"""The names of the TFJob API and of what tfop stamps on objects: defined here once."""

GROUP = "kubeflow.org"
KIND = "TFJob"
PLURAL = "tfjobs"
STORAGE_VERSION = "v1"
SERVED_VERSIONS = ("v1", "v1beta1", "v1alpha2")
# The version of Kueue's API tfop reads (its Workloads, LocalQueues), and `tfop doctor` checks.
KUEUE_API = "kueue.x-k8s.io/v1beta1"

# Canonical replica types, in the order objects are created and TF_CONFIG lists them.
REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
CHIEF_TYPES = ("Chief", "Master")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
SUCCESS_POLICIES = ("", "AllWorkers")

DEFAULT_CONTAINER = "tensorflow"
DEFAULT_PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
OPERATOR_NAME = "tfjob-controller"

# Labels the operator stamps on every child; the legacy keys keep old selectors working.
LABEL_OPERATOR = "training.kubeflow.org/operator-name"
LABEL_JOB = "training.kubeflow.org/job-name"
LABEL_TYPE = "training.kubeflow.org/replica-type"
LABEL_INDEX = "training.kubeflow.org/replica-index"
LABEL_ROLE = "training.kubeflow.org/job-role"
LEGACY_LABELS = {
    "job": ("job-name", "tf-job-name", "tf_job_name"),
    "type": ("replica-type", "tf-replica-type"),
    "index": ("replica-index", "tf-replica-index"),
}
LEGACY_GROUP_LABEL = "group-name"

# tfop's own per-job settings, as annotations so upstream YAML stays valid.
ANNOTATION_GANG_RESTART = "tfop.kubeflow.org/gang-restart"
ANNOTATION_ON_SCHEDULE_TIMEOUT = "tfop.kubeflow.org/on-schedule-timeout"
# Stamped on pods so a restart of the whole gang can be told from a single pod's.
ANNOTATION_GANG_GENERATION = "tfop.kubeflow.org/gang-generation"
# Set on a waiting gang's group object to make the scheduler retry it (GangBackend.retry_touch_seconds).
ANNOTATION_GANG_RETRY = "tfop.kubeflow.org/gang-retry"

# kubectl's copy of the whole object: large, and meaningless on another object.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
