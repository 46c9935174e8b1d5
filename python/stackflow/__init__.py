"""stackflow: cross-stack pathfinding for machine-learning hardware, from Python.

Each function runs the stackflow command of the same name in-process (the compiled core,
``stackflow._stackflow``, calls the same Rust code as the command line) and returns what that
command prints with ``--json``, as plain dicts and lists: the same keys, the same numbers.
Nothing is parsed from text and no process starts, so a call costs what the model costs.

Inputs are file paths (``str`` or ``os.PathLike``) or plain dicts with the same schema as the
YAML files. Paths inside a dict (a budget's ``template:``, a study's ``base.system:``) are
resolved from the working directory; paths inside a file, from that file's folder, as on the
command line. Leaving an argument out (``None``) means the command line's default, which the
docstrings name. The GIL is released while the model runs, so threads can run calls in
parallel.

Bad input raises :class:`Error` with the command line's message: the file (``<budget dict>``
for a dict), the field path, the value and what was expected.

>>> import stackflow
>>> p = stackflow.predict()          # the embedded GPT 1.7B on the embedded H100 budget
>>> round(p["time_per_iteration_s"], 3) > 0
True
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _stackflow
from ._stackflow import Error

__all__ = [
    "Error",
    "generate",
    "predict",
    "search",
    "optimize",
    "validate",
    "sweep",
    "sweep_rows",
    "run",
]

__version__: str = _stackflow.__version__

#: A file path or a dict with the file's schema.
Input = Union[str, "os.PathLike[str]", Mapping[str, Any]]
#: A strategy: a file path, a strategy string (``"t8-p8-d16-mb1"``, ``"RC-4-2-d8-p2"``,
#: ``"(TP, DDP)"``, ``"attention:t8-d16,dense:d128"``) or a dict with a strategy file's schema.
StrategyInput = Union[str, "os.PathLike[str]", Mapping[str, Any]]


class _CommandLine:
    """One command line being built from keyword arguments, with its in-memory files."""

    def __init__(self, command: str) -> None:
        self.args: List[str] = [command]
        self.files: List[Tuple[str, str]] = []

    def file(self, flag: Optional[str], kind: str, value: Any) -> None:
        """A path, or a dict held in memory as ``<kind dict>``; ``flag`` None: positional."""
        if value is None:
            return
        if isinstance(value, (str, os.PathLike)):
            given = os.fspath(value)
        elif isinstance(value, Mapping):
            given = f"<{kind} dict>"
            self.files.append((given, _as_text(kind, value)))
        else:
            raise Error(
                f"{kind} = {value!r}: expected a path (str or os.PathLike) or a dict with the "
                f"{kind} file's fields"
            )
        self.args += [flag, given] if flag else [given]

    def value(self, flag: str, value: Any) -> None:
        """An option's value (a number, a string, or a list joined by commas)."""
        if value is None:
            return
        if isinstance(value, bool):
            raise Error(f"{flag} = {value!r}: expected a value, not a switch")
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        self.args += [flag, str(value)]

    def switch(self, flag: str, on: bool) -> None:
        if not isinstance(on, bool):
            raise Error(f"{flag} = {on!r}: expected True or False")
        if on:
            self.args.append(flag)

    def run(self) -> Dict[str, Any]:
        answer: Dict[str, Any] = _stackflow.run(self.args + ["--json"], self.files)[1]
        return answer


