"""A stand-in for `python -m sglang.launch_server`: SGLang's HTTP API on CPU, answering SGLANG_TEST_OUTPUT_IDS."""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--model-path", required=True)
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, required=True)
args, _ = ap.parse_known_args()
model = Path(args.model_path)
for name in ("config.json", "model.safetensors", "tokenizer.json"):
    if not (model / name).is_file():
        sys.exit(f"no {name} in {model}")
OUTPUT = json.loads(os.environ.get("SGLANG_TEST_OUTPUT_IDS", "[]"))
print("loading weights", flush=True)
time.sleep(1)
READY_AT = time.monotonic() + 1.0


class Handler(http.server.BaseHTTPRequestHandler):
    def send(self, code: int, answer: object) -> None:
        body = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send(200 if time.monotonic() > READY_AT else 503, {"data": [{"id": str(model)}]})

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path == "/generate":
            self.send(200, {"text": "", "output_ids": OUTPUT,
                            "meta_info": {"prompt_tokens": len(asked.get("input_ids", []))}})
        else:
            self.send(200, {"choices": [{"message": {"content": "hinfa"}}], "usage": {"completion_tokens": 2}})

    def log_message(self, *args: object) -> None:
        print("request", self.path, flush=True)


print("The server is fired up and ready to roll!", flush=True)
http.server.ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
