"""The contention benchmark (e2e/bench/contention.py): its ledger on plain tables, and a 3-trial run on
the real local control plane (scheduler-plugins) with the gang-on invariants."""
from __future__ import annotations

import json
import random

import pytest

from e2e.bench import contention, contention_lib
from e2e.bench.contention_lib import (BIND_BURST_S, DEADLOCK_S, JobSpec, Ledger, draw_node_loss_trial, draw_preemption_trial,
                                draw_trial)
from e2e.pytest_plugin import own_cluster

NODES = {"n0": 2, "n1": 2}  # 4 GPUs
# A gang waiting for room is bound this soon after the room appears, at most. Coscheduling retries a
# rejected gang only when its PodGroup changes: tfop touches it when room it fits is freed (waits
# were up to 22 s when it touched only every 30 s); measured max 0.3 s over 10 trials.
CAPACITY_TO_BOUND_S = 5.0


def ledger(*jobs: JobSpec) -> Ledger:
    return Ledger(dict(NODES), {j.name: j for j in jobs}, t0=0.0)


def job(name: str, pods: int, gpus: int = 1) -> JobSpec:
    return JobSpec(name, pods, gpus, arrival_s=0.0, run_s=1.0)


# -- the ledger, on tables ------------------------------------------------------------------------

def test_a_gang_bound_at_once_holds_no_partial_gpus():
    led = ledger(job("a", 3))
    led.submit(0.0, "a")
    for i, node in enumerate(["n0", "n0", "n1"]):
        led.bind(1.0, f"a{i}", "a", node)
    for i in range(3):
        led.free(5.0 + i, f"a{i}")  # members ending one after another still count as a full gang
    led.end(7.0, "a", "Succeeded")
    m = led.metrics(8.0, "finished")
    assert m["partial_gpu_s"] == 0 and m["max_partial_gpus"] == 0
    assert m["arrival_to_bind_s"] == [1.0] and m["capacity_to_bind_s"] == []
    assert m["makespan_s"] == 7.0 and m["jct_mean_s"] == 7.0 and m["bind_spread_s"] == [0.0]


def test_partial_gpu_seconds_are_gpus_times_seconds_until_the_last_member_binds():
    led = ledger(job("a", 3, gpus=1))
    led.submit(0.0, "a")
    led.bind(1.0, "a0", "a", "n0")  # 1 GPU partial from 1 s
    led.bind(3.0, "a1", "a", "n0")  # 2 GPUs partial from 3 s
    led.bind(4.0, "a2", "a", "n1")  # whole: no partial from 4 s
    m = led.metrics(6.0, "finished")
    assert m["partial_gpu_s"] == pytest.approx(1 * 2 + 2 * 1)
    assert m["max_partial_gpus"] == 2
    assert m["timeline"] == [(0.0, 0), (1.0, 1), (3.0, 2), (4.0, 0), (6.0, 0)]
    assert m["bind_spread_s"] == [3.0]
    assert m["bind_burst_gpu_s"] == 0 and m["stranded_gpu_s"] == m["partial_gpu_s"]  # 3 s is no burst


def test_a_gang_bound_member_by_member_within_a_second_is_a_bind_burst():
    led = ledger(job("a", 2, gpus=2), job("b", 2))
    led.submit(0.0, "a")
    led.submit(0.0, "b")
    led.bind(1.0, "a0", "a", "n0")
    led.bind(1.05, "a1", "a", "n1")  # a: 2 GPUs for 0.05 s, whole within the burst
    m = led.metrics(2.0, "finished")
    assert m["partial_gpu_s"] == pytest.approx(0.1) and m["bind_burst_gpu_s"] == pytest.approx(0.1)
    assert m["stranded_gpu_s"] == pytest.approx(0.0)


def test_two_half_bound_gangs_are_a_deadlock_after_the_window():
    led = ledger(job("a", 3), job("b", 3))
    led.submit(0.0, "a")
    led.submit(0.0, "b")
    led.bind(1.0, "a0", "a", "n0")
    led.bind(1.0, "a1", "a", "n0")
    led.bind(1.0, "b0", "b", "n1")
    led.bind(1.0, "b1", "b", "n1")  # 4 of 4 GPUs held, neither job whole
    assert led.stuck(1.0 + DEADLOCK_S - 0.1) is None
    assert led.stuck(1.0 + DEADLOCK_S) == "deadlock"
    m = led.metrics(1.0 + DEADLOCK_S, "deadlock")
    assert m["deadlocks"] == 1 and m["makespan_s"] is None
    assert m["partial_gpu_s"] == pytest.approx(4 * DEADLOCK_S)


