#!/usr/bin/env python3
"""An outside ranker for digestbot: BM25 over each reader's library and ratings.

Speaks digestbot-ranker/1 (docs/rankers.md) over HTTP, with the standard library only:

    python3 examples/rankers/bm25/ranker.py --port 8765

and, in digestbot's configuration, ``ranker.url = "http://127.0.0.1:8765/"``.  Each
reader's profile is the words of their library (titles and abstracts) and of the
entries they asked "More like this" of; the entries they asked "Less like this" of
count against a candidate at half weight.  A candidate's score is its BM25 against
the profile, its reason the profile's words it shares most.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROTOCOL = "digestbot-ranker/1"
MAX_REQUEST_BYTES = 256 * 2**20
K1, B = 1.2, 0.75
LESS_WEIGHT = 0.5
WORD = re.compile(r"[^\W\d_]{3,}")
STOP = frozenset(
    "the and for with that this from are was were which their these those into than then them they "
    "our its has have had not but can also use using based via over under more less new show".split()
)


def words(text: str) -> list[str]:
    return [word for word in WORD.findall(text.casefold()) if word not in STOP]


def rank(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request: every reader's candidates scored."""
    documents = {
        c["id"]: Counter(words(" ".join([c["title"], c["summary"], *c["authors"], *c["tags"]])))
        for c in request["candidates"]
    }
    average = sum(sum(d.values()) for d in documents.values()) / max(1, len(documents))
    frequency = Counter(term for document in documents for term in documents[document])
    idf = {t: math.log(1 + (len(documents) - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}

    # Per candidate, each term's BM25 weight: computed once, shared by every reader.
    norms = {
        entry: K1 * (1 - B + B * sum(document.values()) / max(average, 1)) for entry, document in documents.items()
    }
    weights = {
        entry: {term: idf[term] * tf * (K1 + 1) / (tf + norms[entry]) for term, tf in document.items()}
        for entry, document in documents.items()
    }

    def bm25(profile: Counter[str], entry: int) -> tuple[float, list[str]]:
        parts = {term: profile[term] * weight for term, weight in weights[entry].items() if term in profile}
        return sum(parts.values()), sorted(parts, key=parts.__getitem__, reverse=True)[:3]

    readers = []
    for reader in request["readers"]:
        liked = [p["title"] + " " + p["abstract"] for p in reader["library"]]
        liked += [r["title"] for r in reader["ratings"] if r["rating"] == "more"]
        disliked = [r["title"] for r in reader["ratings"] if r["rating"] == "less"]
        profile = Counter(words(" ".join(liked + reader["interests"])))
        against = Counter(words(" ".join(disliked)))
        scores = []
        for entry in reader["candidates"]:
            score, shared = bm25(profile, entry)
            penalty, _ = bm25(against, entry)
            reason = "shares " + ", ".join(shared) if shared else ""
            scores.append({"entry": entry, "score": round(score - LESS_WEIGHT * penalty, 6), "reason": reason})
        readers.append({"id": reader["id"], "scores": scores})
    return {"protocol": PROTOCOL, "readers": readers}


class Handler(BaseHTTPRequestHandler):
    server_version = "bm25-ranker/1"

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_REQUEST_BYTES:
            self._answer(413 if length.isdigit() else 411, {"error": "a Content-Length up to 256 MiB"})
            return
        started = time.monotonic()
        try:
            request = json.loads(self.rfile.read(int(length)))
            if request.get("protocol") != PROTOCOL:
                raise ValueError(f"not {PROTOCOL}")
            answer = rank(request)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
            self._answer(400, {"error": str(error)[:200]})
            log(f"refused a request: {str(error)[:200]}")
            return
        self._answer(200, answer)
        readers = answer["readers"]
        scored = sum(len(reader["scores"]) for reader in readers)
        log(f"ranked {len(readers)} readers, {scored} entries in {time.monotonic() - started:.3f} s")

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        return  # one line a request of its own (``log``), not http.server's access lines


def log(line: str) -> None:
    """One line a request on stderr, with the time: what the operator sees it doing."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free one")
    options = parser.parse_args()
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    print(f"listening on http://{options.host}:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
