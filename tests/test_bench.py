"""The benchmark report: case folders in, comparisons, bench.json, plots and a table out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_workers
from training import bench, machine
from training.cli import main

#: 2026-12-05 10:09 UTC: when the fixture's cases start, unless a test says otherwise.
START = 1_796_465_340


def _case(
    root: Path,
    name: str,
    rate: float,
    accuracies: list[float],
    model: str = "mnist_wide_mlp",
    batch: int = 64,
    workers: int = 1,
    strategy: str = "multi_worker_mirrored",
    dtype: str = "float32",
    started: float | None = START,
    dataset: str = "mnist_5k-0123456789ab",
) -> None:
    run = root / name
    run.mkdir(parents=True)
    if started is not None:
        (run / "run.json").write_text(json.dumps({"run_id": name, "started": started}))
    global_batch = batch * workers
    (run / "metrics.json").write_text(
        json.dumps(
            {
                "model": model,
                "dataset_id": dataset,
                "strategy": strategy,
                "steady_examples_per_second": rate,
                "global_batch_size": global_batch,
                "batch_size_per_worker": batch,
                "test_accuracy": accuracies[-1],
                "train_seconds": 10.0 * len(accuracies),
                "config": {"all_reduce_dtype": dtype},
            }
        )
    )
    events = [
        {"event": "epoch", "epoch": i + 1, "seconds": 10.0, "test_accuracy": a}
        for i, a in enumerate(accuracies)
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_time_to_accuracy_sums_the_epochs_until_the_target() -> None:
    epochs = [
        {"epoch": 1, "seconds": 3.0, "test_accuracy": 0.90},
        {"epoch": 2, "seconds": 2.0, "test_accuracy": 0.96},
        {"epoch": 3, "seconds": 2.0, "test_accuracy": 0.97},
    ]
    assert bench.time_to_accuracy(epochs, 0.95) == (5.0, 2)
    assert bench.time_to_accuracy(epochs, 0.99) is None
    assert bench.time_to_accuracy([{"epoch": 1, "seconds": 1.0}], 0.5) is None


def test_ring_bound_is_the_bytes_each_node_must_send_over_its_link() -> None:
    # Two nodes send the whole gradient once: 2.68 MB at 100 Mb/s.
    assert bench.ring_lower_bound(2_678_824, 2, 100) == pytest.approx(0.2143, abs=1e-4)
    # Four nodes send 1.5 times the gradient.
    assert bench.ring_lower_bound(1_000_000, 4, 1000) == pytest.approx(0.012)
    with pytest.raises(ValueError, match="2 or more nodes"):
        bench.ring_lower_bound(1, 1, 100)


def _machine(root: Path, cpu: str = "Intel(R) Xeon(R) CPU @ 2.20GHz") -> None:
    """The bench's machine.json, as make bench records it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "machine.json").write_text(
        json.dumps(
            {
                "cpu_model": cpu,
                "cores": 2,
                "memory_bytes": 8 * 2**30,
                "tensorflow_version": "2.21.0",
                "python_version": "3.11.7",
                "system": "Linux 6.1.0",
                "architecture": "x86_64",
            }
        )
    )


