import pytest

from engine.ingest.extract import ExtractionFailed, html_to_text

HTML = """<html><head><title>Widgets — How to make them — Example Docs</title></head><body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<main><h1>Widgets</h1><p>A widget is a small gadget made of brass and patience.</p>
<h2>Making one</h2><p>First, take a sheet of brass and cut it into a circle of ten centimetres.</p>
<p>Then polish the circle until it shines like the morning sun over the harbour.</p>
<h2>Using one</h2><p>Place the widget on a flat table and admire it for several minutes.</p></main>
<footer>Copyright 2026 Example</footer></body></html>"""


def test_headings_become_markdown_lines_and_title_drops_site_name():
    body, title = html_to_text(HTML)
    assert title == "Widgets — How to make them"
    assert "# Widgets" in body.splitlines()
    assert "## Making one" in body.splitlines()
    assert "cut it into a circle" in body
    assert "Copyright 2026" not in body and "About" not in body.split("\n")[0]


def test_html_without_text_is_refused():
    with pytest.raises(ExtractionFailed):
        html_to_text("<html><body><script>var x = 1;</script></body></html>")
