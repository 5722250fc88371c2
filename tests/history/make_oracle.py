"""Writes tests/history/oracle.json: MongoDB's E-divisive (the `signal-processing-algorithms`
package, `e_divisive`) on a set of seeded series, so the tests can hold
harness/history/changepoints.py to it without the package. Run it with a Python that has
the package (it pins an older numpy and pulls gevent, so not the project's venv):

    python3 -m venv /tmp/spa && /tmp/spa/bin/pip install signal-processing-algorithms
    /tmp/spa/bin/python tests/history/make_oracle.py

For each series it stores the values, the statistic Q(τ) of every split of the whole series
(deterministic: the tests compare it to 1e-9) and the change points MongoDB finds under ten
seeds of its permutations (they agree unless a candidate's p-value is near the level).
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
from signal_processing_algorithms.energy_statistics import energy_statistics as es

OUT = Path(__file__).resolve().parent / "oracle.json"
PVALUE, PERMUTATIONS, SEEDS = 0.05, 199, range(10)


def series() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20250101)
    noise = lambda n, mean=100.0, sd=1.0: rng.normal(mean, sd, n)  # noqa: E731
    outlier = noise(20)
    outlier[9] += 12
    return {
        "step_3sd_at_10": np.concatenate([noise(10), noise(10, 103)]),
        "step_5pct_at_6_of_12": np.concatenate([noise(6, 1800, 20), noise(6, 1710, 20)]),
        "two_steps_at_8_and_16": np.concatenate([noise(8), noise(8, 106), noise(8, 99)]),
        "flat_20": noise(20),
        "flat_40": noise(40),
        "outlier_at_9": outlier,
        "variance_change_at_15": np.concatenate([noise(15, sd=0.5), noise(15, sd=5)]),
        "slow_drift_30": noise(30) + np.linspace(0, 4, 30),
        "short_step_at_3_of_6": np.concatenate([noise(3), noise(3, 110)]),
        "step_near_end_at_17_of_20": np.concatenate([noise(17), noise(3, 108)]),
        "heavy_tailed_step_at_12": np.concatenate([100 + rng.standard_t(2, 12), 104 + rng.standard_t(2, 12)]),
    }


def oracle(values: np.ndarray) -> dict:
    distances = es._get_distance_matrix(es._get_valid_input(values))
    answers = []
    for seed in SEEDS:
        np.random.seed(seed)
        answers.append(sorted(int(i) for i in es.e_divisive(values, pvalue=PVALUE, permutations=PERMUTATIONS)))
    return {"values": [float(v) for v in values], "statistics": [float(q) for q in es._calculate_t_stats(distances)],
            "change_points_by_seed": answers}


def main() -> None:
    data = {"source": f"signal-processing-algorithms {version('signal-processing-algorithms')} e_divisive",
            "pvalue": PVALUE, "permutations": PERMUTATIONS,
            "series": {name: oracle(values) for name, values in series().items()}}
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    for name, case in data["series"].items():
        print(f"{name:30s} {case['change_points_by_seed']}")


if __name__ == "__main__":
    main()