def _full_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bench folder of every kind of case, all-reduce timing and step trace, and its machine."""
    monkeypatch.setattr(bench, "_weights", lambda name: 669_706)
    _machine(tmp_path)
    _case(tmp_path, "mnist_wide_mlp-1node-mwms-1000mbit", 1000.0, [0.93, 0.95, 0.96])
    # 2 nodes at 100 Mb/s: 128 examples a step in 0.3 s instead of 64 in 0.064 s.
    _case(tmp_path, "mnist_wide_mlp-2node-mwms-100mbit", 128 / 0.3, [0.9, 0.94], workers=2)
    _case(tmp_path, "mnist_wide_mlp-2node-mwms-1000mbit", 1800.0, [0.92, 0.95], workers=2)
    _case(
        tmp_path,
        "mnist_wide_mlp-2node-ps-1000mbit",
        900.0,
        [0.91, 0.94],
        workers=2,
        strategy="parameter_server",
    )
    # float16 at 100 Mb/s: the all-reduce of half the bytes, 0.15 s instead of 0.236 s.
    _case(
        tmp_path,
        "mnist_wide_mlp-2node-mwms-100mbit-fp16",
        128 / 0.214,
        [0.9, 0.95],
        workers=2,
        dtype="float16",
    )
    _case(tmp_path, "mnist_wide_mlp-local-2workers", 800.0, [0.95], workers=2)
    _case(tmp_path, "mnist_wide_mlp-local-1worker", 1000.0, [0.95], batch=128)
    (tmp_path / "not-a-case").mkdir()
    # The all-reduce alone at 100 Mb/s: 0.22 s for the model's 669,706 floats.
    (tmp_path / "all_reduce-100mbit.json").write_text(
        json.dumps(
            [
                {"model": "", "floats": 1, "bytes": 4, "median_seconds": 0.001},
                {"model": "x", "floats": 669_706, "bytes": 2_678_824, "median_seconds": 0.22},
            ]
        )
    )
    # Both nodes traced alone at once: each slow (20 ms steps) in its own half of 2 s.
    for host, slow_half in (("bench1", 0), ("bench2", 1)):
        (tmp_path / f"steps-mnist_wide_mlp-{host}.json").write_text(
            json.dumps({"model": "mnist_wide_mlp", "starts": _halves(slow_half)})
        )


def test_report_compares_the_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_bench(tmp_path, monkeypatch)
    out = bench.report(tmp_path, target=0.95)

    assert len(out["cases"]) == 7
    by_link = {r["link_mbit"]: r for r in out["scaling"]}
    assert by_link[1000]["speedup"] == pytest.approx(1.8)
    assert by_link[1000]["efficiency"] == pytest.approx(0.9)
    assert by_link[1000]["seconds_to_target"] == 20.0
    assert by_link[1000]["one_node_seconds_to_target"] == 20.0
    slow = by_link[100]
    assert slow["all_reduce_seconds_per_step"] == pytest.approx(0.3 - 0.064)
    assert slow["ring_bound_seconds"] == pytest.approx(0.2143, abs=1e-4)
    assert slow["all_reduce_over_bound"] == pytest.approx(1.10)
    assert slow["seconds_to_target"] is None
    # One node's 0.064 s step plus the all-reduce's 0.22 s alone: at most 0.225.
    assert slow["all_reduce_alone_seconds"] == 0.22
    assert slow["ceiling_efficiency"] == pytest.approx(0.064 / 0.284, abs=1e-3)
    assert "ceiling_efficiency" not in by_link[1000]  # not timed at 1000 Mb/s
    # In lockstep every step takes 20 ms: 100 steps in 2 s against 150 of each node's own.
    assert out["lockstep"]["mnist_wide_mlp"]["pace"] == pytest.approx(2 / 3, abs=0.01)
    assert (
        slow["lockstep_pace"]
        == by_link[1000]["lockstep_pace"]
        == out["lockstep"]["mnist_wide_mlp"]["pace"]
    )
    pace = slow["lockstep_pace"]
    assert slow["predicted_efficiency"] == pytest.approx(0.064 / (0.064 / pace + 0.22), abs=1e-3)
    assert "predicted_efficiency" not in by_link[1000]  # no all-reduce alone to add
    assert out["strategies"][0]["ratio"] == pytest.approx(0.5)
    assert out["local"][0]["ratio"] == pytest.approx(0.8)
    assert len(out["scaling"]) == 2  # the float16 case is not a scaling point
    (half,) = out["float16"]
    assert half["ratio"] == pytest.approx(0.3 / 0.214, abs=1e-3)
    assert half["float16_test_accuracy"] == 0.95 and half["float32_test_accuracy"] == 0.94
    assert half["gradient_bytes"] == 669_706 * 2
    assert half["all_reduce_seconds_per_step"] == pytest.approx(0.214 - 0.064)
    assert half["all_reduce_over_bound"] == pytest.approx(0.15 / 0.10715, abs=0.01)
    assert json.loads((tmp_path / "bench.json").read_text()) == out
    assert {p for p in out["plots"]} == {"speedup.png", "efficiency.png"}
    assert all((tmp_path / p).stat().st_size > 0 for p in out["plots"])

    text = bench.table(out)
    assert "efficiency 0.90" in text
    assert "ring lower bound 214.3 ms, 1.10x)" in text
    # The 100 Mb/s row: 64 examples a step at 1000 examples/s on 1 node, 0.3 s a step on 2.
    assert "a step computes 64.0 ms on 1 node; the all-reduce adds 236.0 ms" in text
    assert "float16 all-reduce against float32" in text and "1.40x" in text
    assert "not reached" in text
    assert "alone, in lockstep, it takes 220.0 ms, which leaves at most 0.23" in text
    assert "the other 16.0 ms: the runtime's extra work on the core and the wait" in text
    assert f"in lockstep they keep {pace:.2f} of their own pace" in text
    assert (
        f"that and the all-reduce alone predict efficiency {slow['predicted_efficiency']:.2f} "
        f"(measured {slow['efficiency']:.2f})" in text
    )
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_results_file_is_named_by_the_benchs_own_date_and_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _full_bench(tmp_path, monkeypatch)
    # Not the machine the report runs on: the one machine.json recorded.
    monkeypatch.setattr(machine, "machine_facts", lambda: {"cpu_model": "Other CPU"})
    # The earliest case dates the bench, though another started after midnight.
    _case(tmp_path, "mnist_cnn-1node-mwms-1000mbit", 900.0, [0.95], started=START - 3600)
    _case(
        tmp_path, "mnist_cnn-2node-mwms-1000mbit", 1700.0, [0.95], workers=2, started=START + 86400
    )
    docs = tmp_path / "docs" / "benchmarks"
    assert main(["bench", "--dir", str(tmp_path), "--docs", str(docs)]) == 0

    (results,) = docs.glob("2*.md")
    assert results.name == "2026-12-05-intel-xeon-cpu-2-20ghz.md"
    text = results.read_text()
    assert text.startswith("# Benchmark of 2026-12-05 on Intel(R) Xeon(R) CPU @ 2.20GHz\n")
    assert f"`python -m training bench --dir runs/{tmp_path.name} --docs docs/benchmarks`" in text
    assert "started 2026-12-05 09:09 UTC" in text
    assert "- CPU: Intel(R) Xeon(R) CPU @ 2.20GHz, 2 logical cores" in text
    assert "| `mnist_wide_mlp`, 2 nodes, 100 Mb/s, float16 all-reduce | 598.1 | 214.0 |" in text
    assert "efficiency 0.90" in text and "(ring lower bound 214.3 ms, 1.10x)" in text


def test_a_bench_without_machine_json_names_the_machine_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(machine, "machine_facts", lambda: {"cpu_model": "AMD EPYC 7B13"})
    _case(tmp_path, "mnist_cnn-1node-mwms-1000mbit", 900.0, [0.95], model="mnist_cnn")
    monkeypatch.setattr(bench, "_weights", lambda name: 34_826)
    out = bench.report(tmp_path)
    assert bench.results_name(out) == "2026-12-05-amd-epyc-7b13.md"
    assert "the bench folder has no machine.json" in bench.markdown(out)


def test_a_bench_no_case_of_which_says_when_it_started_is_not_dated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "_weights", lambda name: 34_826)
    _case(tmp_path, "mnist_cnn-1node-mwms-1000mbit", 900.0, [0.95], model="mnist_cnn", started=None)
    assert main(["bench", "--dir", str(tmp_path), "--docs", str(tmp_path / "docs")]) == 2
    assert "cannot date bench" in capsys.readouterr().err
    # Without run.json, the chief's metrics say when the run finished and how long it took.
    metrics = tmp_path / "mnist_cnn-1node-mwms-1000mbit" / "metrics.json"
    finished = {"finished": "2026-12-06T00:00:30+00:00", "wall_seconds": 60.0}
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), **finished}))
    assert bench.report(tmp_path)["started"] == "2026-12-05T23:59:30Z"


def test_the_report_run_twice_writes_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench_dir, docs = tmp_path / "bench-20261205T100900Z", tmp_path / "docs"
    _full_bench(bench_dir, monkeypatch)
    argv = ["bench", "--dir", str(bench_dir), "--docs", str(docs)]
    assert main(argv) == 0
    first = {p.name: p.read_bytes() for p in docs.iterdir()}
    assert main(argv) == 0
    assert {p.name: p.read_bytes() for p in docs.iterdir()} == first
    assert sorted(first) == ["2026-12-05-intel-xeon-cpu-2-20ghz.md", "README.md"]


def test_the_index_lists_the_results_newest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    assert "No results yet" in bench.index_markdown(docs)
    (docs / "2027-01-10-amd-epyc.md").write_text("# Benchmark of 2027-01-10 on AMD EPYC\n")
    (docs / "2026-11-30-cortex-a76.md").write_text("no title\n")
    (docs / "notes.md").write_text("# not a results file\n")
    _full_bench(tmp_path / "bench", monkeypatch)
    bench.write_docs(bench.report(tmp_path / "bench"), docs)

    index = (docs / "README.md").read_text()
    assert "generated by `python -m training bench" in index.lower()
    rows = [line for line in index.splitlines() if line.startswith("| 20")]
    assert rows == [
        "| 2027-01-10 | AMD EPYC | [2027-01-10-amd-epyc.md](2027-01-10-amd-epyc.md) |",
        "| 2026-12-05 | Intel(R) Xeon(R) CPU @ 2.20GHz | "
        "[2026-12-05-intel-xeon-cpu-2-20ghz.md](2026-12-05-intel-xeon-cpu-2-20ghz.md) |",
        "| 2026-11-30 | cortex-a76 | [2026-11-30-cortex-a76.md](2026-11-30-cortex-a76.md) |",
    ]


def test_a_target_not_met_says_not_met(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "_weights", lambda name: 34_826)
    _machine(tmp_path)
    _case(tmp_path, "mnist_cnn-local-1worker", 1000.0, [0.95], model="mnist_cnn", batch=128)
    _case(tmp_path, "mnist_cnn-local-2workers", 700.0, [0.95], model="mnist_cnn", workers=2)
    out = bench.report(tmp_path)

    by_target = {t["target"]: t for t in bench.check_targets(out)}
    local = by_target["2 local workers at least 0.8x one process on the same cores"]
    assert (local["met"], local["measured"]) == (
        False,
        "0.70x (mnist_cnn: 700 against 1000 examples/s)",
    )
    # The bench measured no nodes and no own data: those targets are neither met nor failed.
    assert [t["met"] for t in by_target.values()].count(None) == 7
    text = bench.markdown(out)
    assert (
        "| 2 local workers at least 0.8x one process on the same cores "
        "| 0.70x (`mnist_cnn`: 700 against 1000 examples/s) | not met |" in text
    )
    assert text.count("| not measured |") == 7
    assert "Own data" not in text  # no data.json, no pipeline-<node>.json
    assert "  not met      2 local workers at least 0.8x" in bench.table(out)


def _chief_log(root: Path, name: str, cpu_and_wall: list[tuple[float, float]]) -> None:
    """The chief's task log of case ``name``: one epoch per (CPU seconds, wall seconds)."""
    log = root / name / "tasks" / "worker-0.jsonl"
    log.parent.mkdir()
    events = [{"event": "start", "restarts": 0}] + [
        {"event": "epoch", "epoch": i + 1, "seconds": wall, "cpu_seconds": cpu}
        for i, (cpu, wall) in enumerate(cpu_and_wall)
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    metrics = root / name / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "steps_per_epoch": 10}))


