"""The text side of search, the same on both databases: the query's words and the snippets.

A query is read as PostgreSQL's `websearch_to_tsquery` reads it: words are
ANDed, `"a phrase"` keeps its order, `or` between two terms is OR, `-word`
and `-"a phrase"` exclude. `parse` turns it into that structure once, and
`fts5_expression` writes it for SQLite's FTS5 (whose porter tokenizer stems
as PostgreSQL's English configuration mostly does; English stop words are
dropped from it as PostgreSQL drops them). A query without a word to find
(only stop words, only exclusions) finds nothing on either database: an
exclusion alone would be a scan of everything.

Snippets: each database marks the matching words of a hit's text
(`ts_headline … HighlightAll` on PostgreSQL, FTS5 `highlight()` on SQLite)
with MARK_START/MARK_STOP (neighbouring marked words become one run), and `snippet` cuts the same window around the
first mark on both: up to CONTEXT_BEFORE characters before it, at most
SNIPPET_MAX_CHARS in all, matches in `**bold**`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SNIPPET_MAX_CHARS = 300
CONTEXT_BEFORE = 80
ELLIPSIS = "…"
MAX_WEBSEARCH_WORDS = 32
# Private-use characters: never in a note an agent writes, and kept by both databases' highlighters.
MARK_START = "\ue000"
MARK_STOP = "\ue001"

# PostgreSQL's English stop words (share/tsearch_data/english.stop): never indexed there, never searched here.
ENGLISH_STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself it its itself they them their theirs themselves what which who whom this that these those am is are
    was were be been being have has had having do does did doing a an the and but if or because as until while
    of at by for with about against between into through during before after above below to from up down in out
    on off over under again further then once here there when where why how all any both each few more most
    other some such no nor not only own same so than too very s t can will just don should now""".split()  # noqa: SIM905
)

_DASH_RUNS = re.compile(r"-{2,}")
_LONE_DASHES = re.compile(r"-(?![\w\"])")
_ITEM = re.compile(r'(-?)"([^"]*)"?|(-?)([^\s"]+)')
_TOKEN = re.compile(r"[^\W_]+")


def websearch_text(query: str) -> str:
    """The query as `websearch_to_tsquery` may safely read it.

    A `-` before a word means NOT; a run of them (a Markdown rule, which agents
    paste) nests NOTs until PostgreSQL answers "tsquery stack too small". So
    runs of dashes and dashes before no word become spaces, and at most
    MAX_WEBSEARCH_WORDS words are kept; `-word` and `-"a phrase"` keep their
    meaning.
    """
    text = _LONE_DASHES.sub(" ", _DASH_RUNS.sub(" ", query))
    return " ".join(text.split()[:MAX_WEBSEARCH_WORDS])


@dataclass
class ParsedQuery:
    # AND of groups; each group is an OR of phrases; a phrase is its tokens in order.
    groups: list[list[tuple[str, ...]]] = field(default_factory=list)
    excluded: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def finds_anything(self) -> bool:
        return bool(self.groups)


def _tokens(text: str, *, phrase: bool) -> tuple[str, ...]:
    tokens = [token.lower() for token in _TOKEN.findall(text)]
    if not phrase:
        return tuple(token for token in tokens if token not in ENGLISH_STOP_WORDS)
    while tokens and tokens[0] in ENGLISH_STOP_WORDS:
        tokens.pop(0)
    while tokens and tokens[-1] in ENGLISH_STOP_WORDS:
        tokens.pop()
    return tuple(tokens)


def parse(query: str) -> ParsedQuery:
    """The query's structure, read as `websearch_to_tsquery` reads `websearch_text(query)`."""
    parsed = ParsedQuery()
    pending_or = False
    for match in _ITEM.finditer(websearch_text(query)):
        quoted_neg, quoted, bare_neg, bare = match.groups()
        if bare is not None and bare.lower() == "or" and not bare_neg:
            pending_or = bool(parsed.groups)
            continue
        tokens = _tokens(quoted if quoted is not None else bare, phrase=quoted is not None)
        if not tokens:
            continue
        if quoted_neg or bare_neg:
            parsed.excluded.append(tokens)
            pending_or = False
        elif pending_or:
            parsed.groups[-1].append(tokens)
            pending_or = False
        else:
            parsed.groups.append([tokens])
    return parsed


def _phrase(tokens: tuple[str, ...]) -> str:
    return '"' + " ".join(tokens) + '"'  # tokens are letters and digits only: nothing to escape


def fts5_expression(parsed: ParsedQuery) -> str:
    """The FTS5 MATCH expression of a query that finds anything."""
    expression = " AND ".join("(" + " OR ".join(_phrase(tokens) for tokens in group) + ")" for group in parsed.groups)
    for tokens in parsed.excluded:
        expression = f"({expression}) NOT {_phrase(tokens)}"
    return expression


def snippet(marked: str | None, *, fallback: str) -> str:
    """At most SNIPPET_MAX_CHARS characters around the first marked match, matches in `**bold**`."""
    text = re.sub(r"\s+", " ", marked or "").strip()
    # Neighbouring marked words are one bold run (FTS5 marks a phrase whole, PostgreSQL word by word).
    text = text.replace(f"{MARK_STOP} {MARK_START}", " ")
    first = text.find(MARK_START)
    if first < 0:
        text = text.replace(MARK_STOP, "") or re.sub(r"\s+", " ", fallback).strip()
        start = 0
    else:
        start = max(0, first - CONTEXT_BEFORE)
        if start > 0:  # begin at a word
            space = text.find(" ", start, first)
            start = space + 1 if space >= 0 else first
    prefix = ELLIPSIS if start > 0 else ""
    room = SNIPPET_MAX_CHARS - len(prefix) - len(ELLIPSIS)
    pieces = re.split(f"({MARK_START}[^{MARK_STOP}]*{MARK_STOP}?)", text[start:])
    out = ""
    cut = False
    for piece in pieces:
        bold = piece.startswith(MARK_START)
        shown = "**" + piece.strip(MARK_START + MARK_STOP) + "**" if bold else piece.replace(MARK_STOP, "")
        if len(out) + len(shown) <= room:
            out += shown
            continue
        cut = True
        if not bold:
            left = shown[: room - len(out)]
            out += left[: left.rfind(" ")] if " " in left else left
        break
    if cut:
        out = out.rstrip() + ELLIPSIS
    return prefix + out
