"""`tfop validate` and `tfop render` on randomly broken TFJobs: never a traceback.

Valid jobs (built here, plus the seed documents' when they are there) are
broken by seeded random mutations: a value swapped for another type (list,
object, string, integer, null), a field deleted, huge numbers, strange strings,
nested garbage, strange keys. Each case runs through both commands with click's
CliRunner, as `tfop validate -f -` and `tfop render -f -` run. Every case must
end with exit code 0 or 1, and every message must be one line naming the field
(or, when the mutation made the document no TFJob, say so about the file).
"""
from __future__ import annotations

import copy
import json
import math
import random
import re

import pytest
import yaml
from click.testing import CliRunner

import seeds
from tfop.tools.cli import cli

SEED = 20240501
CASES = 300
GANG_EVERY = 8  # every eighth case runs with --gang-scheduler-name volcano

# A message names a field of the job: `FILE: JOB: FIELD: message`, FIELD under one of these; or, for
# a key JSON cannot have (null), `Error: FILE: document N: FIELD: message`.
FIELD = re.compile(r": (apiVersion|kind|metadata|spec|status)(\.|\[|: )")
KEY_ERROR = re.compile(r"Error: -: document \d+: ")
NOT_A_TFJOB = "-: no kubeflow.org TFJob in it"


def _container(name="tensorflow", **extra):
    return {"name": name, "image": "tensorflow/tensorflow:2.15.0", "command": ["python", "train.py"], **extra}


def _template(*containers, **spec):
    return {"metadata": {"labels": {"team": "ml"}, "annotations": {"note": "x"}},
            "spec": {"containers": list(containers) or [_container()], **spec}}


def built_jobs() -> list[dict]:
    """Valid jobs touching every field tfop reads."""
    ports = [{"name": "tfjob-port", "containerPort": 2222}, {"name": "metrics", "containerPort": 9090}]
    resources = {"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}, "requests": {"cpu": "500m"}}
    worker = _template(_container(ports=ports, env=[{"name": "A", "value": "1"}], resources=resources),
                       _container("sidecar", resources={"limits": {"cpu": "100m"}}),
                       initContainers=[_container("init", restartPolicy="Always")],
                       schedulerName="default-scheduler", priorityClassName="high",
                       overhead={"cpu": "10m"})
    full = {
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "full", "namespace": "ml", "labels": {"a": "b"}, "annotations": {"c": "d"},
                     "generation": 3, "uid": "u-1", "creationTimestamp": "2024-05-01T12:00:00Z"},
        "spec": {
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "restartPolicy": "OnFailure", "template": _template()},
                "PS": {"replicas": 2, "restartPolicy": "Never", "template": _template()},
                "Worker": {"replicas": 3, "restartPolicy": "ExitCode", "template": worker},
                "Evaluator": {"replicas": 1, "template": _template()},
            },
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 3600,
                          "backoffLimit": 3, "suspend": False,
                          "schedulingPolicy": {"minAvailable": 4, "queue": "q", "priorityClass": "high",
                                               "minResources": {"cpu": "8", "memory": "16Gi"},
                                               "scheduleTimeoutSeconds": 60}},
            "successPolicy": "AllWorkers",
        },
    }
    legacy = {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "TFJob", "metadata": {"name": "legacy"},
        "spec": {"cleanPodPolicy": "All", "backoffLimit": 2, "enableDynamicWorker": True,
                 "tfReplicaSpecs": {"ps": {"replicas": 1, "template": _template()},
                                    "worker": {"template": _template(restartPolicy="OnFailure")}}},
    }
    single = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "single"},
              "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": _template()}}}}
    # As `kubectl get -o yaml` shows a started job: its status is read too.
    stamp = "2024-05-01T12:00:00Z"
    started = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
               "metadata": {"name": "started", "namespace": "ml", "creationTimestamp": stamp,
                            "managedFields": [{"manager": "kubectl", "apiVersion": "kubeflow.org/v1"}]},
               "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": _template()}}},
               "status": {"conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated",
                                          "message": "m", "lastUpdateTime": stamp, "lastTransitionTime": stamp}],
                          "startTime": stamp, "restartCount": 0, "gang": {}}}
    return [full, legacy, single, started]


