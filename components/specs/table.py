"""Plain-text tables for terminal output (trial tables, recurring runs)."""


def text_table(rows: list[list[str]]) -> str:
    """Rows as left-aligned columns two spaces apart (the first row is the header)."""
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
