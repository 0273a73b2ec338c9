"""The table ``peers.py`` prints (Markdown, so it can be pasted into the README as is)."""

from __future__ import annotations

from typing import Any

X = "\u00d7"
"""The multiplication sign the ratios are written with."""

DB_LABEL = {"sqlite": "SQLite file", "postgres": "PostgreSQL",
            "restate": "Restate's own storage"}
LIB_ORDER = ("underway", "dbos", "langgraph", "restate")
LIB_LABEL = {"underway": "underway", "dbos": "DBOS", "langgraph": "LangGraph",
             "restate": "Restate"}
HEAD = ("database", "library", f"1{X}1000: ms/step ({X} floor)",
        f"100{X}10: ms/step ({X} floor)", f"100 in flight: steps/s ({X} floor)",
        "first resumed step", "commits/step", "bytes/step")


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _row(db: str, lib: str, fig: dict[str, Any]) -> list[str]:
    label = LIB_LABEL[lib]
    if not fig.get("measured"):
        return [DB_LABEL[db], label, f"not measured: {fig.get('why', '?')}", "", "", "", "", ""]
    shapes = fig["shapes"]
    seq, short, fly = shapes["1x1000"], shapes["100x10"], shapes["100_in_flight"]
    if "commits_per_step" in seq:
        commits = f"{seq['commits_per_step']:.2f} commits"
    elif "fsyncs_per_step" in fig:
        commits = f"{fig['fsyncs_per_step']['1x200']:.2f} fsyncs"
    else:
        commits = "not counted"
    resume = fig.get("kill_at_500_of_1000")
    return [
        DB_LABEL[db], label,
        f"{_num(seq['ms_per_step'])} ({_num(seq['ratio_to_floor'])}{X})",
        f"{_num(short['ms_per_step'])} ({_num(short['ratio_to_floor'])}{X})",
        f"{_num(fly['steps_per_second'])}/s ({_num(fly['ratio_to_floor'])}{X})",
        f"{_num(resume['first_resumed_step_ms'])} ms" if resume else "-",
        commits,
        f"{seq['bytes_per_step']:,.0f}",
    ]


def table(report: dict[str, Any]) -> str:
    """The report as a Markdown table, floors first, then each database's libraries."""
    rows: list[list[str]] = []
    dbs = report.get("databases", {})
    for db in ("sqlite", "postgres"):
        if "floor_ms_per_commit" in dbs.get(db, {}):
            ms = dbs[db]["floor_ms_per_commit"]
            rows.append([DB_LABEL[db], "floor: INSERT + COMMIT", f"{_num(ms)} (1{X})", "", "",
                         "", "1 commit", ""])
    peers = report.get("peers", {})
    for db in ("sqlite", "postgres", "restate"):
        for lib in LIB_ORDER:
            if lib in peers.get(db, {}):
                rows.append(_row(db, lib, peers[db][lib]))
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    for lib, why in report.get("not_measured", {}).items():
        lines.append(f"| | {LIB_LABEL[lib]} | not measured: {why} | | | | | |")
    return "\n".join(lines)