def test_waiting_without_partial_gpus_is_a_stall_not_a_deadlock():
    led = ledger(job("a", 5))  # never fits in 4 GPUs
    led.submit(0.0, "a")
    assert led.stuck(DEADLOCK_S) == "stall"


def test_capacity_to_bind_starts_when_the_waiting_gang_last_became_placeable():
    led = ledger(job("a", 4), job("b", 2, gpus=2))
    led.submit(0.0, "a")
    for i, node in enumerate(["n0", "n0", "n1", "n1"]):
        led.bind(0.5, f"a{i}", "a", node)
    led.submit(1.0, "b")  # 2 pods of 2 GPUs: placeable only once a frees both nodes
    led.free(4.0, "a0")
    led.free(4.0, "a1")  # n0 free: one pod of b fits, not two
    led.free(6.0, "a2")
    led.free(6.0, "a3")  # b placeable from 6 s
    led.end(6.0, "a", "Succeeded")
    led.bind(6.5, "b0", "b", "n0")
    led.bind(7.25, "b1", "b", "n1")
    m = led.metrics(8.0, "finished")
    assert m["capacity_to_bind_s"] == [pytest.approx(1.25)]
    assert m["arrival_to_bind_s"] == [0.5]
    assert m["partial_gpu_s"] == pytest.approx(2 * 0.75)  # b0's 2 GPUs until b1 bound


def test_a_gang_restart_is_a_restart_not_a_capacity_wait():
    led = ledger(job("a", 2))
    led.submit(0.0, "a")
    led.bind(1.0, "a0", "a", "n0")
    led.bind(1.0, "a1", "a", "n1")
    led.free(3.0, "a1")  # a member fails
    led.free(3.1, "a0")  # the operator deletes the rest
    led.bind(3.5, "a2", "a", "n0")
    led.bind(3.6, "a3", "a", "n1")
    m = led.metrics(4.0, "finished")
    assert m["restarts"] == 1 and m["capacity_to_bind_s"] == []
    assert m["restart_to_bind_s"] == [pytest.approx(0.6)]  # placeable again from the first free
    assert m["partial_gpu_s"] == pytest.approx(0.1)


def test_trials_are_drawn_from_the_seed_within_their_bounds():
    a = [draw_trial(random.Random(7), i, 8, member_failure=i == 2) for i in range(3)]
    b = [draw_trial(random.Random(7), i, 8, member_failure=i == 2) for i in range(3)]
    assert a == b
    for t in a:
        assert 3 <= t.nodes <= 6
        for j in t.jobs:
            assert j.pods >= 2 and j.gpus <= t.gpus_per_node and j.total_gpus <= t.gpus
        assert max(j.total_gpus for j in t.jobs) > t.gpus / 3 or t.gpus < 6
    assert [j.fail_member is not None for j in a[2].jobs].count(True) == 1


# -- the preemption scenario's ledger: gangs broken by preemption, on tables -----------------------

def test_a_gang_evicted_member_by_member_is_broken_until_its_last_member_is_gone():
    led = ledger(job("low", 4), job("high", 2))
    led.submit(0.0, "low")
    for i, node in enumerate(["n0", "n0", "n1", "n1"]):
        led.bind(0.5, f"l{i}", "low", node)
    led.submit(2.0, "high")
    led.free(3.0, "l0", lost=True)  # evicted: 3 members keep 3 GPUs the job cannot use
    led.free(5.0, "l1", lost=True)  # 2 keep 2 GPUs
    led.free(6.0, "l2", lost=True)
    led.free(6.0, "l3", lost=True)  # all gone: no longer broken
    m = led.metrics(8.0, "finished")
    assert m["broken_gpu_s"] == pytest.approx(3 * 2 + 2 * 1)
    assert m["broken_episodes"] == [("low", 3.0, 3.0, pytest.approx(8.0))]
    assert m["lost_pods"] == {"low": 4} and m["partial_gpu_s"] == 0  # broken is not partial


def test_a_gang_evicted_whole_within_a_second_is_broken_only_for_the_deletes():
    led = ledger(job("low", 2))
    led.submit(0.0, "low")
    led.bind(0.5, "l0", "low", "n0")
    led.bind(0.5, "l1", "low", "n1")
    led.free(3.0, "l0", lost=True)
    led.free(3.02, "l1", lost=True)
    m = led.metrics(4.0, "finished")
    assert m["broken_gpu_s"] == pytest.approx(0.02)
    assert contention_lib.broken_beyond_burst(m) == 0


