"""The benchmark report: the throughput, per-call, memory and compile-time tables (plain text or
Markdown), the failures with the command that reproduces them, the JSON file and the bar chart.
"""
from __future__ import annotations

import json


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


def _fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def render_table(headers, rows, markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(h)), *(len(str(row[i])) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


def _speedup_text(record, e):
    if "speedup" not in e:
        return "-"
    if e["impl"] == "cinnlite":
        return f"{e['speedup']:.2f}x vs {record['best_peer']}"
    return f"{e['speedup']:.2f}x"


def throughput_rows(records: list) -> list:
    rows = []
    for r in records:
        if r.get("unit") == "us/call":
            continue
        for e in r["impls"]:
            rows.append([r["id"], e["impl"],
                         _fmt_time(e.get("median_s")) if e.get("ok") else e.get("error", "failed"),
                         f"{e['gbps']:.2f}" if "gbps" in e else "-",
                         _speedup_text(r, e),
                         f"{e['pct_of_copy']:.0f}%" if "pct_of_copy" in e else "-",
                         e.get("note", "")])
        rows.append([r["id"], "copy (ceiling)", _fmt_time(r["copy"]["median_s"]), f"{r['copy']['gbps']:.2f}",
                     "", "100%", f"np.copyto of {fmt_bytes(r['bytes_moved'] / 2)}"])
    return rows


def overhead_rows(records: list) -> list:
    rows = []
    for r in records:
        if r.get("unit") != "us/call":
            continue
        for e in r["impls"]:
            rows.append([r["id"], e["impl"], f"{e['median_s'] * 1e6:.2f}" if "median_s" in e else e.get("error", "failed"),
                         _speedup_text(r, e), e.get("note", "")])
    return rows


def print_report(results: dict, markdown: bool):
    records = results["workloads"]
    print_throughput(records, markdown)
    print_overhead(records, markdown)
    if results.get("memory"):
        print_memory(results["memory"], markdown)
    if results.get("compile"):
        print_compile(results["compile"], markdown)
    print_failures(records, results["config"]["quick"])


def print_throughput(records: list, markdown: bool):
    tput = throughput_rows(records)
    if not tput:
        return
    print("Throughput (median of timed calls; GB/s = minimal bytes moved / median time;")
    print("speedup > 1 means cinnlite is faster; % copy = share of np.copyto bandwidth on the same bytes)")
    print()
    print(render_table(["id", "impl", "median", "GB/s", "cinnlite speedup", "% copy", "notes"], tput, markdown))
    print()
    print("Bytes moved per workload:")
    for r in records:
        if r.get("unit") != "us/call":
            print(f"  {r['id']} {r['title']}: {r['shapes']}; {fmt_bytes(r['bytes_moved'])} = {r['bytes_formula']}")
    print()


def print_overhead(records: list, markdown: bool):
    over = overhead_rows(records)
    if not over:
        return
    r = next(r for r in records if r.get("unit") == "us/call")
    print(f"Per-call overhead (W7: {r['shapes']}; median over 20 batches of {r['calls'] // 20} calls)")
    print()
    print(render_table(["id", "impl", "us/call", "cinnlite speedup", "notes"], over, markdown))
    print()


def print_memory(mem: dict, markdown: bool):
    print(f"W6 peak memory (fresh process per implementation; output allocated inside the measured call; "
          f"output {fmt_bytes(mem['output_bytes'])}, unfused intermediate {fmt_bytes(mem['intermediate_bytes'])})")
    print()
    rows = []
    for e in mem["impls"]:
        if "error" in e:
            rows.append([e["impl"], e["error"], "-", "-"])
            continue
        traced = e.get("tracemalloc_peak_bytes")
        rows.append([e["impl"], f"{e['peak_rss_delta_bytes'] / 1e6:.1f} MB",
                     f"{traced / 1e6:.1f} MB" if traced is not None else "- (not visible)", e["method"]])
    print(render_table(["impl", "peak RSS above inputs", "tracemalloc peak", "method"], rows, markdown))
    print()


def print_compile(comp: dict, markdown: bool):
    print("W8 compile time (fresh process each; CINNLITE_CACHE_DIR = a new empty directory for cold, "
          f"then the same directory in one more process; medians of {comp.get('repeat', 1)} round(s))")
    print()
    print(render_table(["what", "cold", "from the disk cache"], _compile_rows(comp), markdown))
    print(f"  (cache directory held {comp['cache_files']} file(s) after a round; a cold time of the first "
          "compile of a process includes one-time LLVM initialisation)")
    print()


def _compile_rows(comp: dict) -> list:
    rows = []
    cold, cached = comp["cinnlite_cold"], comp["cinnlite_cached"]
    load = comp.get("cinnlite_load", {})
    for key, what in (("one", "cinnlite one operator (take), first compile of a process"),
                      ("chain", "cinnlite 20-operator chain, first compile of a process")):
        c = comp.get(f"cinnlite_{key}")
        if c is not None:
            rows.append([what, c.get("error") or _fmt_time(c.get(key)), _fmt_time(load.get(key))])
    for wid in comp["programs"]:
        rows.append([f"cinnlite {wid} program", _fmt_time(cold.get(wid)), _fmt_time(cached.get(wid))])
    if "error" not in cold and "error" not in cached:
        rows.append(["cinnlite all six programs", _fmt_time(sum(cold.values())), _fmt_time(sum(cached.values()))])
    else:
        rows.append(["cinnlite", cold.get("error", ""), cached.get("error", "")])
    if comp.get("cinnlite_load_each") is not None:
        rows.append(["cinnlite disk cache load: first of a process / each later one", "",
                     f"{_fmt_time(comp['cinnlite_load_first'])} / {_fmt_time(comp['cinnlite_load_each'])}"])
    if "tvm" in comp:
        t = comp["tvm"]
        if "error" in t:
            rows.append(["tvm W1 take", t["error"], ""])
        else:
            rows.append(["tvm W1 take (topi.take + schedule + tvm.build)", _fmt_time(t["first"]),
                         _fmt_time(t["second"]) + " (2nd build, same process)"])
    return rows


def print_failures(records: list, quick: bool):
    errors = [(r["id"], err) for r in records for err in r["errors"]]
    if not errors:
        return
    print("FAILURES:")
    for wid, err in errors:
        print(f"--- {wid} {err}")
    again = ",".join(sorted({wid for wid, _ in errors}))
    print(f"reproduce with: python benchmarks/bench.py --only {again}{' --quick' if quick else ''}")
    print()


def write_json(results: dict, path: str):
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(f"results written to {path}")


def save_png(results: dict, path: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print(f"(--png {path}: matplotlib is not installed; no chart written)")
        return
    records = [r for r in results["workloads"] if r.get("unit") != "us/call"]
    impls = ["cinnlite", "numpy", "torch", "tvm"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / (len(impls) + 1)
    for k, name in enumerate(impls + ["copy"]):
        ax.bar([i + k * width for i in range(len(records))], _gbps_of(records, name), width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(records))])
    ax.set_xticklabels([f"{r['id']}\n{r['title']}" for r in records], fontsize=7)
    ax.set_ylabel("GB/s (minimal bytes moved / median time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart written to {path}")


def _gbps_of(records: list, name: str) -> list:
    """GB/s of implementation ``name`` on every workload (0 where it did not run)."""
    vals = []
    for r in records:
        if name == "copy":
            vals.append(r["copy"]["gbps"])
        else:
            e = next((e for e in r["impls"] if e["impl"] == name and "gbps" in e), None)
            vals.append(e["gbps"] if e else 0.0)
    return vals
