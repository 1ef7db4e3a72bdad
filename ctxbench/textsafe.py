"""Free text on its way into an output: the one place it is made safe for each kind of output.

Labels, model paths, dataset names and a model's answers are text that a user or a model chose, and
they reach CSV files, markdown tables and HTML. Each writer passes them through here:

- **CSV** (OWASP's "CSV injection" rule): a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab
  or a carriage return is run as a formula by Excel, LibreOffice and Google Sheets
  (``=HYPERLINK(...)``, ``@SUM(...)``, ``-2+3``). Such a cell is written with a leading ``'``, which
  spreadsheets show as text. A number (``-0.5``, ``-inf``) is left as it is: it is not a formula,
  and it must stay a number for pandas. So that reading gives back exactly what was written, a cell
  that itself starts with ``'`` gains one too, and :func:`csv_unescape` takes one away.
- **Markdown tables**: ``|`` would end the cell and a newline the row; ``<`` before a tag name and
  ``&`` before an entity would pass raw HTML through to a renderer. :func:`md_cell` escapes them
  (CommonMark: ``\\|`` in a table, ``&lt;`` and ``&amp;``).
- **HTML**: :func:`html.escape`, quotes included.
"""

from __future__ import annotations

import html
import re

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def csv_escape(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs as a formula (OWASP), numbers kept as they are."""
    if text.startswith("'") or (text.startswith(FORMULA_STARTS) and not _is_number(text)):
        return "'" + text
    return text


def csv_unescape(text: str) -> str:
    """The inverse of :func:`csv_escape`: a cell read back from a file ctxbench wrote."""
    return text[1:] if text.startswith("'") else text


# CommonMark passes raw HTML through where ``<`` opens a tag, a comment or a declaration (a letter,
# ``/``, ``!`` or ``?`` after it) and turns ``&name;`` into a character: only those are escaped, so
# ctxbench's own ``[<4k–8k]`` and ``right -> wrong`` read as they are in the raw markdown too.
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?\w+;)")
_BREAK = re.compile(r"[\r\n]+")


def md_line(text: object) -> str:
    """``text`` as one markdown line (a heading, a note): on one line, no HTML passing through."""
    return _BREAK.sub(" ", _TAG.sub("&lt;", _ENTITY.sub("&amp;", str(text))))


def md_cell(text: object) -> str:
    """``text`` as one markdown table cell: no ``|`` or line break ends it, no HTML passes through."""
    return md_line(text).replace("|", "\\|")


def html_text(text: object) -> str:
    """``text`` for HTML: ``& < > " '`` as entities."""
    return html.escape(str(text), quote=True)
