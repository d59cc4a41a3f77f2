"""Shared by the examples: where the image goes (``--out DIR``, default ``docs/images``) and the backend."""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no window

ROOT = Path(__file__).resolve().parents[1]


def output_path(name: str) -> Path:
    parser = argparse.ArgumentParser(description=f"Draw {name}.")
    parser.add_argument("--out", default=str(ROOT / "docs" / "images"), help="folder for the PNG")
    folder = Path(parser.parse_args().out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def save(fig, path: Path) -> None:
    fig.savefig(path, dpi=72)
    print(f"wrote {path}")