def test_report_splits_a_step_into_the_cores_work_and_its_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "_weights", lambda name: 81_000)
    one, two = "mnist_vgg-1node-mwms-1000mbit", "mnist_vgg-2node-mwms-1000mbit"
    # 1 node: 64 examples in 60 ms; 2 nodes: 128 in 70 ms.
    _case(tmp_path, one, 64 / 0.060, [0.95], model="mnist_vgg")
    _case(tmp_path, two, 128 / 0.070, [0.95], model="mnist_vgg", workers=2)
    # The first epoch (tracing, the cluster forming) is left out of the figures.
    _chief_log(tmp_path, one, [(5.0, 5.0), (0.58, 0.6), (0.58, 0.6)])
    _chief_log(tmp_path, two, [(9.0, 9.0), (0.62, 0.7), (0.62, 0.7)])
    # A case whose task logs carry no CPU time reads as such, not as zero.
    _case(tmp_path, "mnist_vgg-2node-mwms-100mbit", 128 / 0.1, [0.95], model="mnist_vgg", workers=2)

    out = bench.report(tmp_path)

    by_link = {r["link_mbit"]: r for r in out["scaling"]}
    row = by_link[1000]
    assert row["one_node_cpu_seconds_per_step"] == pytest.approx(0.058)
    assert row["cpu_seconds_per_step"] == pytest.approx(0.062)
    assert row["cpu_busy"] == pytest.approx(0.886, abs=1e-3)
    assert row["idle_seconds_per_step"] == pytest.approx(0.008)
    assert "cpu_seconds_per_step" not in by_link[100]
    text = bench.table(out)
    assert "the chief's CPU a step: 58.0 ms on 1 node, 62.0 ms on 2; its core busy 89%," in text
    assert "idle 8.0 ms a step waiting for the all-reduce and the other nodes" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def _halves(slow_half: int, seconds: float = 2.0) -> list[float]:
    """Step starts over ``seconds``: 20 ms steps in half ``slow_half`` (0 or 1), else 10 ms."""
    starts, now = [100.0], 100.0
    while now < 100.0 + seconds:
        in_slow_half = (now - 100.0 < seconds / 2) == (slow_half == 0)
        now = round(now + (0.020 if in_slow_half else 0.010), 6)
        starts.append(now)
    return starts