def test_members_ending_succeeded_or_after_the_job_ended_break_nothing():
    led = ledger(job("a", 2), job("b", 2))
    for name in ("a", "b"):
        led.submit(0.0, name)
        led.bind(0.5, f"{name}0", name, "n0")
        led.bind(0.5, f"{name}1", name, "n1")
    led.free(3.0, "a0")  # Succeeded
    led.free(4.0, "a1")
    led.end(4.0, "a", "Succeeded")
    led.end(5.0, "b", "Succeeded")
    led.free(5.5, "b0", lost=True)  # cleaned up after its job ended
    m = led.metrics(6.0, "finished")
    assert m["broken_gpu_s"] == 0 and m["broken_episodes"] == [] and m["lost_pods"] == {}


def test_a_broken_gang_made_whole_again_is_a_restart_and_survivors_stuck_are_a_deadlock():
    led = ledger(job("low", 2), job("other", 2))
    led.submit(0.0, "low")
    led.bind(0.5, "l0", "low", "n0")
    led.bind(0.5, "l1", "low", "n1")
    led.free(1.0, "l1", lost=True)  # one member evicted, its replacement waits
    assert led.stuck(1.0 + DEADLOCK_S) == "deadlock"  # a survivor has held its GPU all along
    led.bind(2.0, "l2", "low", "n1")  # whole again
    m = led.metrics(3.0, "finished")
    assert m["broken_gpu_s"] == pytest.approx(1.0) and m["restarts"] == 1
    assert m["broken_episodes"] == [("low", 1.0, 1.0, pytest.approx(1.0))]