def base_jobs() -> list[dict]:
    jobs = built_jobs()
    if seeds.SEEDS_DIR.is_dir():  # the seed documents' jobs too, where they are
        jobs += [job for _, job in seeds.seed_jobs()]
    return jobs


# ----------------------------------------------------------------------- mutations
WEIRD_STRINGS = ["", " ", "twenty", "\n", "a\nb: c", "\x00", "\u202e\u200b", "é" * 3, "a" * 300, "9" * 40,
                 "2024-05-01T12:00:00Z", "null", "true", "{", "- x", "${HOME}", "../../etc/passwd", "Worker",
                 "1e999", "0x1F", "-1", "500m"]
HUGE_NUMBERS = [2**31, 2**63, -2**63 - 1, 10**40, -1, 1e308, -1e308, math.inf, -math.inf, math.nan, 0.5, 3.0]


def _nested(depth: int):
    node: object = "bottom"
    for i in range(depth):
        node = [node] if i % 2 else {"k": node}
    return node


GARBAGE = [[], {}, [[]], [None], {"a": {"b": [None, {}]}}, _nested(30), list(range(300)),
           {1: "one", None: "null key", "": [], "x" * 100: {}}, [{"name": None}], True, False]
WEIRD_KEYS = [1, None, "", " Worker", "WORKER", "a: b", "x" * 200, "\t", "worker", "Chief"]


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, path + (i,))


def _swap_type(value, rnd: random.Random):
    """Another type holding what it can of the value: list <-> object <-> string <-> integer <-> null."""
    kinds = [k for k in ("list", "dict", "str", "int", "null") if not _is_kind(value, k)]
    kind = rnd.choice(kinds)
    if kind == "list":
        return list(value.values()) if isinstance(value, dict) else [value]
    if kind == "dict":
        return {str(i): v for i, v in enumerate(value)} if isinstance(value, list) else {"value": value}
    if kind == "str":
        return rnd.choice([str(value)[:60], rnd.choice(WEIRD_STRINGS)])
    return rnd.choice(HUGE_NUMBERS[:5] + [0, 1]) if kind == "int" else None


def _is_kind(value, kind: str) -> bool:
    return {"list": isinstance(value, list), "dict": isinstance(value, dict), "str": isinstance(value, str),
            "int": isinstance(value, int) and not isinstance(value, bool), "null": value is None}[kind]


def _mutate_once(job: dict, rnd: random.Random) -> str:
    paths = [p for p in _paths(job) if p]
    if not paths:
        return "nothing left to change"
    path = rnd.choice(paths)
    parent = job
    for key in path[:-1]:
        parent = parent[key]
    last, value = path[-1], parent[path[-1]]
    op = rnd.choice(["swap", "swap", "delete", "number", "string", "garbage", "key"])
    where = ".".join(map(str, path))
    if op == "delete":
        del parent[last]
        return f"delete {where}"
    if op == "key" and isinstance(value, dict):
        key = rnd.choice(WEIRD_KEYS)
        value[key] = copy.deepcopy(rnd.choice(GARBAGE + WEIRD_STRINGS))
        return f"add key {key!r} under {where}"
    new = {"swap": lambda: _swap_type(value, rnd), "number": lambda: rnd.choice(HUGE_NUMBERS),
           "string": lambda: rnd.choice(WEIRD_STRINGS), "garbage": lambda: copy.deepcopy(rnd.choice(GARBAGE)),
           "key": lambda: copy.deepcopy(rnd.choice(GARBAGE))}[op]()
    parent[last] = new
    return f"{op}: {where} = {str(new)[:40]!r}"


