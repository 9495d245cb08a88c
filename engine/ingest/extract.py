"""HTML to text with trafilatura, keeping headings as Markdown "#" lines so chunks know their section."""
from __future__ import annotations

import re
from xml.etree import ElementTree as ET

_PILCROW = re.compile(r"[¶\u00b6]\s*$")
_WS = re.compile(r"[ \t\r\f\v]+")


TITLE_SCAN = 200_000
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")   # keeps offsets
_SITE_SEP = re.compile(r"\s+(?:—|\||–)\s+")


class ExtractionFailed(ValueError):
    pass


def _title_tag(html: str) -> str | None:
    """The document's own <title>, less a trailing site name ("json — … — Python 3.11 docs")."""
    import html as htmllib

    head = html[:TITLE_SCAN]
    low = head.translate(_ASCII_LOWER)
    # the first <title…>…</title>, by three forward finds (`<title[^>]*>(.*?)</title>` scanned to the
    # end again from every "<title" that had no close: quadratic in a page of them)
    start = low.find("<title")
    opened = head.find(">", start) if start >= 0 else -1
    closed = low.find("</title>", opened + 1) if opened >= 0 else -1
    if closed < 0:
        return None
    t = " ".join(htmllib.unescape(head[opened + 1:closed]).split())
    parts = _SITE_SEP.split(t)
    if len(parts) >= 3 or (len(parts) == 2 and re.search(r"documentation|\bdocs\b|\bwiki\b", parts[-1], re.I)):
        t = " — ".join(parts[:-1])
    return t or None


_BLOCKS = ("p", "list", "code", "quote", "table", "head")


def _inline(el: ET.Element) -> str:
    """An element's text as one line: its inline parts (emphasis, inline code) joined as they stand in
    the sentence — never with a separator, which turned `f(a, x)` into `f( | a | , | x | )` — and the
    pilcrow of a permalink dropped."""
    return _PILCROW.sub("", _WS.sub(" ", " ".join("".join(el.itertext()).split("\n"))).strip()).strip()


def _item_lines(item: ET.Element, depth: int) -> list[str]:
    """A list item as lines: its inline runs as one line each, each paragraph of a definition (a <dd>
    holds several) a line of its own, a nested list indented."""
    lines: list[str] = []
    run = [item.text or ""]

    def flush() -> None:
        text = _PILCROW.sub("", _WS.sub(" ", " ".join("".join(run).split("\n"))).strip()).strip()
        if text:
            lines.append(text)
        run.clear()

    for child in item:
        if child.tag == "list":
            flush()
            lines += ["  " + ln for ln in _list_lines(child, depth + 1)]
        elif child.tag == "code" and "\n" in "".join(child.itertext()).strip("\n"):
            flush()   # a code block inside a definition: its lines kept
            lines += [ln.rstrip() for ln in "".join(child.itertext()).strip("\n").splitlines() if ln.strip()]
        elif child.tag in _BLOCKS and child.tag != "code":
            flush()
            text = _inline(child)
            if text:
                lines.append(text)
        else:
            run.append("".join(child.itertext()))
        run.append(child.tail or "")
    flush()
    return lines


def _list_lines(el: ET.Element, depth: int = 0) -> list[str]:
    """A list's lines: "- " before each item of a bulleted or numbered list; a definition list's
    terms and definitions as plain lines (a term is a signature or a name, not a bullet)."""
    bullet = "" if (el.get("rend") or "") == "dl" else "- "
    out: list[str] = []
    for item in el.findall("item"):
        lines = _item_lines(item, depth)
        if lines:
            out.append(bullet + lines[0])
            out += lines[1:]
    return out


def html_to_text(html: str) -> tuple[str, str | None]:
    """Return (body_text, title) extracted from an HTML document.

    body_text has one block per paragraph separated by blank lines; headings are written as
    Markdown headings ("## Section") so the chunker can keep each chunk's heading trail.
    """
    import trafilatura

    xml = trafilatura.extract(
        html,
        output_format="xml",
        include_formatting=True,
        include_tables=True,
        include_comments=False,
        include_links=False,
        favor_recall=True,
        with_metadata=True,
    )
    if not xml:
        raise ExtractionFailed("no main text could be extracted from the HTML")
    root = ET.fromstring(xml)
    title = _title_tag(html) or root.get("title") or None
    main = root.find("main")
    blocks: list[str] = []
    for el in (main if main is not None else root):
        text = "".join(el.itertext())
        if el.tag == "head":
            level = int((el.get("rend") or "h2").lstrip("h") or 2) if (el.get("rend") or "").startswith("h") else 2
            line = _PILCROW.sub("", _WS.sub(" ", text).strip())
            if line:
                blocks.append("#" * max(1, min(level, 6)) + " " + line)
        elif el.tag == "code":
            code = text.strip("\n")
            if code.strip():
                blocks.append(code)
        elif el.tag == "list":
            rows = _list_lines(el)
            if rows:
                blocks.append("\n".join(rows))
        elif el.tag == "table":
            rows = []
            for row in el.iter("row"):   # cells apart, each cell's inline text (code, emphasis) whole
                cells = [c for c in (_inline(cell) for cell in row.findall("cell")) if c]
                if cells:
                    rows.append(" | ".join(cells))
            if rows:
                blocks.append("\n".join(rows))
        else:
            para = _PILCROW.sub("", "\n".join(_WS.sub(" ", ln).strip() for ln in text.splitlines()).strip())
            para = re.sub(r"\n(?!\n)", " ", para)
            if para:
                blocks.append(para)
    body = "\n\n".join(blocks).strip()
    if not body:
        raise ExtractionFailed("the HTML has no text")
    if title:
        title = _PILCROW.sub("", title).strip()
    return body, title
