"""The plain-text table that the benchmark scripts print.

Imported by those scripts from their own folder (``python benchmarks/<script>.py`` puts it
on ``sys.path``)."""

from __future__ import annotations


def table_lines(hdr, rows, left: int = 1, group_col: int | None = None) -> list[str]:
    """Header, rule and rows with columns padded to fit; the first ``left`` columns are
    left-aligned (labels), the rest right-aligned (numbers). With ``group_col``, a blank line
    separates rows whose value in that column changes."""
    widths = [max(len(r[i]) for r in [*rows, hdr]) for i in range(len(hdr))]

    def line(r):
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    out = [line(hdr), "  ".join("-" * w for w in widths)]
    for i, r in enumerate(rows):
        if group_col is not None and i and r[group_col] != rows[i - 1][group_col]:
            out.append("")
        out.append(line(r))
    return out
