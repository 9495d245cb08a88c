import pytest

from engine.core.urls import InvalidURL, domain_of, is_bare_domain, normalize_url, page_id_for


@pytest.mark.parametrize("a,b", [
    ("http://www.Example.com:80/a/b/?b=2&a=1#top", "https://example.com/a/b?b=2&a=1"),
    ("example.com/docs/", "https://example.com/docs"),
    ("HTTPS://WWW.EXAMPLE.COM:443/docs#intro", "http://example.com/docs/"),
    ("https://example.com//a//b", "https://example.com/a/b"),
    ("https://EXAMPLE.com/%7Euser", "https://example.com/~user"),
])
def test_equivalent_urls_normalise_alike(a, b):
    assert normalize_url(a) == normalize_url(b)


@pytest.mark.parametrize("a,b", [
    ("https://example.com/a", "https://example.com/b"),
    ("https://example.com/a?x=1", "https://example.com/a?x=2"),
    ("https://example.com:8443/a", "https://example.com/a"),
    ("https://example.com/A", "https://example.com/a"),  # paths are case-sensitive
    ("https://example.com/a?b=2&a=1", "https://example.com/a?a=1&b=2"),  # the query is kept as given
    ("https://example.com/docs/index.html", "https://example.com/docs/"),
])
def test_different_urls_stay_different(a, b):
    assert normalize_url(a) != normalize_url(b)


def test_page_id_is_stable_and_workspace_scoped():
    n = normalize_url("https://docs.python.org/3/library/json.html")
    assert page_id_for("default", n) == page_id_for("default", n)
    assert page_id_for("default", n) != page_id_for("other", n)


@pytest.mark.parametrize("bad", ["", "   ", "ftp://example.com/x", "mailto:someone@example.com", "http://"])
def test_bad_urls_are_refused(bad):
    with pytest.raises(InvalidURL):
        normalize_url(bad)


def test_domain_and_bare_domain():
    assert domain_of("https://www.PostgreSQL.org/docs/15/x.html") == "postgresql.org"
    assert is_bare_domain("postgresql.org") and is_bare_domain("www.sqlite.org")
    assert not is_bare_domain("how to use json") and not is_bare_domain("https://sqlite.org/x")