def test_nodes_whose_steps_never_differ_keep_their_pace_in_lockstep() -> None:
    a = [10.0 + 0.01 * k for k in range(201)]
    b = [10.004 + 0.01 * k for k in range(201)]  # started 4 ms later, the same 10 ms steps
    pace = bench.lockstep_pace([a, b])
    assert pace["pace"] == pytest.approx(1.0, abs=0.01)
    assert pace["own_steps_per_second"] == pytest.approx(100, abs=1)


def test_nodes_slow_in_turn_wait_for_each_other_in_lockstep() -> None:
    # Each node alone: 50 steps of 20 ms, then 100 of 10 ms, 75 a second over 2 s. In lockstep
    # the slow one sets every step: 20 ms, 50 a second, 2/3 of their own pace.
    pace = bench.lockstep_pace([_halves(0), _halves(1)])
    assert pace["own_steps_per_second"] == pytest.approx(75, abs=1)
    assert pace["lockstep_steps_per_second"] == pytest.approx(50, abs=1)
    assert pace["pace"] == pytest.approx(2 / 3, abs=0.01)


def test_lockstep_needs_two_overlapping_traces() -> None:
    with pytest.raises(ValueError, match="two or more traces"):
        bench.lockstep_pace([[0.0, 1.0]])
    with pytest.raises(ValueError, match="do not overlap"):
        bench.lockstep_pace([[0.0, 1.0], [2.0, 3.0]])


