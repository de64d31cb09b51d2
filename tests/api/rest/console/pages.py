"""Reading console pages in tests: tables by caption, links, and a logged-in client."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from fastapi.testclient import TestClient

from tests.api.rest.helpers import Service

PAGES = (
    "/console/",
    "/console/budgets",
    "/console/budgets/hospital-1/records",
    "/console/rounds",
    "/console/rounds/round-1",
    "/console/outliers",
    "/console/decryptions",
    "/console/chain",
)


@dataclass
class Table:
    """One table: caption and rows of cell texts (header cells included)."""

    caption: str = ""
    rows: list[list[str]] = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[Table] = []
        self.links: list[str] = []
        self.texts: dict[str, list[str]] = {}
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None
        self._open: list[tuple[str, list[str], list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))
        if tag == "table":
            self.tables.append(Table())
        elif tag == "caption":
            self._caption = []
        elif tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []
        names = (values.get("class") or "").split()
        if names:
            self._open.append((tag, names, []))

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption" and self._caption is not None:
            self.tables[-1].caption = " ".join("".join(self._caption).split())
            self._caption = None
        elif tag in ("td", "th") and self._cell is not None:
            self.tables[-1].rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        if self._open and self._open[-1][0] == tag:
            _, names, parts = self._open.pop()
            for name in names:
                self.texts.setdefault(name, []).append(" ".join("".join(parts).split()))

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._caption):
            if part is not None:
                part.append(data)
        for _, _, parts in self._open:
            parts.append(data)


@dataclass
class Page:
    """A parsed page: its tables, links and the text of elements by class name."""

    html: str
    tables: list[Table]
    links: list[str]
    texts: dict[str, list[str]]

    def table(self, caption_start: str) -> Table:
        """Return the table whose caption starts with ``caption_start``."""
        for table in self.tables:
            if table.caption.startswith(caption_start):
                return table
        raise AssertionError(f"no table captioned {caption_start!r}: {self.captions}")

    @property
    def captions(self) -> list[str]:
        """Captions of every table, in page order."""
        return [t.caption for t in self.tables]

    def body_rows(self, caption_start: str) -> list[list[str]]:
        """Rows of a table without its header row."""
        return self.table(caption_start).rows[1:]


def parse(html: str) -> Page:
    """Parse a console page."""
    parser = _Parser()
    parser.feed(html)
    return Page(html=html, tables=parser.tables, links=parser.links, texts=parser.texts)


def logged_in(svc: Service, role: str = "officer") -> TestClient:
    """Return a client of its own holding the console cookie of ``role``'s token."""
    client = TestClient(svc.app, base_url="http://testserver")
    answer = client.post(
        "/console/login",
        data={"token": svc.tokens[role]},
        headers={"Accept": "text/html"},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/console/"
    assert client.cookies.get("sf_session")
    return client