def cases() -> list[tuple[str, str, bool, bool]]:
    """(description, YAML text, with gang flags, still a TFJob), the same on every run."""
    rnd = random.Random(SEED)
    jobs = base_jobs()
    out = []
    for n in range(CASES):
        job = copy.deepcopy(rnd.choice(jobs))
        done = [_mutate_once(job, rnd) for _ in range(rnd.choice([1, 1, 2, 3]))]
        text = yaml.dump(job, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
        out.append((f"case {n}: " + "; ".join(done), text, n % GANG_EVERY == 0, _is_tfjob(job)))
    return out


# ----------------------------------------------------------------------- checks
def _invoke(command: str, text: str, gang: bool):
    args = [command, "-f", "-"] + (["--gang-scheduler-name", "volcano"] if gang else [])
    return CliRunner().invoke(cli, args, input=text)


def _is_tfjob(doc) -> bool:
    return (isinstance(doc, dict) and doc.get("kind") == "TFJob"
            and isinstance(doc.get("apiVersion"), str) and doc["apiVersion"].startswith("kubeflow.org/"))


def _check_messages(what: str, result, lines: list[str], tfjob: bool) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (what, result.exception)
    assert result.exit_code in (0, 1), (what, result.exit_code, result.output)
    assert "Traceback" not in result.output and "internal error" not in result.output, (what, result.output)
    if not tfjob:  # said about the file (or a key JSON cannot have, found first)
        assert result.exit_code == 1 and len(lines) == 1, (what, result.output)
        assert lines[0] == f"Error: {NOT_A_TFJOB}" or KEY_ERROR.match(lines[0]), (what, result.output)
        return
    for line in lines:
        assert line.startswith("-: ") or KEY_ERROR.match(line), (what, "not a message about the job", line)
        assert FIELD.search(line), (what, "a message naming no field", line)


CASES_LIST = cases()


@pytest.mark.parametrize("what,text,gang,tfjob", CASES_LIST, ids=[f"case-{n}" for n in range(CASES)])
def test_broken_job(what, text, gang, tfjob):
    checked = _invoke("validate", text, gang)
    _check_messages(what, checked, checked.output.splitlines(), tfjob)
    if checked.exit_code == 1:
        assert checked.output.strip(), (what, "exit 1 without saying why")

    rendered = _invoke("render", text, gang)
    _check_messages(what, rendered, rendered.stderr.splitlines(), tfjob)
    if rendered.exit_code == 0:
        objects = list(yaml.safe_load_all(rendered.stdout))  # none for a job the status says has ended
        assert all(o["kind"] and o["metadata"]["name"] for o in objects), what
    else:
        assert rendered.stdout == "" and rendered.stderr.strip(), (what, rendered.output)
    # validate checks all render checks and more: a job it passes renders.
    assert checked.exit_code == 1 or rendered.exit_code == 0, (what, rendered.stderr)


def test_the_mutations_break_jobs_in_many_ways():
    """The fuzz is worth its time: most cases are refused, for many different fields, and some pass."""
    refused, fields = 0, set()
    for what, text, gang, _ in CASES_LIST[:60]:
        result = _invoke("validate", text, gang)
        refused += result.exit_code == 1
        fields.update(m.group(1) for m in FIELD.finditer(result.output))
    assert 30 <= refused < 60
    assert fields >= {"metadata", "spec"}


def test_cases_are_the_same_on_every_run():
    assert cases() == CASES_LIST


# ----------------------------------------------------------------------- whatever the file holds
JOB_WITH_ENV = ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: j}\nspec:\n  tfReplicaSpecs:\n"
                "    Worker:\n      template:\n        spec:\n          containers:\n"
                "          - {name: tensorflow, image: x, env: [{name: D, value: %s}]}\n")
ENV_FIELD = "-: j: spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0].value"
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join(['*' + below] * 10)}]\n" for below, name in zip("abcdefg", "bcdefgh"))