def test_a_model_traced_on_one_node_only_has_no_lockstep_pace(tmp_path: Path) -> None:
    (tmp_path / "steps-mnist_cnn-bench1.json").write_text(json.dumps({"starts": _halves(0)}))
    assert bench.read_step_traces(tmp_path) == {}


def test_step_bench_refuses_bad_input_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["step-bench", "--models", "mnist_cnm", "--data-dir", str(tmp_path)]) == 2
    assert "model 'mnist_cnm' is unknown" in capsys.readouterr().err
    assert main(["step-bench", "--models", "mnist_cnn", "--data-dir", str(tmp_path)]) == 2
    assert "dataset mnist_5k is not prepared in" in capsys.readouterr().err
    assert main(["step-bench", "--models", ",", "--data-dir", str(tmp_path)]) == 2
    assert "--models is empty" in capsys.readouterr().err
    argv = ["step-bench", "--models", "mnist_cnn", "--data-dir", str(tmp_path)]
    assert main([*argv, "--output-dir", str(tmp_path)]) == 2
    assert "--output-dir needs --host" in capsys.readouterr().err


def test_an_empty_benchmark_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--dir", str(tmp_path)]) == 2
    assert "holds no finished case" in capsys.readouterr().err
    assert main(["bench", "--dir", str(tmp_path / "missing")]) == 2
    assert "run make bench first" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["1.5", "-1", "0", "nan", "high"])
