#!/usr/bin/env python3
"""Writes bench/plot.svg (to standard output) from the JSON that bench/run.sh collected:
calls/s and p99 latency per scenario, quickstart (haip) next to the floor.

    python3 bench/plot.py target/bench-results > bench/plot.svg

Standard library only; the SVG is written by hand.
"""

import json
import math
import os
import sys
from xml.sax.saxutils import escape

from report import median_run

SERVERS = [("quickstart", "haip (quickstart)", "#2f6db5"), ("floor", "floor", "#9a9a9a")]
SCENARIOS = ["1x1", "1x32", "50x8"]
WIDTH, HEIGHT = 960, 480
PANEL_W, PANEL_H = 400, 300
TOP = 90


def load(directory, name):
    try:
        with open(os.path.join(directory, name + ".json")) as f:
            text = f.read().strip()
        return json.loads(text) if text else None
    except (OSError, ValueError):
        return None


def nice_max(value):
    """A round axis maximum at or above VALUE."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if step * exp >= value:
            return step * exp
    return 10 * exp


def fmt(value, unit):
    if value is None:
        return "n/a"
    if unit == "calls/s":
        return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}"


def tick(value, unit):
    if unit == "calls/s":
        return f"{value / 1000:g}k" if value else "0"
    return f"{value:g}"


def panel(x0, title, unit, values):
    """One bar chart; VALUES maps (server, scenario) to a number or None."""
    parts = []
    known = [v for v in values.values() if v is not None]
    top = nice_max(max(known) * 1.1 if known else 1.0)
    y_base = TOP + PANEL_H
    parts.append(
        f'<text x="{x0 + PANEL_W / 2}" y="{TOP - 30}" text-anchor="middle" class="title">{escape(title)}</text>'
    )
    for i in range(6):
        v = top * i / 5
        y = y_base - PANEL_H * i / 5
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{x0 - 8}" y="{y + 4:.1f}" text-anchor="end" class="tick">{tick(v, unit)}</text>')
    parts.append(f'<line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y_base}" class="axis"/>')
    parts.append(f'<line x1="{x0}" y1="{y_base}" x2="{x0 + PANEL_W}" y2="{y_base}" class="axis"/>')
    group_w = PANEL_W / len(SCENARIOS)
    bar_w = group_w * 0.32
    for g, scenario in enumerate(SCENARIOS):
        gx = x0 + g * group_w + group_w * 0.18
        for s, (server, _, color) in enumerate(SERVERS):
            v = values.get((server, scenario))
            bx = gx + s * bar_w
            if v is None:
                parts.append(
                    f'<text x="{bx + bar_w / 2:.1f}" y="{y_base - 6}" text-anchor="middle" class="value">n/a</text>'
                )
                continue
            h = PANEL_H * v / top
            parts.append(
                f'<rect x="{bx:.1f}" y="{y_base - h:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" fill="{color}">'
                f"<title>{escape(server)} {scenario}: {fmt(v, unit)} {escape(unit)}</title></rect>"
            )
            parts.append(
                f'<text x="{bx + bar_w / 2 - 1:.1f}" y="{y_base - h - 5:.1f}" text-anchor="middle" class="value">'
                f"{fmt(v, unit)}</text>"
            )
        label = scenario.replace("x", " × ")
        parts.append(
            f'<text x="{x0 + g * group_w + group_w / 2:.1f}" y="{y_base + 20}" text-anchor="middle" class="label">'
            f"{label}</text>"
        )
    parts.append(
        f'<text x="{x0 + PANEL_W / 2}" y="{y_base + 40}" text-anchor="middle" class="tick">'
        "connections × calls in flight</text>"
    )
    parts.append(
        f'<text x="{x0 - 48}" y="{TOP + PANEL_H / 2}" text-anchor="middle" class="tick" '
        f'transform="rotate(-90 {x0 - 48} {TOP + PANEL_H / 2})">{escape(unit)}</text>'
    )
    return parts


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "target/bench-results"
    meta = load(directory, "meta") or {}
    throughput, p99 = {}, {}
    for server, _, _ in SERVERS:
        for scenario in SCENARIOS:
            r = median_run(directory, server, scenario)
            throughput[(server, scenario)] = r.get("calls_per_second") if r else None
            p99[(server, scenario)] = r.get("latency_ms", {}).get("p99") if r else None

    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
        "<style>"
        ".title{font-size:16px;font-weight:bold;fill:#222}"
        ".label{font-size:13px;fill:#222}"
        ".tick{font-size:11px;fill:#555}"
        ".value{font-size:10px;fill:#222}"
        ".grid{stroke:#e4e4e4;stroke-width:1}"
        ".axis{stroke:#444;stroke-width:1}"
        "</style>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="26" text-anchor="middle" class="title">'
        f"haip echo benchmark: quickstart vs floor (median of {meta.get('repeat', '?')} runs of "
        f"{meta.get('seconds_per_scenario', '?')} s, "
        f"{meta.get('nproc', '?')} CPUs)</text>",
    ]
    svg += panel(80, "Throughput (higher is better)", "calls/s", throughput)
    svg += panel(80 + PANEL_W + 90, "p99 latency (lower is better)", "ms", p99)
    # Legend.
    lx = WIDTH / 2 - 150
    for i, (_, name, color) in enumerate(SERVERS):
        x = lx + i * 170
        svg.append(f'<rect x="{x}" y="{HEIGHT - 30}" width="14" height="14" fill="{color}"/>')
        svg.append(f'<text x="{x + 20}" y="{HEIGHT - 18}" class="label">{escape(name)}</text>')
    svg.append("</svg>")
    print("\n".join(svg))


if __name__ == "__main__":
    main()
