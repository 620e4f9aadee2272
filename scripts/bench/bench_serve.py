"""Load and invariance client for `vitrt serve` (standard library only, for the GPU machine).

    python3 scripts/bench/bench_serve.py load --url http://127.0.0.1:8080 --images DIR \
        --concurrency 256 --requests 20000 [--json OUT]
    python3 scripts/bench/bench_serve.py invariance --url http://127.0.0.1:8080 --images DIR \
        --count 16 [--reference embed.jsonl] [--json OUT]

`load` posts one image per request (the raw JPEG body, /v1/classify) from `--concurrency`
keep-alive connections spread over processes (a Python thread pool alone cannot keep a GPU
server busy), and reports requests/s, images/s and latency percentiles (ms, request sent to
answer read). `invariance` asks /v1/embeddings (base64, the exact float32 bytes) for each image
alone, then again while other requests keep the batches full and varied, and compares the bytes;
with `--reference` (`vitrt embed --normalize -o -` on the same files) it also compares them
with the CLI's. Both print one JSON document and write it to `--json`.
"""

import argparse
import base64
import json
import multiprocessing
import os
import socket
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlparse


def read_response(sock_file):
    """(status, body) of one HTTP/1.1 response with a Content-Length."""
    status_line = sock_file.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection")
    status = int(status_line.split()[1])
    length = 0
    while True:
        line = sock_file.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return status, sock_file.read(length)


class Connection:
    """One keep-alive connection posting bodies."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.sock = None

    def post(self, path, body, content_type):
        for attempt in range(2):
            if self.sock is None:
                self.sock = socket.create_connection((self.host, self.port))
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.file = self.sock.makefile("rb")
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            try:
                self.sock.sendall(head + body)
                return read_response(self.file)
            except (ConnectionError, OSError):
                self.sock.close()
                self.sock = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def load_worker(args):
    """One process: `threads` connections, each posting its share of the requests."""
    host, port, path, bodies, threads, requests, offset = args
    latencies, statuses = [], {}
    lock = threading.Lock()
    counter = iter(range(requests))

    def run():
        connection = Connection(host, port)
        mine, codes = [], {}
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body = bodies[(offset + i) % len(bodies)]
            started = time.perf_counter()
            status, _ = connection.post(path, body, "image/jpeg")
            mine.append(time.perf_counter() - started)
            codes[status] = codes.get(status, 0) + 1
        with lock:
            latencies.extend(mine)
            for k, v in codes.items():
                statuses[k] = statuses.get(k, 0) + v

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return latencies, statuses


def images_of(folder, limit=None):
    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    return files[:limit] if limit else files


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load(args):
    url = urlparse(args.url)
    bodies = [p.read_bytes() for p in images_of(args.images, args.max_files)]
    processes = max(1, min(args.processes, args.concurrency))
    per_process = [args.concurrency // processes + (i < args.concurrency % processes) for i in range(processes)]
    shares = [args.requests * n // args.concurrency for n in per_process]
    shares[-1] += args.requests - sum(shares)
    jobs = [
        (url.hostname, url.port, "/v1/classify?top_k=1", bodies, n, share, sum(shares[:i]))
        for i, (n, share) in enumerate(zip(per_process, shares))
        if n
    ]
    started = time.perf_counter()
    cpu_before = os.times()
    with multiprocessing.Pool(len(jobs)) as pool:
        results = pool.map(load_worker, jobs)
    wall = time.perf_counter() - started
    cpu_after = os.times()
    latencies = [x for lat, _ in results for x in lat]
    statuses = {}
    for _, codes in results:
        for k, v in codes.items():
            statuses[str(k)] = statuses.get(str(k), 0) + v
    ok = statuses.get("200", 0)
    return {
        "concurrency": args.concurrency,
        "requests": len(latencies),
        "statuses": statuses,
        "wall_s": wall,
        "requests_per_s": len(latencies) / wall,
        "images_per_s_answered_200": ok / wall,
        "latency_ms": {
            "p50": 1e3 * percentile(latencies, 0.50),
            "p90": 1e3 * percentile(latencies, 0.90),
            "p99": 1e3 * percentile(latencies, 0.99),
            "mean": 1e3 * statistics.fmean(latencies),
        },
        # The client's own processes take cores the server's decoders could have used.
        "client_cpu_s": (cpu_after.children_user + cpu_after.children_system)
        - (cpu_before.children_user + cpu_before.children_system),
    }


def embedding_bytes(connection, image):
    document = {"input": ["data:image/jpeg;base64," + base64.b64encode(image).decode()], "encoding_format": "base64"}
    status, body = connection.post("/v1/embeddings", json.dumps(document).encode(), "application/json")
    if status != 200:
        raise RuntimeError(f"/v1/embeddings answered {status}: {body[:300]!r}")
    return base64.b64decode(json.loads(body)["data"][0]["embedding"])


def invariance(args):
    url = urlparse(args.url)
    files = images_of(args.images, args.count)
    others = [p.read_bytes() for p in images_of(args.images)[args.count : args.count + 256]] or [
        p.read_bytes() for p in files
    ]
    connection = Connection(url.hostname, url.port)
    alone = [embedding_bytes(connection, p.read_bytes()) for p in files]
    # Again, while 64 other connections keep the batches full with other images (embeddings
    # too: a request of another kind would change the graphs between batches).
    stop = threading.Event()
    other_documents = [
        json.dumps({"input": ["data:image/jpeg;base64," + base64.b64encode(o).decode()]}).encode() for o in others
    ]

    def background(k):
        c = Connection(url.hostname, url.port)
        i = k
        while not stop.is_set():
            c.post("/v1/embeddings", other_documents[i % len(other_documents)], "application/json")
            i += 64

    threads = [threading.Thread(target=background, args=(k,), daemon=True) for k in range(64)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    busy = [[embedding_bytes(connection, p.read_bytes()) for p in files] for _ in range(3)]
    stop.set()
    differing = sorted({str(files[i]) for round_ in busy for i, b in enumerate(round_) if b != alone[i]})
    report = {"images": len(files), "rounds_under_load": len(busy), "differ_under_load": differing}
    if args.reference:
        import struct

        rows = [json.loads(line) for line in Path(args.reference).read_text().splitlines() if line.strip()]
        by_name = {Path(r["image"]).name: r["embedding"] for r in rows}
        report["differ_from_cli"] = [
            str(p)
            for p, got in zip(files, alone)
            if struct.pack(f"<{len(by_name[p.name])}f", *by_name[p.name]) != got
        ]
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("load", "invariance"):
        p = sub.add_parser(name)
        p.add_argument("--url", default="http://127.0.0.1:8080")
        p.add_argument("--images", required=True, help="a folder of JPEGs")
        p.add_argument("--json", type=Path)
    load_parser = sub.choices["load"]
    load_parser.add_argument("--concurrency", type=int, default=256)
    load_parser.add_argument("--requests", type=int, default=20000)
    load_parser.add_argument("--processes", type=int, default=8)
    load_parser.add_argument("--max-files", type=int, default=None)
    inv = sub.choices["invariance"]
    inv.add_argument("--count", type=int, default=16)
    inv.add_argument("--reference", type=Path, help="vitrt embed --normalize -o - on the same files")
    args = parser.parse_args()
    report = load(args) if args.command == "load" else invariance(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