def test_a_target_that_is_not_an_accuracy_is_refused_before_the_report_is_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    _case(tmp_path, "mnist_cnn-1node-mwms-1000mbit", 1000.0, [0.95], model="mnist_cnn")
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--dir", str(tmp_path), "--target", target])
    assert exit_info.value.code == 2
    assert "give a fraction above 0 and at most 1, such as 0.95" in capsys.readouterr().err
    assert not (tmp_path / "bench.json").exists()


def test_all_reduce_bench_needs_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["all-reduce-bench"]) == 2
    assert "needs TF_CONFIG of a multi_worker_mirrored cluster" in capsys.readouterr().err


def test_all_reduce_bench_times_each_size_on_every_worker() -> None:
    # Two workers on loopback, as make bench runs it on its two nodes.
    script = (
        "import json; from training.bench import all_reduce_bench; "
        "print(json.dumps(all_reduce_bench(['mnist_cnn'], calls=5, seconds=2.0)))"
    )
    for line in run_workers(script):
        rows = json.loads(line)
        assert [(r["model"], r["bytes"], r["calls"]) for r in rows] == [
            ("", 4, 5),
            ("mnist_cnn", 34_826 * 4, 5),
        ]
        assert all(0 < r["p10_seconds"] <= r["median_seconds"] <= r["p90_seconds"] for r in rows)


def test_the_cpu_is_named_from_cpuinfo_and_slugged_for_a_file_name() -> None:
    x86 = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
    )
    assert machine.cpu_model(x86) == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    assert machine.cpu_slug(machine.cpu_model(x86)) == "intel-xeon-cpu-2-20ghz"
    # A Raspberry Pi's arm64 kernel names the board, not the CPU.
    pi = "processor\t: 0\nBogoMIPS\t: 108.00\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
    assert machine.cpu_model(pi) == "Raspberry Pi 4 Model B Rev 1.4"
    assert machine.cpu_slug("AMD EPYC 7B13 64-Core Processor") == "amd-epyc-7b13-64-core-processor"
    assert machine.cpu_slug("(TM)") == "unknown-cpu"


def test_machine_writes_this_machines_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bench-x" / "machine.json"
    assert main(["machine", "--out", str(out)]) == 0
    facts = json.loads(out.read_text())
    assert facts == json.loads(capsys.readouterr().out)
    assert facts["cpu_model"] and facts["cores"] >= 1 and facts["python_version"]
    assert machine.read_machine(out.parent) == {**facts, "recorded": True}
    assert machine.read_machine(tmp_path)["recorded"] is False


PHOTOS = "photos-0123456789ab"


def _staging_rows(nodes: int, train: int, test: int, manifest: int) -> dict:
    """The bytes a node holds of a split of 12 equal shards, as data-bench writes them."""
    rows = []
    for node in range(nodes):
        held_train = train // nodes
        held_test = test if node == 0 else 0
        goal = train / nodes + held_test
        held = manifest + held_train + held_test
        rows.append(
            {
                "node": node,
                "train_shards": 12 // nodes,
                "train_bytes": held_train,
                "test_bytes": held_test,
                "bytes": held,
                "goal": round(goal),
                "ratio": round(held / goal, 4),
            }
        )
    return {"nodes": nodes, "per_node": rows}