def _as_text(kind: str, value: Mapping[str, Any]) -> str:
    """A dict as the text of a file (JSON, which the YAML reader reads as YAML)."""

    def plain(o: Any) -> Any:
        # NumPy scalars and the like carry .item(); anything else is refused by name.
        if hasattr(o, "item"):
            return o.item()
        raise TypeError(f"{type(o).__name__} {o!r} is not a number, string, list or dict")

    try:
        # Not ASCII-escaped: YAML refuses the surrogate pairs JSON escapes emoji into; no NaN,
        # which YAML would read as text.
        return json.dumps(value, default=plain, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise Error(f"<{kind} dict>: {e}") from None


def _strategy(line: _CommandLine, flag: str, value: Optional[StrategyInput]) -> None:
    if isinstance(value, Mapping):
        line.file(flag, "strategy", value)
    elif value is not None:
        line.value(flag, os.fspath(value) if isinstance(value, os.PathLike) else value)


def generate(
    budget: Optional[Input] = None,
    *,
    template: Optional[Input] = None,
    tech: Optional[Input] = None,
) -> Dict[str, Any]:
    """Derive an accelerator from a budget, its template and technology (``stackflow generate``).

    ``budget`` defaults to the embedded ``budgets/h100.yaml``; ``template`` and ``tech``
    override the files the budget names. Returns the architecture (throughput, memories,
    networks, the budget each component binds, violations), as ``generate --json`` prints it.

    >>> a = stackflow.generate("budgets/v100.yaml")
    >>> round(a["peak_flops_per_s"] / 1e12)   # V100: 125 TFLOP/s fp16 tensor peak
    125
    """
    line = _CommandLine("generate")
    line.file("--budget", "budget", budget)
    line.file("--template", "template", template)
    line.file("--tech", "tech", tech)
    return line.run()


def predict(
    workload: Optional[Input] = None,
    *,
    budget: Optional[Input] = None,
    template: Optional[Input] = None,
    tech: Optional[Input] = None,
    arch: Optional[Input] = None,
    system: Optional[Input] = None,
    devices: Optional[int] = None,
    strategy: Optional[StrategyInput] = None,
    slice: Optional[str] = None,
    tables: Optional[str] = None,
    host_transfers: Optional[str] = None,
    grid_kg_per_kwh: Optional[float] = None,
    pue: Optional[float] = None,
    csv: Optional[Union[str, "os.PathLike[str]"]] = None,
    plot: Optional[Union[str, "os.PathLike[str]"]] = None,
    trace: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Predict one training iteration or served batch (``stackflow predict``).

    On one accelerator (``budget`` with optional ``template``/``tech``, or a saved ``arch``),
    or distributed over a ``system`` with ``devices`` (default: the system's own),
    ``strategy`` (default: data parallelism over every device) or a torus ``slice``
    (``"4x8x16"``). ``workload`` defaults to the embedded ``workloads/gpt-1.7b.yaml``,
    ``budget`` to ``budgets/h100.yaml``. ``tables`` (``"device"``, ``"host"``, ``"auto"``)
    and ``host_transfers`` (``"direct"``, ``"staged"``) place a recommendation model's
    embedding tables; ``grid_kg_per_kwh`` and ``pue`` add operational CO2e; ``csv`` also
    writes the kernels or collectives to that file; ``plot`` writes the roofline charts and
    their data (``roofline*.svg``, ``roofline.csv``) to that directory; ``trace`` (with a
    ``system``) writes the iteration's timeline as Chrome trace-event JSON (Perfetto) to that
    file; ``report`` writes the run as one self-contained HTML page. Returns ``predict --json``'s report
    (``time_per_iteration_s``, ``feasible``, ``violations``, per-kernel classes, energy, ...).

    >>> p = stackflow.predict("workloads/gemm-8192.yaml", budget="budgets/a100.yaml")
    >>> p["feasible"]
    True
    >>> d = stackflow.predict("workloads/gpt3-175b.yaml", system="templates/dgx-a100.yaml",
    ...                       devices=1024, strategy="t8-p16-d8-mb1")
    >>> d["time_per_iteration_s"] > 1
    True
    """
    line = _CommandLine("predict")
    line.file("--workload", "workload", workload)
    line.file("--budget", "budget", budget)
    line.file("--template", "template", template)
    line.file("--tech", "tech", tech)
    line.file("--arch", "arch", arch)
    line.file("--system", "system", system)
    line.value("--devices", devices)
    _strategy(line, "--strategy", strategy)
    line.value("--slice", slice)
    line.value("--tables", tables)
    line.value("--host-transfers", host_transfers)
    line.value("--grid-kg-per-kwh", grid_kg_per_kwh)
    line.value("--pue", pue)
    line.value("--csv", os.fspath(csv) if csv is not None else None)
    line.value("--plot", os.fspath(plot) if plot is not None else None)
    line.value("--trace", os.fspath(trace) if trace is not None else None)
    line.value("--report", os.fspath(report) if report is not None else None)
    return line.run()


def search(
    workload: Optional[Input] = None,
    *,
    system: Input,
    devices: Optional[int] = None,
    slice: Optional[str] = None,
    tables: Optional[str] = None,
    host_transfers: Optional[str] = None,
    base: Optional[StrategyInput] = None,
    top: Optional[int] = None,
    exhaustive: bool = False,
    per_layer_type: bool = False,
    csv: Optional[Union[str, "os.PathLike[str]"]] = None,
    plot: Optional[Union[str, "os.PathLike[str]"]] = None,
    slo_ttft_ms: Optional[float] = None,
    slo_tpot_ms: Optional[float] = None,
    no_disaggregate: bool = False,
    trace: Optional[Union[str, "os.PathLike[str]"]] = None,
    requests: Optional[int] = None,
    seed: Optional[int] = None,
    max_batch: Optional[int] = None,
    max_step_tokens: Optional[int] = None,
    block_tokens: Optional[int] = None,
    memory_utilization: Optional[float] = None,
    chunked_prefill: bool = False,
    no_evict: bool = False,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Search parallelism strategies for a workload on a system (``stackflow search``).

    ``devices`` defaults to the system's; ``base`` is the strategy to start from (default:
    data parallelism with the least ZeRO stage that fits); ``top`` (default 10, at most 1000)
    strategies are listed by time; ``exhaustive`` prices every strategy that fits instead of
    pruning by lower bounds; ``per_layer_type`` then splits each layer type its own way;
    ``plot`` writes the Pareto chart and its data (``pareto.svg``, ``pareto.csv``) to that
    directory; ``report`` writes the search as one self-contained HTML page.
    Returns ``search --json``'s report: the best strategy, the top N, the Pareto front of time
    against memory per device, and the search's counts (its ``wall_s`` is the search's own
    time). When nothing fits, the report says so (the command exits 3; this returns it).

    A served transformer (``inference:``) with ``slo_ttft_ms`` and ``slo_tpot_ms`` is searched
    for the deployment with the most goodput per device (replica splits, batch caps up to
    ``max_batch``, chunked prefill, prefill/decode pools unless ``no_disaggregate``) under
    Poisson arrivals (``requests``, ``seed``) or a ``trace``; the engine's other settings as
    ``serve`` takes them. Its report: ``best`` (the goodput and the run there), ``top`` and
    the counts.

    >>> r = stackflow.search("workloads/llama2-70b.yaml", system="templates/dgx-a100.yaml",
    ...                      devices=64, top=3)
    >>> len(r["top"])
    3
    >>> s = stackflow.search("workloads/llama2-70b-serve.yaml", system="templates/dgx-h100.yaml",
    ...                      slo_ttft_ms=1000, slo_tpot_ms=50, requests=100, top=1)
    >>> s["best"]["requests_per_s_per_device"] > 0
    True
    """
    line = _CommandLine("search")
    line.file("--workload", "workload", workload)
    line.file("--system", "system", system)
    line.value("--devices", devices)
    line.value("--slice", slice)
    line.value("--tables", tables)
    line.value("--host-transfers", host_transfers)
    _strategy(line, "--base", base)
    line.value("--top", top)
    line.switch("--exhaustive", exhaustive)
    line.switch("--per-layer-type", per_layer_type)
    line.value("--csv", os.fspath(csv) if csv is not None else None)
    line.value("--plot", os.fspath(plot) if plot is not None else None)
    line.value("--slo-ttft-ms", slo_ttft_ms)
    line.value("--slo-tpot-ms", slo_tpot_ms)
    line.switch("--no-disaggregate", no_disaggregate)
    line.value("--trace", os.fspath(trace) if trace is not None else None)
    line.value("--requests", requests)
    line.value("--seed", seed)
    line.value("--max-batch", max_batch)
    line.value("--max-step-tokens", max_step_tokens)
    line.value("--block-tokens", block_tokens)
    line.value("--memory-utilization", memory_utilization)
    line.switch("--chunked-prefill", chunked_prefill)
    line.switch("--no-evict", no_evict)
    line.value("--report", os.fspath(report) if report is not None else None)
    return line.run()


def optimize(
    workload: Optional[Input] = None,
    *,
    system: Optional[Input] = None,
    budget: Optional[Input] = None,
    template: Optional[Input] = None,
    tech: Optional[Input] = None,
    devices: Optional[int] = None,
    strategy: Optional[StrategyInput] = None,
    search_strategy: bool = False,
    bounds: Optional[Input] = None,
    restarts: Optional[int] = None,
    steps: Optional[int] = None,
    seed: Optional[int] = None,
    finish: Optional[str] = None,
    slo_ttft_ms: Optional[float] = None,
    slo_tpot_ms: Optional[float] = None,
    max_batch: Optional[int] = None,
    out: Optional[Union[str, "os.PathLike[str]"]] = None,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Reallocate area, power and perimeter budgets and search strategies (``stackflow optimize``).

    Defaults: DeepFlow Sec. 9's LSTM (``workloads/lstm-sec9.yaml``) on
    ``templates/deepflow-sec9.yaml``, starting from the system's budget; 10 ``restarts`` of
    100 ``steps`` from ``seed`` 0, each finished by a ``"transfer"`` search (``finish="none"``:
    DeepFlow's optimizer as published). A fixed ``strategy`` optimizes budgets only unless
    ``search_strategy``; ``bounds`` caps each component's share. ``out`` also writes
    budget.yaml, report.json, trace.csv and the charts (convergence.svg, budget.svg,
    sensitivities.svg, pareto.svg) there; ``report`` writes the run as one self-contained
    HTML page. Returns ``optimize --json``'s
    report (as report.json holds it); when nothing is feasible it says so (exit 3 on the
    command line). A served transformer needs ``slo_ttft_ms`` and ``slo_tpot_ms``: its budget
    is optimized for goodput per device within them (the report's ``serving``).

    >>> r = stackflow.optimize(strategy="CR-16-d32", restarts=2, steps=20)
    >>> r["best_time_per_iteration_s"] < r["initial_time_per_iteration_s"]
    True
    """
    line = _CommandLine("optimize")
    line.file("--workload", "workload", workload)
    line.file("--system", "system", system)
    line.file("--budget", "budget", budget)
    line.file("--template", "template", template)
    line.file("--tech", "tech", tech)
    line.value("--devices", devices)
    _strategy(line, "--strategy", strategy)
    line.switch("--search-strategy", search_strategy)
    line.file("--bounds", "bounds", bounds)
    line.value("--restarts", restarts)
    line.value("--steps", steps)
    line.value("--seed", seed)
    line.value("--finish", finish)
    line.value("--slo-ttft-ms", slo_ttft_ms)
    line.value("--slo-tpot-ms", slo_tpot_ms)
    line.value("--max-batch", max_batch)
    line.value("--out", os.fspath(out) if out is not None else None)
    line.value("--report", os.fspath(report) if report is not None else None)
    return line.run()


def validate(cases: Optional[Input] = None) -> Dict[str, Any]:
    """Replay published measurements and report the model's error (``stackflow validate``).

    ``cases`` defaults to the embedded ``validation/cases.yaml``. Returns the report: every
    case with its source, measured and predicted values, error and tolerance, and ``passed``
    (the command exits 2 when it is false; this returns the report).

    >>> r = stackflow.validate()
    >>> len(r["cases"]) > 20
    True
    """
    line = _CommandLine("validate")
    line.file(None, "cases", cases)
    return line.run()


def sweep(
    study: Input,
    *,
    out: Optional[Union[str, "os.PathLike[str]"]] = None,
    jobs: Optional[int] = None,
    shard: Optional[str] = None,
    resume: bool = False,
    report: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Evaluate a study's grid of roadmap points in parallel (``stackflow sweep``).

    ``out`` keeps the output folder (results.json, results.csv, plots, the journal
    ``points.jsonl``); without it the sweep runs in a temporary folder that is removed
    afterwards, and the answer's ``out`` is None. ``jobs`` worker threads (default: one per
    core), ``shard`` ``"K/N"`` evaluates every N-th point, ``resume`` keeps the points ``out``
    already holds; ``report`` writes the sweep as one self-contained HTML page. Returns
    ``sweep --json``'s results (``points``, ``axes``, ``counts``);
    :func:`sweep_rows` flattens them for ``pandas.DataFrame``.

    >>> r = stackflow.sweep("studies/dlrm-fabric.yaml")
    >>> r["counts"]["evaluated"]
    16
    """
    line = _CommandLine("sweep")
    line.file(None, "study", study)
    line.value("--jobs", jobs)
    line.value("--shard", shard)
    line.switch("--resume", resume)
    line.value("--report", os.fspath(report) if report is not None else None)
    if out is not None:
        line.value("--out", os.fspath(out))
        return line.run()
    with tempfile.TemporaryDirectory(prefix="stackflow-sweep-") as folder:
        line.value("--out", os.path.join(folder, "out"))
        answer = line.run()
    answer["out"] = None
    return answer


def sweep_rows(results: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One flat dict per point of a sweep's results, ready for ``pandas.DataFrame(rows)``.

    The columns are results.csv's: ``index``, one per axis, then the results (strategy,
    times, speed-ups, feasibility, the design's rates, ...). Each value is typed as
    ``pandas.read_csv`` reads its cell of results.csv, so that ``pandas.DataFrame(rows)``
    infers the column types ``read_csv`` does: axis labels that are numbers become numbers,
    whole numbers ints (results.csv writes 2.0 as 2), missing values NaN, and the starting
    design's violations one string joined by ``"; "``.

    >>> rows = stackflow.sweep_rows(stackflow.sweep("studies/dlrm-fabric.yaml"))
    >>> rows[0]["nvlink"], rows[0]["infiniband"], rows[0]["feasible"]
    ('300 GB/s (x1)', '25 GB/s (x1)', True)
    >>> import pandas
    >>> pandas.DataFrame(rows).shape
    (16, 30)
    """
    axes = [name for name, _ in results["axes"]]
    columns = _stackflow.result_columns()
    rows = []
    for point in results["points"]:
        row: Dict[str, Any] = {"index": point["index"]}
        row.update(zip(axes, (_label(v) for v in point["labels"])))
        for column in columns:
            value = point.get(column)
            if column == "initial_violations":
                value = "; ".join(v["message"] for v in value or []) or None
            row[column] = _cell(value)
        rows.append(row)
    return rows


def _cell(value: Any) -> Any:
    """A result as a CSV reader types its cell: a missing value or an empty text NaN (an empty
    cell), a whole number an int (results.csv writes 2.0 as 2), anything else as it is."""
    if value is None or value == "":
        return math.nan
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _label(text: str) -> Union[int, float, str]:
    """An axis label as a CSV reader types it: an integer, a float, else the text."""
    if "_" in text:  # Python reads 1_000 as a number; a CSV reader does not
        return text
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run(*args: Union[str, "os.PathLike[str]"], **files: Mapping[str, Any]) -> Any:
    """Any stackflow command line, in-process, with ``--json`` added: its answer (a dict, or
    a list for ``availability`` and ``intensity``).

    For the commands without their own function (``import``, ``merge``, ``intensity``,
    ``availability``) or flags given as on the command line. A keyword argument holds a dict
    in memory under ``<name dict>``, to be named in ``args``.

    >>> g = stackflow.run("availability", "--slices", "64,4096", "--host-availability", "0.99")
    >>> [round(r["with_ocs"], 3) for r in g][:1]
    [0.851]
    """
    for i, a in enumerate(args):
        if not isinstance(a, (str, os.PathLike)):
            raise Error(f"run(...) argument {i} = {a!r}: expected a string (a command, a flag or its value) or a path")
    line = _CommandLine(os.fspath(args[0]) if args else "")
    line.args += [os.fspath(a) for a in args[1:]]
    for name, value in files.items():
        if not isinstance(value, Mapping):
            raise Error(f"{name} = {value!r}: expected a dict (a file's fields)")
        line.files.append((f"<{name} dict>", _as_text(name, value)))
    json_flag = [] if "--json" in line.args else ["--json"]
    _, answer = _stackflow.run(line.args + json_flag, line.files)
    return answer
