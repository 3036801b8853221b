"""JobRecord.normalized: made once per body and status, never served stale."""
from tfop.runtime import jobs
from tfop.runtime.jobs import JobRecord
from tfop.runtime.trim import trim_job


def job(replicas: int = 1, rv: str = "1") -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": rv},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "i"}]}}}}},
            "status": {"conditions": []}}


def test_unchanged_body_and_status_reuse_the_normalized_job():
    record = JobRecord(body=job())
    assert record.normalized() is record.normalized()


def test_a_new_body_is_normalized_anew():
    record = JobRecord(body=job())
    first = record.normalized()
    record.body = job(replicas=3, rv="2")
    again = record.normalized()
    assert again is not first
    assert again.job.replicas[0].replicas == 3


def test_a_held_status_is_read_by_the_next_normalized_job():
    record = JobRecord(body=job())
    record.normalized()
    record.hold({"conditions": [{"type": "Created", "status": "True"}]}, now=0.0)
    assert record.normalized().job.status["conditions"][0]["type"] == "Created"
    record.release()
    assert record.normalized().job.status == {"conditions": []}


def test_a_new_resource_version_alone_or_an_equal_status_reuse_it():
    record = JobRecord(body=job())
    first = record.normalized()
    record.body = job(rv="7")
    record.hold({"conditions": []}, now=0.0)  # equal to the written status
    assert record.normalized() is first


def test_a_new_status_alone_normalizes_only_the_status(monkeypatch):
    made, normalize_unstated = [], jobs.normalize_unstated
    monkeypatch.setattr(jobs, "normalize_unstated", lambda source: made.append(1) or normalize_unstated(source))
    record = JobRecord(body=job())
    first = record.normalized()
    record.hold({"conditions": [{"type": "Created", "status": "True"}], "restartCount": "two"}, now=0.0)
    again = record.normalized()
    assert len(made) == 1
    assert again.job.status["conditions"][0]["type"] == "Created"
    assert [p.field for p in again.problems] == ["status.restartCount"]
    assert (again.job.replicas, again.notes) == (first.job.replicas, first.notes)


def test_a_status_write_s_managed_fields_entry_keeps_the_job(monkeypatch):
    """The first status write adds a managedFields entry of the status subresource: not a new job (nor a
    new gang shape, kept in job.derived); an entry of the job itself, another author, is. Both bodies a
    record holds are trimmed (the informer's and the status write's answer)."""
    made, normalize_unstated = [], jobs.normalize_unstated
    monkeypatch.setattr(jobs, "normalize_unstated", lambda source: made.append(1) or normalize_unstated(source))
    created = {"manager": "kubectl", "apiVersion": "kubeflow.org/v1"}

    def trimmed(rv: str, *fields: dict) -> dict:
        body = job(rv=rv)
        body["metadata"]["managedFields"] = [created, *fields]
        return trim_job(body)
    record = JobRecord(body=trimmed("1"))
    first = record.normalized()
    record.body = trimmed("2", {"manager": "tfop", "apiVersion": "kubeflow.org/v1", "subresource": "status"})
    assert record.normalized() is first and len(made) == 1
    record.body = trimmed("3", {"manager": "kubectl", "apiVersion": "kubeflow.org/v1beta1"})
    assert record.normalized() is not first and len(made) == 2