def _own_data(root: Path, rss: tuple[int, int] = (800, 820), pipeline: float = 6400.0) -> None:
    """A bench's own data: data.json, bench1's pipeline alone and pi_mobilenet's two cases.

    ``rss``: the memory runs' peak RSS in MiB, smaller dataset first.
    """
    root.mkdir(parents=True, exist_ok=True)
    train, test, manifest = 39_321_600, 9_830_400, 4_096
    timing = {"seconds_per_1000": 1.5, "again_seconds_per_1000": 0.075, "bytes": 1}
    data = {
        "photos": {
            "dir": str(root / "photos"),
            "images": 4000,
            "classes": [str(d) for d in range(10)],
            "frame": [240, 320],
            "bytes": 91_200_000,
        },
        "image_size": [64, 64],
        # Larger first: the report puts them in order.
        "prepare": [
            {
                "images": 16000,
                "dataset": "photos_x4-0123456789ab",
                "seconds": 24.0,
                "again_seconds": 1.2,
                "train_examples": 12800,
                "test_examples": 3200,
                **timing,
            },
            {
                "images": 4000,
                "dataset": PHOTOS,
                "seconds": 6.0,
                "again_seconds": 0.3,
                "train_examples": 3200,
                "test_examples": 800,
                **timing,
            },
        ],
        "memory": [
            {
                "dataset": dataset,
                "train_examples": examples,
                "test_examples": examples // 4,
                "model": "pi_mobilenet",
                "epochs": 2,
                "batch_size": 64,
                "peak_rss_bytes": mib * 2**20,
                "examples_per_second": 500.0,
                "wall_seconds": 30.0,
            }
            for dataset, examples, mib in (
                (PHOTOS, 3200, rss[0]),
                ("photos_x4-0123456789ab", 12800, rss[1]),
            )
        ],
        "staging": {
            "dataset": PHOTOS,
            "train_bytes": train,
            "test_bytes": test,
            "manifest_bytes": manifest,
            "bytes": train + test + manifest,
            "nodes": [_staging_rows(n, train, test, manifest) for n in (1, 2, 3)],
        },
    }
    (root / "data.json").write_text(json.dumps(data))
    (root / "pipeline-bench1.json").write_text(
        json.dumps(
            {
                "host": "bench1",
                "dataset": PHOTOS,
                "batch_size": 64,
                "threads": 1,
                "batches": 100,
                "seconds": 1.0,
                "examples_per_second": pipeline,
            }
        )
    )
    one, two = "pi_mobilenet-1node-mwms-1000mbit", "pi_mobilenet-2node-mwms-1000mbit"
    _case(root, one, 400.0, [0.8, 0.9], model="pi_mobilenet", dataset=PHOTOS)
    _case(root, two, 740.0, [0.8, 0.9], model="pi_mobilenet", workers=2, dataset=PHOTOS)


def test_report_sets_own_data_against_the_training_cases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "_weights", lambda name: 140_000)
    _machine(tmp_path)
    _own_data(tmp_path)
    out = bench.report(tmp_path)

    own = out["own_data"]
    assert [r["images"] for r in own["prepare"]] == [4000, 16000]
    (pipe,) = own["pipeline"]
    assert pipe["case"] == "pi_mobilenet-1node-mwms-1000mbit"
    assert pipe["ratio"] == 16.0  # 6400 examples/s alone against the 400 training consumes
    assert own["memory"]["ratio"] == pytest.approx(820 / 800, abs=1e-3)
    assert own["staging"]["ratio"] == max(
        r["ratio"] for n in own["staging"]["nodes"] for r in n["per_node"]
    )
    (scaling,) = out["scaling"]
    assert scaling["model"] == "pi_mobilenet" and scaling["efficiency"] == pytest.approx(0.925)

    by_target = {t["target"]: t for t in bench.check_targets(out)}
    classifier = by_target["image classifier 2-node efficiency at least 0.9 at 1 Gb/s"]
    assert classifier["met"] is True
    assert classifier["measured"].startswith("0.93 (pi_mobilenet, 400.0 examples/s on 1 node")
    # The image classifier is not the compute-bound model of the older target.
    compute = by_target["2-node efficiency at least 0.8 at 1 Gb/s (compute-bound model)"]
    assert compute["met"] is None
    pipeline = by_target[
        "input pipeline alone at least 10x the examples/s training consumes on one bench node"
    ]
    assert (pipeline["met"], pipeline["measured"]) == (
        True,
        "16.0x (bench1: 6400 against 400.0 examples/s of pi_mobilenet)",
    )
    memory = by_target["a worker's peak RSS at 4x the dataset at most 1.1x that at 1x"]
    assert memory["met"] is True
    assert memory["measured"].startswith("1.02x: 820 MiB against 800 MiB (pi_mobilenet, 12800")
    staging = next(t for t in by_target.values() if t["target"].startswith("bytes staged"))
    # dataset.json weighs most beside the smallest share: a worker node of 3.
    assert staging["measured"] == "at most 1.000x (3 nodes, node 1: 13.1 MB against 13.1 MB)"
    assert staging["met"] is True

    text = bench.table(out)
    assert (
        "\nOwn data:\n  photos: 4000 JPEGs of 320x240 pixels in 10 classes (91.2 MB), prepared "
        "at 64x64 rgb\n" in text
    )
    assert "    4000 photos: 6.00 s, 1.50 s a 1,000; again, unchanged: 0.300 s, 0.075 s a" in text
    assert "  input pipeline alone against training on the same node: met" in text
    assert (
        "    bench1: 6400 examples/s alone; pi_mobilenet-1node-mwms-1000mbit trains 400.0: 16.0x"
        in text
    )
    assert (
        "    16000 photos, 12800 training and 3200 test examples: 820 MiB (500 examples/s)" in text
    )
    assert "    4x the training examples: 1.02x the memory" in text
    # The chief's node holds the test split besides its share of the training split.
    assert "    3 nodes: 22.9 MB, 13.1 MB, 13.1 MB (its share: 22.9 MB, 13.1 MB, 13.1 MB)" in text
    assert "  pi_mobilenet, 2 nodes at 1 Gb/s: efficiency 0.93: met" in text
    assert max(len(line) for line in text.splitlines()) <= 100

    md = bench.markdown({**out, "started": "2026-12-05T10:09:00Z"})
    assert "\n## Own data\n" in md
    assert "| 4000 | 6.00 s | 1.50 s | 0.300 s | 0.075 s |" in md
    assert "| bench1 | 6400 | `pi_mobilenet-1node-mwms-1000mbit` | 400.0 | 16.0x |" in md
    assert "Peak RSS of one training process (`pi_mobilenet`, 2 epochs of 64):" in md
    assert "| 4000 | 3200 | 800 | 800 MiB | 500 |" in md
    assert "| 16000 | 12800 | 3200 | 820 MiB | 500 |" in md
    assert "| 3 | 0 (chief) | 22.9 MB |" in md
    assert md.count("**met**.") == 3


