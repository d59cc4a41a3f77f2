"""Condensed markdown table of the Nyström suite's UCI part (the README table).

    python benchmarks/tools/summarize_uci.py [RESULT.json]   # default benchmarks/results/nystroem/latest.json
"""
from pathlib import Path
import json, sys
path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "results" / "nystroem" / "latest.json"
d = json.load(open(path))
d = d["parts"]["uci"] if "parts" in d else d  # a suite result, or an older single-part file (history/)
rows = d["rows"]
def t(r): return r.get("fit_predict_s", r["time_s"])
out = []
by = {}
for r in rows:
    by.setdefault((r["data"], r["n"]), {})[r["method"]] = r
print("| data | n | M | exact KRR: mercer f64 / sklearn (s) | exact RMSE | Nyström KRR: mercer / sklearn Nystroem+Ridge (s) | ratio | Nyström RMSE mercer / sklearn | Nyström RMSE / exact | RFF ridge (D = M): s, RMSE |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (name, n), g in by.items():
    M = next(iter(g.values()))["M"]
    me, se = g.get("mercer KernelRidge (exact, f64)"), g.get("sklearn KernelRidge (exact)")
    mn, sn = g.get("mercer NystroemKernelRidge (f32)"), g.get("sklearn Nystroem + Ridge")
    rf = g.get("mercer RandomFeatureRidge (D = M, f32)")
    ex = f"{t(me):.1f} / {t(se):.1f} ({t(me)/t(se):.2f}x)" if me else ""
    exr = f"{me['rmse']:.4f} / {se['rmse']:.4f}" if me else ""
    ny = f"{t(mn):.2f} / {t(sn):.2f}" if mn and sn else ""
    ratio = f"{t(mn)/t(sn):.2f}" if mn and sn else ""
    nyr = f"{mn['rmse']:.4f} / {sn['rmse']:.4f}" if mn and sn else ""
    rel = f"{mn['rmse']/me['rmse']:.3f}" if me and mn else ""
    rff = f"{t(rf):.2f}, {rf['rmse']:.4f}" if rf else ""
    print(f"| {name} | {n:,} | {M} | {ex} | {exr} | {ny} (it {mn['iterations'] if mn else ''}) | {ratio} | {nyr} | {rel} | {rff} |")
