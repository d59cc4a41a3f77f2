"""Every script in examples/ runs and writes its PNG (small enough for the README)."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

FOLDER = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = sorted(p for p in FOLDER.glob("*.py") if not p.name.startswith("_"))


def test_every_example_is_listed():
    assert {p.stem for p in EXAMPLES} >= {"circle_lift", "ellipse_kpca", "curve_cubic", "kernel_kmeans_circles",
                                           "rff_error"}


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_writes_its_image(script, tmp_path):
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    images = list(tmp_path.glob("*.png"))
    assert [p.stem for p in images] == [script.stem]
    assert images[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and images[0].stat().st_size < 100_000