def test_own_data_a_bench_did_not_measure_is_not_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "_weights", lambda name: 140_000)
    _own_data(tmp_path, rss=(800, 1200), pipeline=2000.0)
    (tmp_path / "pi_mobilenet-1node-mwms-1000mbit" / "metrics.json").unlink()
    out = bench.report(tmp_path)

    (pipe,) = out["own_data"]["pipeline"]
    assert pipe["ratio"] is None  # no 1-node case of its dataset finished
    by_target = {t["target"]: t for t in bench.check_targets(out)}
    assert by_target["image classifier 2-node efficiency at least 0.9 at 1 Gb/s"]["met"] is None
    memory = by_target["a worker's peak RSS at 4x the dataset at most 1.1x that at 1x"]
    assert memory["met"] is False  # 1.5x: memory grew with the dataset
    text = bench.table(out)
    assert "bench1: 2000 examples/s alone; no 1-node case trained on its dataset" in text
    assert "peak RSS of one training process (pi_mobilenet, 2 epochs of 64): not met" in text

    # Only the pipeline, no data.json: the section says what it lacks.
    (tmp_path / "data.json").unlink()
    own = bench.report(tmp_path)["own_data"]
    assert own["prepare"] == [] and own["memory"] is None and own["staging"] is None
    assert "This bench has no data.json" in "\n".join(bench.own_data_markdown({"own_data": own}))


def test_report_gives_each_form_of_a_timed_case_s_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _full_bench(tmp_path, monkeypatch)
    forms = [
        {"form": "keras", "file": "model.keras", "bytes": 455_000, "test_accuracy": 0.969,
         "ms_median": 3.1, "ms_p90": 4.0},
        {"form": "int8", "file": "model-int8.tflite", "bytes": 42_032, "test_accuracy": 0.968,
         "ms_median": 0.097, "ms_p90": 0.1},
    ]  # fmt: skip
    (tmp_path / "predict-mnist_cnn-1node-mwms-1000mbit.json").write_text(
        json.dumps({"host": "bench1", "model": "mnist_cnn", "threads": 1, "forms": forms})
    )
    out = bench.report(tmp_path)
    (timed,) = out["on_a_node"]
    assert timed["case"] == "mnist_cnn-1node-mwms-1000mbit"
    text = bench.table(out)
    assert (
        "The trained model on a node, mnist_cnn of mnist_cnn-1node-mwms-1000mbit on bench1" in text
    )
    assert "int8              42 KB  test accuracy 0.9680  0.097 ms an input (p90 0.100)" in text
    md = bench.markdown(out)
    assert "| int8 | `model-int8.tflite` | 42 KB | 0.9680 | 0.097 | 0.100 |" in md
