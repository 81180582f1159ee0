"""How often method A's rule (protocol rule 41) fails two families drawn from one distribution
(tr2.method_a.chance_of_failing): at one evaluation, |median_a - median_b| > max(range_a, range_b) with n seeds a side,
the losses independent normal draws; and over k judged evaluations were they independent (an upper bound for the
correlated evaluations of real runs; the char model judges 17, gpt2-small 5).   python scripts/method_a_null_rate.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from tr2.method_a import chance_of_failing  # noqa: E402

for n in (3, 5):
    q = chance_of_failing(n, n, 1)["one_step"]
    print(f"{n} seeds a side: one step fails with probability {q:.4f}; any of k independent steps: "
          + ", ".join(f"k={k} {chance_of_failing(n, n, k)['any_step_bound']:.3f}" for k in (1, 5, 17)))
