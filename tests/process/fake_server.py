"""A stand-in server process for readiness tests: real sockets, real HTTP, chosen misbehaviour.

  python fake_server.py MODE PORT [SECONDS]
MODE: slow (listens after SECONDS, then 200), crash (prints a traceback, exits 1 after SECONDS),
hang (accepts connections, never answers), flaky (503 for the first 3 requests, then 200),
die-later (answers 503, then exits 3 after SECONDS), forks (like slow, plus a child process that
would outlive a careless stop), sglang (SGLang's API: ready after 1 s, /generate answers the token
ids of SGLANG_TEST_OUTPUT_IDS (a JSON list), /v1/models and /v1/chat/completions answer as SGLang does).
SECONDS is 2 unless given: the tests pass less, so that they wait no longer than the behaviour needs.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

MODE, PORT = sys.argv[1], int(sys.argv[2])
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
hits = {"n": 0}
STARTED = time.monotonic()


def die() -> None:
    print("scheduler died", flush=True)
    os._exit(3)


class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        asked = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/generate":
            ids = json.loads(os.environ.get("SGLANG_TEST_OUTPUT_IDS", "[]"))
            meta = {"prompt_tokens": len(asked.get("input_ids", [])), "e2e_latency": 0.01}
            self.answer(200, json.dumps({"text": "x", "output_ids": ids, "meta_info": meta}).encode())
        elif self.path == "/v1/chat/completions":
            self.answer(200, json.dumps({"choices": [{"message": {"content": "hinfa"}}],
                                         "usage": {"completion_tokens": 2}}).encode())
        else:
            self.answer(404, b"{}")

    def do_GET(self) -> None:
        if MODE == "sglang":
            ok = time.monotonic() - STARTED > 1.0
            self.answer(200 if ok else 503, json.dumps({"data": [{"id": "tiny"}]}).encode())
            return
        hits["n"] += 1
        code = 503 if MODE in ("flaky", "die-later") and (MODE == "die-later" or hits["n"] <= 3) else 200
        body = b'{"status": "starting"}' if code == 503 else b'{"status": "ok"}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if MODE == "die-later" and time.monotonic() - STARTED > SECONDS:
            # Die only after a whole answer went out: the client's last answer is then always the 503,
            # never a connection cut mid-request (which made the readiness test flaky under load).
            self.wfile.flush()
            die()

    def log_message(self, *args: object) -> None:
        print("request", self.path, flush=True)


def crash() -> None:
    time.sleep(SECONDS)
    def load_weights() -> None:
        raise RuntimeError("Assertion error (compiler.hpp:175): std::filesystem::exists(nvcc_path)")
    load_weights()


def main() -> None:
    print(f"fake server {MODE} on {PORT}", flush=True)
    if MODE == "crash":
        crash()
    if MODE == "hang":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", PORT))
        sock.listen(8)
        held = []
        while True:
            conn, _ = sock.accept()
            held.append(conn)  # never answer
    if MODE in ("slow", "forks"):
        time.sleep(SECONDS)
    if MODE == "forks":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    if MODE == "die-later":
        threading.Timer(10.0, die).start()  # in case nobody asks any more
    httpd.serve_forever()


if __name__ == "__main__":
    main()