# (description, the file, validate's exit code and output; render says the same on stderr)
FILES = [
    ("not YAML", "a: b: c", 1, "Error: -: not YAML: line 1, column 5: mapping values are not allowed in this context"),
    ("a tab", "a:\n\tb: c", 1, "Error: -: not YAML: line 2, column 1: found character that cannot start any token"),
    ("a NUL", "a: \x00", 1, "Error: -: not YAML: unacceptable character #x0000: control characters are not allowed"),
    ("nested deeper than the C parser survives", "[" * 100000 + "]" * 100000, 1,
     "Error: -: nested more than 100 levels deep"),
    ("aliases repeating each other", ALIAS_BOMB, 1,
     "Error: -: document 1: more than 250000 values (YAML aliases repeating each other?)"),
    ("an alias inside itself", JOB_WITH_ENV % "&a [*a]", 1,
     "Error: -: document 1: nested more than 100 levels deep (or a YAML alias inside itself)"),
    ("an integer of 5000 digits", "a: " + "9" * 5000, 1,
     "Error: -: not YAML: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; "
     "use sys.set_int_max_str_digits() to increase the limit"),
    ("nothing", "", 1, f"Error: {NOT_A_TFJOB}"),
    ("a null key", JOB_WITH_ENV.replace("    Worker:", "    null: {}\n    Worker:") % "x", 1,
     "Error: -: document 1: spec.tfReplicaSpecs: a key must be a string, not null"),
    ("a number key is text, as kubectl reads it", JOB_WITH_ENV.replace("    Worker:", "    7: {}\n    Worker:") % "x",
     1, "-: j: spec.tfReplicaSpecs.7: spec.tfReplicaSpecs keys must be replica types Chief, Master, PS, Worker or "
        "Evaluator, in any case (e.g. Worker, worker or WORKER); rename or remove the others"),
    ("a key given twice", JOB_WITH_ENV.replace("    Worker:", "    1: {}\n    '1': {}\n    Worker:") % "x", 1,
     "Error: -: document 1: spec.tfReplicaSpecs.1: the key is given twice"),
    ("a namespace that is no name", JOB_WITH_ENV.replace("{name: j}", '{name: j, namespace: "a\\nb: c"}') % "x", 1,
     "-: j: metadata.namespace: 'a\\nb: c' is not a namespace name (a DNS-1123 label): use lower-case letters, "
     "digits and '-', starting and ending with a letter or digit, at most 63 characters"),
    ("other kinds only", "kind: ConfigMap\n---\n[1, 2]\n---\nplain text\n", 1, f"Error: {NOT_A_TFJOB}"),
    ("a time unquoted stays a string, as kubectl reads it", JOB_WITH_ENV % "2024-05-01", 0, ""),
    ("null ports, as the apiserver would drop them", JOB_WITH_ENV.replace("env:", "ports: null, env:") % "2024-05-01",
     0, ""),
    ("a YAML set", JOB_WITH_ENV % "!!set {x}", 1,
     f"""{ENV_FIELD}: Invalid value: "{{'x'}}": must be of type string"""),
    ("YAML binary", JOB_WITH_ENV % "!!binary aGk=", 1,
     f"""{ENV_FIELD}: Invalid value: "b'hi'": must be of type string"""),
    ("a name with a line break and a direction mark",
     'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: "a\\nb\\u202e"}\nspec: {tfReplicaSpecs: '
     '{Worker: {template: {spec: {containers: [{name: tensorflow, image: x}]}}}}}\n', 1,
     '-: "a\\nb\\u202e": metadata.name: metadata.name must be a DNS-1035 label: at most 63 lower-case letters, '
     "digits or '-', starting with a letter and ending with a letter or digit"),
]


@pytest.mark.parametrize("desc,text,code,output", FILES, ids=[f[0] for f in FILES])
def test_whatever_the_file_holds(desc, text, code, output):
    checked = _invoke("validate", text, False)
    assert (checked.exit_code, checked.output) == (code, output + "\n" if output else "")
    rendered = CliRunner().invoke(cli, ["render", "-f", "-", "-o", "json"], input=text)
    assert rendered.exit_code == code and "Traceback" not in rendered.output
    assert rendered.stderr == (output + "\n" if code else "")
    if code == 0:  # rendered as JSON: every value is one JSON has
        pod = next(o for o in json.loads(rendered.stdout) if o["kind"] == "Pod")
        assert pod["spec"]["containers"][0]["env"][0] == {"name": "D", "value": "2024-05-01"}
        assert pod["spec"]["containers"][0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_a_file_that_is_not_text():
    result = CliRunner().invoke(cli, ["validate", "-f", "-"], input=b"\xff\xfe\x00garbage")
    assert (result.exit_code, result.output) == (
        1, "Error: -: not YAML: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte\n")


@pytest.mark.parametrize("command,broken", [("validate", "job_problems"), ("render", "first_start_objects")])
def test_the_last_resort_is_one_line(monkeypatch, command, broken):
    """Were a job to reach an exception no check foresaw: one line, exit code 1, no traceback."""
    from tfop.tools.offline import render as offline

    def fail(*_args, **_kwargs):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(offline, broken, fail)
    result = _invoke(command, yaml.safe_dump(built_jobs()[2]), False)
    assert (result.exit_code, result.output) == (
        1, "Error: internal error, please report it with the input: RuntimeError: a bug over two lines\n")
