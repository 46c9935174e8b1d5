"""The Python package against the command line: every function, dict inputs, errors, threads.

Run from anywhere after `pip install ./python` (README's test command does both); the tests
work in the repository root and compare with the `stackflow` binary of target/release (built
if missing, or named by STACKFLOW_BIN).
"""

from __future__ import annotations

import doctest
import inspect
import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import stackflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def in_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="session")
def cli() -> str:
    given = os.environ.get("STACKFLOW_BIN")
    if given:
        return given
    binary = ROOT / "target" / "release" / "stackflow"
    if not binary.exists():
        subprocess.run(
            ["cargo", "build", "--release", "--bin", "stackflow"], cwd=ROOT, check=True
        )
    return str(binary)


def cli_json(cli: str, *args: str, exit_code: int = 0):
    """What `stackflow ARGS --json` prints, parsed, checking its exit code."""
    done = subprocess.run(
        [cli, *args, "--json"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == exit_code, done.stderr
    return json.loads(done.stdout)


def yaml_file(path: str):
    """A shipped YAML file as a dict (PyYAML), to pass as a dict input."""
    yaml = pytest.importorskip("yaml")
    with open(ROOT / path) as f:
        return yaml.safe_load(f)


# ---- every function equals its command's --json -------------------------------------------


def test_predict_equals_the_command_line(cli):
    assert stackflow.predict() == cli_json(cli, "predict")
    args = dict(workload="workloads/gemm-8192.yaml", budget="budgets/a100.yaml")
    assert stackflow.predict(**args) == cli_json(
        cli, "predict", "--workload", args["workload"], "--budget", args["budget"]
    )


def test_distributed_and_serving_predict_equal_the_command_line(cli):
    p = stackflow.predict(
        "workloads/gpt3-175b.yaml",
        system="templates/dgx-a100.yaml",
        devices=1024,
        strategy="t8-p16-d8-mb1",
        grid_kg_per_kwh=0.4,
    )
    assert p == cli_json(
        cli, "predict", "--workload", "workloads/gpt3-175b.yaml", "--system",
        "templates/dgx-a100.yaml", "--devices", "1024", "--strategy", "t8-p16-d8-mb1",
        "--grid-kg-per-kwh", "0.4",
    )
    assert p["time_per_iteration_s"] > 0 and p["co2e_kg_per_iteration"] > 0
    serving = stackflow.predict("workloads/llama2-70b-decode.yaml", budget="budgets/h100.yaml")
    assert serving == cli_json(
        cli, "predict", "--workload", "workloads/llama2-70b-decode.yaml", "--budget",
        "budgets/h100.yaml",
    )


def test_generate_equals_the_command_line(cli):
    assert stackflow.generate() == cli_json(cli, "generate")
    a = stackflow.generate("budgets/v100.yaml", tech="tech_libs/n3.yaml")
    assert a == cli_json(
        cli, "generate", "--budget", "budgets/v100.yaml", "--tech", "tech_libs/n3.yaml"
    )


def test_search_equals_the_command_line(cli):
    r = stackflow.search(
        "workloads/llama2-70b.yaml", system="templates/dgx-a100.yaml", devices=64, top=3
    )
    assert r == cli_json(
        cli, "search", "--workload", "workloads/llama2-70b.yaml", "--system",
        "templates/dgx-a100.yaml", "--devices", "64", "--top", "3",
    )
    assert len(r["top"]) == 3 and r["feasible"]


def test_a_search_that_finds_nothing_returns_its_report(cli):
    # The command exits 3 with the report; the function returns the report.
    r = stackflow.search(
        "workloads/gpt3-175b.yaml", system="templates/dgx-a100.yaml", devices=8
    )
    assert r == cli_json(
        cli, "search", "--workload", "workloads/gpt3-175b.yaml", "--system",
        "templates/dgx-a100.yaml", "--devices", "8", exit_code=3,
    )
    assert not r["feasible"] and r["best"] is None


def test_optimize_equals_the_command_line(cli, tmp_path):
    r = stackflow.optimize(strategy="CR-16-d32", restarts=3, steps=5, out=tmp_path / "o")
    assert r == cli_json(
        cli, "optimize", "--strategy", "CR-16-d32", "--restarts", "3", "--steps", "5"
    )
    # --out writes the same report.
    assert json.loads((tmp_path / "o" / "report.json").read_text()) == r
    assert r["best_time_per_iteration_s"] < r["initial_time_per_iteration_s"]


def test_validate_equals_the_command_line(cli):
    r = stackflow.validate()
    expected_exit = 0 if r["passed"] else 2
    assert r == cli_json(cli, "validate", exit_code=expected_exit)
    assert len(r["cases"]) > 20
    assert stackflow.validate("validation/cases.yaml") == r


def test_sweep_equals_the_command_line(cli, tmp_path):
    r = stackflow.sweep("studies/dlrm-fabric.yaml", out=tmp_path / "py", jobs=2)
    expected = cli_json(cli, "sweep", "studies/dlrm-fabric.yaml", "--out", str(tmp_path / "cli"))
    assert r["out"] == str(tmp_path / "py") and expected["out"] == str(tmp_path / "cli")
    del r["out"], expected["out"]
    assert r == expected
    # The files are the same bytes.
    # (points.jsonl is in the order the points finished.)
    for name in ["results.json", "results.csv"]:
        py = (tmp_path / "py" / name).read_bytes()
        assert py == (tmp_path / "cli" / name).read_bytes(), name
    # Without out=, nothing is left behind and the answer says so.
    again = stackflow.sweep("studies/dlrm-fabric.yaml")
    assert again["out"] is None
    del again["out"]
    assert again == expected


def test_run_reaches_the_other_commands(cli):
    args = ["availability", "--slices", "64,4096", "--host-availability", "0.99"]
    assert stackflow.run(*args) == cli_json(cli, *args)


# ---- sweep rows for pandas ------------------------------------------------------------------


@pytest.mark.parametrize("study", ["dlrm-fabric", "tpu-v4-fig4"])
def test_sweep_rows_equal_results_csv_as_pandas_reads_it(tmp_path, study):
    # tpu-v4-fig4 (availability) leaves the training columns and bound_by empty.
    pandas = pytest.importorskip("pandas")
    r = stackflow.sweep(f"studies/{study}.yaml", out=tmp_path / "s")
    rows = stackflow.sweep_rows(r)
    frame = pandas.DataFrame(rows)
    csv = pandas.read_csv(tmp_path / "s" / "results.csv")
    assert list(frame.columns) == list(csv.columns)
    assert len(frame) == len(csv) == r["counts"]["evaluated"]
    # The same column types, so that a frame of the rows equals the CSV as read.
    assert dict(frame.dtypes) == dict(csv.dtypes)
    for column in csv.columns:
        for ours, theirs in zip(frame[column], csv[column]):
            if ours is None or (isinstance(ours, float) and math.isnan(ours)):
                assert pandas.isna(theirs), (column, ours, theirs)
            elif isinstance(ours, float):
                assert ours == pytest.approx(float(theirs), rel=1e-15), column
            else:
                assert ours == theirs, (column, ours, theirs)


def test_sweep_rows_type_numeric_axis_labels():
    study = yaml_file("studies/tech-scaling.yaml")
    results = {
        "axes": [["node", ["N7"]], ["network_gb_per_s", ["200"]], ["share", ["0.5"]]],
        "points": [{"index": 0, "labels": ["N7", "200", "0.5"], "initial_violations": []}],
    }
    assert study["name"]
    row = stackflow.sweep_rows(results)[0]
    assert (row["node"], row["network_gb_per_s"], row["share"]) == ("N7", 200, 0.5)
    assert math.isnan(row["initial_violations"]) and math.isnan(row["time_per_iteration_s"])


# ---- dict inputs equal file inputs -----------------------------------------------------------


def test_a_workload_dict_equals_its_file():
    w = yaml_file("workloads/gpt-1.7b.yaml")
    assert stackflow.predict(w) == stackflow.predict("workloads/gpt-1.7b.yaml")


def test_budget_system_and_strategy_dicts_equal_their_files():
    budget = yaml_file("budgets/a100.yaml")
    # Paths inside a dict resolve from the working directory (here the repository root).
    for key in ("template", "technology"):
        budget[key] = os.path.normpath(os.path.join("budgets", budget[key]))
    assert stackflow.generate(budget) == stackflow.generate("budgets/a100.yaml")

    system = yaml_file("templates/dgx-a100.yaml")
    system["accelerator"] = os.path.normpath(os.path.join("templates", system["accelerator"]))
    strategy = {"version": 1, "tensor": 8, "pipeline": 16, "data": 8, "micro_batch": 1}
    from_dicts = stackflow.predict(
        "workloads/gpt3-175b.yaml", system=system, devices=1024, strategy=strategy
    )
    from_files = stackflow.predict(
        "workloads/gpt3-175b.yaml", system="templates/dgx-a100.yaml", devices=1024,
        strategy="t8-p16-d8-mb1",
    )
    assert from_dicts == from_files


def test_a_study_dict_equals_its_file(tmp_path):
    study = yaml_file("studies/dlrm-fabric.yaml")
    base = study["base"]
    for key, value in list(base.items()):
        if isinstance(value, str) and value.endswith((".yaml", ".yml")):
            base[key] = os.path.normpath(os.path.join("studies", value))
    from_dict = stackflow.sweep(study)
    from_file = stackflow.sweep("studies/dlrm-fabric.yaml")
    assert from_dict == from_file


def test_text_beyond_ascii_in_a_dict_reads_as_in_a_file(tmp_path):
    w = yaml_file("workloads/gpt-1.7b.yaml")
    w["name"] = "gpt-1.7b \N{ROCKET} \u00e9t\u00e9"
    p = stackflow.predict(w)
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(w, ensure_ascii=False), encoding="utf-8")
    assert p == stackflow.predict(path)
    assert p["workload"] == w["name"]


def test_numpy_numbers_in_a_dict_are_numbers():
    numpy = pytest.importorskip("numpy")
    w = yaml_file("workloads/gemm-8192.yaml")
    plain = stackflow.predict(w)
    w = {k: (numpy.int64(v) if isinstance(v, int) else v) for k, v in w.items()}
    assert isinstance(w["m"], numpy.int64)
    assert stackflow.predict(w) == plain


# ---- bad input -------------------------------------------------------------------------------


def test_an_unknown_key_names_its_field_path():
    w = yaml_file("workloads/gpt-1.7b.yaml")
    w["layerz"] = 3
    with pytest.raises(stackflow.Error) as e:
        stackflow.predict(w)
    message = str(e.value)
    assert "<workload dict>" in message and "layerz" in message


def test_a_wrong_type_names_field_value_and_expectation():
    w = yaml_file("workloads/gpt-1.7b.yaml")
    w["layers"] = "many"
    with pytest.raises(stackflow.Error) as e:
        stackflow.predict(w)
    message = str(e.value)
    assert "<workload dict>" in message and "layers" in message
    assert "many" in message and "expected" in message


def test_a_value_out_of_range_names_field_value_and_expectation():
    budget = yaml_file("budgets/h100.yaml")
    for key in ("template", "technology"):
        budget[key] = os.path.normpath(os.path.join("budgets", budget[key]))
    budget["area"]["chip_mm2"] = -5
    with pytest.raises(stackflow.Error) as e:
        stackflow.generate(budget)
    assert "<budget dict>" in str(e.value) and "area.chip_mm2" in str(e.value)
    assert "-5" in str(e.value)


def test_bad_arguments_raise_the_package_error():
    with pytest.raises(stackflow.Error, match="no-such.yaml"):
        stackflow.predict("no-such.yaml")
    with pytest.raises(stackflow.Error, match="--devices"):
        stackflow.predict(system="templates/dgx-a100.yaml", devices=-8)
    with pytest.raises(stackflow.Error, match="expected a path"):
        stackflow.predict(5)
    with pytest.raises(stackflow.Error, match="expected True or False"):
        stackflow.search(system="templates/dgx-a100.yaml", exhaustive="yes")
    with pytest.raises(stackflow.Error, match="is not a number, string, list or dict"):
        stackflow.predict({"gemm": {"m": object()}})
    with pytest.raises(stackflow.Error, match="argument 0 = 1: expected a string"):
        stackflow.run(1)
    assert issubclass(stackflow.Error, Exception)


# ---- the Python face matches the command line's flags -----------------------------------------

# Flags that shape only the text a terminal shows, or that the function adds itself.
TEXT_ONLY = {"json", "kernels", "help", "version"}
POSITIONAL = {"validate": {"cases"}, "sweep": {"study"}}


@pytest.mark.parametrize(
    "function", [stackflow.generate, stackflow.predict, stackflow.search,
                 stackflow.optimize, stackflow.validate, stackflow.sweep]
)
def test_every_flag_of_the_command_is_a_keyword(function):
    name = function.__name__
    flags = {f.replace("-", "_") for f in stackflow._stackflow.flags(name)} - TEXT_ONLY
    keywords = set(inspect.signature(function).parameters) - POSITIONAL.get(name, set())
    assert keywords == flags, (name, keywords ^ flags)
    assert function.__doc__ and ">>>" in function.__doc__, name


def test_the_stub_lists_what_the_core_has():
    stub = (Path(stackflow.__file__).parent / "_stackflow.pyi").read_text()
    for name in ["run", "flags", "result_columns", "Error", "__version__"]:
        assert hasattr(stackflow._stackflow, name), name
        assert name in stub, name


# ---- threads: the GIL is released while the model runs -----------------------------------------


def test_the_gil_is_released_during_a_call():
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        # Let the counter start, then run a call of a fraction of a second.
        time.sleep(0.05)
        before = ticks
        started = time.perf_counter()
        stackflow.optimize(strategy="CR-16-d32")  # about 0.25 s
        elapsed = time.perf_counter() - started
        during = ticks - before
    finally:
        stop.set()
        counter.join()
    # With the GIL held, the counter would tick at most a few times (at the call's edges).
    assert elapsed > 0.1, "the call was too short to tell"
    assert during > 100, (during, elapsed)


def test_threads_get_the_same_answers():
    expected = stackflow.predict("workloads/gemm-8192.yaml")
    w = yaml_file("workloads/gpt-1.7b.yaml")
    expected_dict = stackflow.predict(w)
    answers = []

    def work(i):
        if i % 2:
            answers.append(("file", stackflow.predict("workloads/gemm-8192.yaml")))
        else:
            answers.append(("dict", stackflow.predict(w)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 8
    for kind, answer in answers:
        assert answer == (expected if kind == "file" else expected_dict)


# ---- the docstrings' examples run ----------------------------------------------------------------


def test_docstring_examples_run():
    result = doctest.testmod(stackflow, extraglobs={"stackflow": stackflow})
    assert result.attempted >= 10 and result.failed == 0, result


def test_optimize_with_a_template_dict_writes_its_budget(tmp_path):
    t = yaml_file("templates/deepflow-node.yaml")
    r = stackflow.optimize(template=t, strategy="CR-16-d32", restarts=1, steps=2,
                           out=tmp_path / "o")
    assert r["best_time_per_iteration_s"] > 0
    budget = tmp_path / "o" / "budget.yaml"
    assert stackflow.generate(budget)["peak_flops_per_s"] > 0


def test_run_serves_under_load(cli):
    args = ["serve", "--system", "templates/dgx-h100.yaml", "--devices", "1", "--rate", "20",
            "--requests", "200", "--slo-ttft-ms", "200", "--slo-tpot-ms", "20"]
    r = stackflow.run(*args)
    assert r == cli_json(cli, *args)
    assert r["goodput"]["requests_per_s"] > 0 and r["ttft_s"]["p99"] > 0


def test_search_finds_a_serving_deployment(cli):
    # A served model with an SLO: the serving search, as `stackflow search` prints it.
    kwargs = dict(workload="workloads/llama2-70b-serve.yaml", system="templates/dgx-h100.yaml",
                  slo_ttft_ms=1000, slo_tpot_ms=50, requests=100, top=2, no_disaggregate=True)
    r = stackflow.search(**kwargs)
    args = ["search", "--workload", kwargs["workload"], "--system", kwargs["system"],
            "--slo-ttft-ms", "1000", "--slo-tpot-ms", "50", "--requests", "100", "--top", "2",
            "--no-disaggregate"]
    assert r == cli_json(cli, *args)
    assert r["best"]["requests_per_s_per_device"] > 0 and len(r["top"]) == 2


def test_serve_replays_a_trace_and_refuses_a_bad_one(cli, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.1,300,40\n0.3,50,10\n")
    args = ["serve", "--system", "templates/dgx-h100.yaml", "--devices", "1", "--trace", str(trace)]
    r = stackflow.run(*args)
    assert r == cli_json(cli, *args)
    assert r["load"]["requests"] == 3 and r["mean_prompt_tokens"] == 150
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n1,100,20\n0.5,300,40\n")
    with pytest.raises(stackflow.Error, match="line 3: arrival_s = 0.5"):
        stackflow.run(*args)