def test_preemption_trials_fill_the_cluster_with_low_gangs_and_need_preemption_for_the_high_one():
    a = [draw_preemption_trial(random.Random(1), i) for i in range(10)]
    assert a == [draw_preemption_trial(random.Random(1), i) for i in range(10)]
    rng = random.Random(1)
    for i in range(20):
        t = draw_preemption_trial(rng, i)
        *lows, high = t.jobs
        assert 3 <= t.nodes <= 6 and high.priority == contention_lib.HIGH_PRIORITY
        assert {j.priority for j in lows} == {contention_lib.LOW_PRIORITY}
        assert sum(j.total_gpus for j in lows) == t.gpus  # full: the high gang needs preemption
        assert len({j.gpus for j in lows}) == 1 and all(j.pods >= 2 for j in t.jobs)
        assert high.gpus >= lows[0].gpus and high.pods <= max(2, -(-t.gpus // (2 * high.gpus)))  # up to half
        assert high.pods <= t.nodes * (t.gpus_per_node // high.gpus)


# -- the node-loss scenario's ledger: gangs that cannot progress, on tables ------------------------

NODE_LOSS_NODES = {"n0": 2, "n1": 2, "n2": 2}  # 6 GPUs: room for a gang of 2 x 2 elsewhere


def node_loss_ledger(*jobs: JobSpec) -> Ledger:
    return Ledger(dict(NODE_LOSS_NODES), {j.name: j for j in jobs}, t0=0.0)


def gang_on_two_nodes(led: Ledger, name: str = "a") -> None:
    led.submit(0.0, name)
    led.bind(0.5, f"{name}0", name, "n0")
    led.bind(0.5, f"{name}1", name, "n1")


def test_survivors_of_a_gang_with_a_member_on_a_lost_node_are_stuck_until_deleted():
    led = node_loss_ledger(job("a", 2, gpus=2))
    gang_on_two_nodes(led)
    led.lose_node(10.0, "n1")  # a1 is on it: a0's 2 GPUs on n0 are held by a gang that cannot progress
    assert led.fits(2, 2) is False  # a lost node's free GPUs place nothing
    led.free(60.0, "a0", lost=True)  # the operator deletes the survivor; a1 stays Terminating
    m = led.metrics(130.0, "finished")
    assert m["stuck_gpu_s"] == pytest.approx(2 * 50)  # the lost node's own GPUs do not count
    assert m["stuck_episodes"] == [("a", 10.0, 50.0, pytest.approx(100.0))]
    assert m["lost_nodes"] == {"n1": 10.0}
    assert m["stuck_timeline"] == [(0.0, 0), (10.0, 2), (60.0, 0), (130.0, 0)]


def test_a_survivor_kept_until_the_lost_member_is_gone_stays_stuck_while_broken_then_whole_again():
    led = node_loss_ledger(job("a", 2, gpus=2))
    gang_on_two_nodes(led)
    led.lose_node(10.0, "n1")
    led.free(130.0, "a1", lost=True)  # PodGC releases it after the admin's taint: a is broken now
    led.free(131.0, "a0", lost=True)  # the operator restarts the gang
    led.bind(132.0, "a2", "a", "n0")
    led.bind(132.0, "a3", "a", "n2")  # whole again elsewhere
    led.end(140.0, "a", "Succeeded")
    m = led.metrics(141.0, "finished")
    assert m["stuck_gpu_s"] == pytest.approx(2 * 121)  # lost-node member, then broken: one episode
    assert m["stuck_episodes"] == [("a", 10.0, 121.0, pytest.approx(242.0))]
    assert m["broken_gpu_s"] == pytest.approx(2 * 1) and m["restarts"] == 1


def test_a_gang_bound_to_a_lost_node_after_the_loss_is_stuck_and_others_are_not():
    led = node_loss_ledger(job("a", 2), job("b", 2), job("c", 2))
    led.submit(0.0, "c")
    led.bind(0.5, "c0", "c", "n0")
    led.bind(0.5, "c1", "c", "n0")  # untouched by the loss
    led.lose_node(1.0, "n2")
    led.submit(2.0, "b")
    led.bind(3.0, "b0", "b", "n1")
    led.bind(3.0, "b1", "b", "n2")  # placed there before the node is NotReady: b cannot run
    m = led.metrics(13.0, "timeout")
    assert m["stuck_gpu_s"] == pytest.approx(1 * 10)  # b0's GPU
    assert [e[0] for e in m["stuck_episodes"]] == ["b"]


def test_a_job_that_ended_holds_nothing_stuck():
    led = node_loss_ledger(job("a", 2))
    gang_on_two_nodes(led)
    led.lose_node(1.0, "n1")
    led.end(5.0, "a", "Failed")
    m = led.metrics(9.0, "finished")
    assert m["stuck_gpu_s"] == pytest.approx(4.0) and m["stuck_episodes"] == [("a", 1.0, 4.0, pytest.approx(4.0))]


def test_the_wait_a_lost_node_imposes_is_no_stall_until_it_is_released():
    led = node_loss_ledger(job("a", 2))
    gang_on_two_nodes(led)
    led.lose_node(1.0, "n1")
    led.free(2.0, "a0", lost=True)  # a1 waits on the lost node until it is released
    assert led.stuck(100.0) == "deadlock"  # so the run asks only once the loss is over (since=)
    assert led.stuck(100.0, since=80.0) is None
    assert led.stuck(110.0, since=80.0) == "deadlock"


def test_node_loss_trials_are_the_stream_trials_with_a_spare_node_and_a_seeded_loss():
    args = type("Args", (), {"seed": 1, "trials": 10, "jobs": 8, "failure_every": 3})()
    stream = contention.draw_trials(args)
    args.scenario = "node-loss"
    lossy = contention.draw_trials(args)
    assert lossy == contention.draw_trials(args)
    for s, t in zip(stream, lossy):
        assert (t.index, t.nodes, t.gpus_per_node) == (s.index, s.nodes, s.gpus_per_node) and t.spare_nodes == 1
        assert [(j.name, j.pods, j.gpus, j.arrival_s, j.run_s) for j in t.jobs] == \
            [(j.name, j.pods, j.gpus, j.arrival_s, j.run_s) for j in s.jobs]
        assert all(j.fail_member is None for j in t.jobs)
        assert t.node_loss.job == t.jobs[len(t.jobs) // 3].name
        assert 0.25 <= t.node_loss.after_frac <= 0.5 and 0 <= t.node_loss.pick < 1
    assert len({t.node_loss.pick for t in lossy}) == len(lossy)  # drawn per trial
    assert draw_node_loss_trial(stream[0], seed=2).node_loss != lossy[0].node_loss


def node_loss_run(variant_marks: dict, stuck: float, outcome: str = "finished") -> dict:
    return {"outcome": outcome, "stuck_gpu_s": stuck, "stuck_episodes": [("t0-j01", 5.0, 10.0, stuck)],
            "stuck_timeline": [(0.0, 0), (5.0, 2), (5.0 + stuck / 2, 0), (200.0, 0)],  # 2 GPUs from the loss at 5 s
            "stranded_gpu_s": 0.0, "jobs_succeeded": 3, "jobs": 3, "deadlocks": 0, "makespan_s": 150.0,
            "node_loss": {"job": "t0-j01", "node": "tfop-gpu-1", "lost": True, "victim_pods_on_node": 1, "at_s": 5.0,
                          "loss_to": {"not_ready": 45.0, "admin_taint": 105.0},
                          "hit": {"t0-j01": variant_marks, "t0-j02": {"whole_again": 130.0}},
                          "job_status": {"t0-j01": {"restart_count": 0, "disruption_count": 1}},
                          "tfjob_warnings": {"NodeLost": 1}}}


def test_node_loss_rows_and_summary_from_plain_runs():
    trial = {"index": 0, "nodes": 3, "spare_nodes": 1, "gpus_per_node": 2,
             "jobs": [{"name": "t0-j01", "pods": 2, "gpus": 2}],
             "runs": {"tfop": node_loss_run({"survivors_deleted": 46.0, "lost_pods_gone": 120.0,
                                             "whole_again": 121.0}, 92.0),
                      "baseline": node_loss_run({"survivors_deleted": 120.5, "lost_pods_gone": 120.0,
                                                 "whole_again": 122.0}, 241.0)}}
    row = contention_lib.node_loss_run_row(trial, "tfop")
    # stuck 2 GPUs from the loss for 46 s; seen NotReady 45 s after the loss: 1 s x 2 GPUs after it
    assert row[:10] == ["0", "3+1x2", "2x2", "tfop", "finished", "1/2", "1", "92.0", "2.0", "92.0"]
    assert row[10:16] == ["45.0", "46.0", "105.0", "120.0", "121.0", "130.0"]
    assert row[-3:] == ["0 / 1", "1", "0"]
    summary = contention_lib.node_loss_summary_row("scheduler-plugins", [trial, trial], "baseline", "cec571e")
    assert summary[:9] == ["scheduler-plugins", "baseline", "cec571e", "2", "2/2", "482.0", "302.0",
                           "241.0 (241.0)", "120.5 (120.5)"]  # 2 x (120.5 - 45) x 2 GPUs after NotReady
    assert summary[9:12] == ["122.0 / 122.0 / 122.0", "2/2", "6/6"]


def test_warnings_counted_over_a_namespace_are_told_apart_per_run():
    runs = lambda n: {"tfop": {"node_loss": {"tfjob_warnings": {"NodeLost": n}}}}  # noqa: E731
    cumulative = [{"runs": runs(3)}, {"runs": runs(4)}, {"runs": runs(6)}]
    own = contention.per_run_warnings(cumulative)
    assert [t["runs"]["tfop"]["node_loss"]["tfjob_warnings"]["NodeLost"] for t in own] == [3, 1, 2]
    assert cumulative[2]["runs"]["tfop"]["node_loss"]["tfjob_warnings"]["NodeLost"] == 6  # not changed


# -- the tool, end to end -------------------------------------------------------------------------

@pytest.mark.cluster
def test_contention_smoke(tmp_path):
    with own_cluster(tmp_path / "cluster", ["default", "coscheduling"], gpu_nodes=0) as cluster:
        rc = contention.main(["--trials", "3", "--jobs", "5", "--scheduler", "scheduler-plugins", "--gang", "both",
                              "--seed", "3", "--dir", str(cluster.dir), "--out", str(tmp_path / "out")])
    assert rc == 0
    data = json.loads((tmp_path / "out" / "contention-scheduler-plugins.json").read_text())
    trials = data["trials"]
    assert len(trials) == 3 and trials[2]["member_failure"]
    for trial in trials:
        on, off = trial["runs"]["on"], trial["runs"]["off"]
        assert on["outcome"] == "finished", on
        # Gang on: no GPU held by an incomplete gang beyond the bind burst of one scheduling decision
        # (a gang's Binding POSTs land a few ms apart; partial_gpu_s counts those ms, see CONTENTION.md).
        assert on["deadlocks"] == 0 and on["stranded_gpu_s"] == 0, on
        assert max(on["bind_spread_s"]) <= BIND_BURST_S, on["bind_spread_s"]
        assert max(on["capacity_to_bind_s"], default=0) <= CAPACITY_TO_BOUND_S, on["capacity_to_bind_s"]
        assert on["jobs_succeeded"] == on["jobs"] == 5
        assert on["scheduler_names"] == ["scheduler-plugins-scheduler"]
        assert off["scheduler_names"] == ["scheduler-plugins-scheduler"]
        assert off["outcome"] in ("finished", "deadlock", "stall"), off
    failure = trials[2]["runs"]["on"]["member_failure"]
    assert failure["injected"] and failure["restart_count"] == 1 and failure["outcome"] == "Succeeded", failure
    out = tmp_path / "out"
    assert "| scheduler-plugins | on |" in (out / "contention-scheduler-plugins.md").read_text()
    assert (out / "contention-scheduler-plugins.png").stat().st_size > 0
