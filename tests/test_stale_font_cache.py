"""A matplotlib font cache that another installation built (its bundled fonts' paths since
removed, as when a second virtual environment is deleted) must not fill a drawing command's
standard error with findfont warnings: the README's outputs are compared line by line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_stale_font_cache_prints_nothing(tmp_path):
    config = tmp_path / "mplconfig"
    config.mkdir()
    env = dict(os.environ, MPLCONFIGDIR=str(config))
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, check=True)
    cache = next(config.glob("fontlist-*.json"))
    data = json.loads(cache.read_text())
    # the fonts matplotlib ships (listed by paths relative to its data folder), gone with the
    # other installation; the system's own remain
    data["ttflist"] = [e for e in data["ttflist"] if Path(e["fname"]).is_absolute()]
    cache.write_text(json.dumps(data))
    sim3d = str(Path(sys.executable).parent / "sim3d")  # the console script a user runs
    done = subprocess.run([sim3d, "goodput", "scenarios/llama3.1-405b.yaml",
                           "--gpus", "16384", "--out", str(tmp_path / "g")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "findfont" not in done.stderr
