#!/usr/bin/env python3
"""A real embedding model behind the OpenAI-compatible ``/v1/embeddings``, for trying
digestbot's embeddings (docs/llm.md) where no model can be downloaded.

WordLlama (MIT) ships its 256-dimension weights inside its wheel, so this runs offline:

    pip install wordllama==0.4.0.post1
    python3 examples/embeddings/wordllama_server.py --port 8766

and, in digestbot's configuration, ``llm.base_url = "http://127.0.0.1:8766/v1"`` with
``llm.embedding_model = "wordllama-l2-256"``.  Answers ``{"model", "input"}`` (a string
or a list of strings) with one unit-length vector per input, in order.
"""

from __future__ import annotations

import argparse
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import wordllama
from wordllama import WordLlama

MAX_REQUEST_BYTES = 16 * 2**20
MODEL_NAME = "wordllama-l2-256"
# The wheel holds the weights and tokenizer under the package's own folder: loading from
# there never reaches for the network.
MODEL = WordLlama.load(dim=256, cache_dir=Path(wordllama.__file__).parent)


class Embeddings(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        length = int(self.headers.get("Content-Length") or 0)
        if self.path.rstrip("/") != "/v1/embeddings" or not 0 < length <= MAX_REQUEST_BYTES:
            return self._answer(404 if length else 400, {"error": {"message": "POST /v1/embeddings with a body"}})
        try:
            texts = json.loads(self.rfile.read(length))["input"]
        except (ValueError, KeyError, TypeError):
            return self._answer(400, {"error": {"message": "a JSON object with input"}})
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            return self._answer(400, {"error": {"message": "input: a string or a list of strings"}})
        vectors = MODEL.embed(texts, norm=True).tolist() if texts else []
        tokens = sum(len(text.split()) for text in texts)
        data = [{"object": "embedding", "index": n, "embedding": vector} for n, vector in enumerate(vectors)]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return self._answer(200, {"object": "list", "data": data, "model": MODEL_NAME, "usage": usage})

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    options = parser.parse_args()
    server = ThreadingHTTPServer((options.host, options.port), Embeddings)
    print(f"embedding {MODEL_NAME} at http://{options.host}:{options.port}/v1/embeddings", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
