#!/usr/bin/env python3
"""A stand-in chat model behind the OpenAI-compatible ``/v1/chat/completions``, for trying
digestbot's TL;DRs (docs/llm.md) with no model at all: it answers each request with
"TL;DR: " and the first sentence of the abstract it was sent, cut to 180 characters.
Standard library only; any Python 3 runs it, in any environment:

    python3 examples/chat/first_sentence_server.py --port 8767

and, in digestbot's configuration, ``llm.base_url = "http://127.0.0.1:8767/v1"`` with
``llm.chat_model = "first-sentence"``; then ``digestbot llm tldrs``.  Not a summary: a
way to see where TL;DRs show up in the digest, the feed and the pages.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_SENTENCE = re.compile(r"(.+?[.!?])(\s|$)", re.DOTALL)


def first_sentence(prompt: str) -> str:
    """The first sentence after the prompt's "Abstract:" (or of the whole prompt)."""
    text = prompt.split("Abstract:", 1)[-1].strip()
    found = _SENTENCE.match(text)
    sentence = " ".join((found.group(1) if found else text).split())
    return sentence[:180].rstrip() or "NO TLDR"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass

    def do_POST(self) -> None:
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            prompt = "\n".join(
                str(m.get("content", "")) for m in request.get("messages", []) if m.get("role") == "user"
            )
        except (ValueError, AttributeError):
            self.send_error(400)
            return
        sentence = first_sentence(prompt)
        answer = sentence if sentence == "NO TLDR" else f"TL;DR: {sentence}"
        body = json.dumps(
            {
                "object": "chat.completion",
                "model": request.get("model", "first-sentence"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(answer) // 4,
                          "total_tokens": (len(prompt) + len(answer)) // 4},
            }
        ).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8767)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"listening on {args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
