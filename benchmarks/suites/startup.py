"""Start-up time: ``mercer --help`` and ``import mercer`` against importing torch and scikit-learn.

Every case runs in a fresh interpreter; the cases alternate within each round (round r starts at
case r mod k), so a change in the machine's load touches all of them alike. Reported: the median
wall time of each case over ``--runs`` rounds, and ratios of medians taken in the same run:

* ``mercer --help`` (and ``mercer fit --help``, ``mercer --version``) against a bare interpreter
  and against ``import torch`` (the command must not import torch, numba or scikit-learn);
* ``import mercer`` and ``from mercer import KernelRidge, KernelSVC`` (which loads the estimators)
  against ``import torch; import sklearn.base, sklearn.utils.validation`` (the parts of
  scikit-learn mercer builds on).

Usage::

    python benchmarks/suites/startup.py               # 5 rounds, about 30 s
    python benchmarks/suites/startup.py --quick       # 2 rounds
    python benchmarks/suites/startup.py --runs 11 --tag after

Writes ``benchmarks/results/startup/latest.json`` and ``.md`` (``quick.*``, ``history/TAG.*``). The machine may be shared: the load
average before and after is recorded, and only ratios from the same run are comparable.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import (git_state, load_average, machine_info, markdown_table, parse_suite_args,  # noqa: E402
                     suite_parser, write_results)

PYTHON = sys.executable
#: the console script next to this interpreter (a virtual environment's bin/), else ``python -m mercer``
_SCRIPT = Path(PYTHON).with_name("mercer")
MERCER = [str(_SCRIPT)] if _SCRIPT.exists() else [PYTHON, "-m", "mercer"]

#: name -> command line; the references first
CASES = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "import torch": [PYTHON, "-c", "import torch"],
    "import torch, sklearn.base, sklearn.utils.validation":
        [PYTHON, "-c", "import torch; import sklearn.base, sklearn.utils.validation"],
    "mercer --help": MERCER + ["--help"],
    "mercer fit --help": MERCER + ["fit", "--help"],
    "mercer --version": MERCER + ["--version"],
    "import mercer": [PYTHON, "-c", "import mercer"],
    "from mercer import KernelRidge, KernelSVC": [PYTHON, "-c", "from mercer import KernelRidge, KernelSVC"],
}
#: (case, reference) -> ratio of their medians
RATIOS = [
    ("mercer --help", "python -c pass"),
    ("mercer --help", "import torch"),
    ("import mercer", "import torch, sklearn.base, sklearn.utils.validation"),
    ("from mercer import KernelRidge, KernelSVC", "import torch, sklearn.base, sklearn.utils.validation"),
]


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(cases: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Wall times of each case over ``runs`` rounds, the order rotating from round to round."""
    names = list(cases)
    for name in names:  # one untimed run each: file-system caches, numba's and Python's bytecode caches
        _time(cases[name])
    times = {name: [] for name in names}
    for r in range(runs):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(_time(cases[name]))
    return times


def main(argv=None) -> None:
    ap = suite_parser("startup", __doc__.split("\n", 1)[0], refs=("torch", "sklearn"), refs_required=True,
                      quick="2 rounds")
    ap.add_argument("--runs", type=int, default=None, help="rounds of fresh-process runs (default 5; --quick 2)")
    args = parse_suite_args(ap, argv)
    args.runs = args.runs or (2 if args.quick else 5)

    load_before = load_average()
    times = measure(CASES, args.runs)
    load_after = load_average()
    med = {name: statistics.median(t) for name, t in times.items()}
    rows = [{"case": name, "median (s)": f"{med[name]:.3f}",
             "min - max (s)": f"{min(t):.3f} - {max(t):.3f}"} for name, t in times.items()]
    ratio_rows = [{"ratio of medians": f"{a} / {b}", "value": f"{med[a] / med[b]:.2f}"} for a, b in RATIOS]
    header = (f"{args.runs} alternating rounds, fresh processes; load (1/5/15 min) {load_before} before, "
              f"{load_after} after\n{machine_info()}\n{git_state()}")
    text = f"{header}\n\n{markdown_table(rows)}\n\n{markdown_table(ratio_rows)}\n"
    print(text)
    write_results(args, {"runs": args.runs, "load_before": load_before,
                                              "load_after": load_after, "times": times, "medians": med,
                         "ratios": {f"{a} / {b}": med[a] / med[b] for a, b in RATIOS}},
                  text, title="Start-up: mercer's command and import against torch and scikit-learn")


if __name__ == "__main__":
    main()
