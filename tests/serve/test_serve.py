"""`vitrt serve` on the CPU, tested with clients nobody here wrote: the `openai` package on
/v1/embeddings, curl's multipart upload on /v1/classify, prometheus_client's parser on
/metrics; a bounded load test on loopback (good and bad inputs mixed), 429 under overload,
and SIGTERM in the middle of the load. Every answer is checked against the CLI's on the
same image (`vitrt classify`, `vitrt embed`, `vitrt embed-text`, `vitrt zero-shot`).

Run after `cargo test` built target/debug/vitrt (VITRT_BIN overrides it):
    python -m pytest tests/serve -q
"""

import base64
import concurrent.futures
import http.client
import json
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
VITRT = os.environ.get("VITRT_BIN", str(ROOT / "target" / "debug" / "vitrt"))
DIGITS = ROOT / "examples" / "digits-vit"
DIGIT_IMAGES = sorted((ROOT / "examples" / "digits").glob("*.png"))
CLIP = ROOT / "tests" / "fixtures" / "models" / "clip-zero-shot"
# SigLIP 2 NaFlex: four images of different aspect ratios, each at its own patch grid.
NAFLEX = ROOT / "tests" / "fixtures" / "naflex" / "siglip2-naflex-zero-shot"
NAFLEX_IMAGES = [NAFLEX / "images" / f"{i}.png" for i in range(4)]
PHOTOS = [ROOT / "tests" / "fixtures" / "images" / n for n in ("cat.jpg", "coffee.png", "astronaut.webp")]


class Server:
    """A `vitrt serve` process on a free loopback port, ready (GET /health 200)."""

    def __init__(self, model, *flags):
        self.process = subprocess.Popen(
            [VITRT, "serve", "--model", str(model), "--device", "cpu", "--port", "0", *flags],
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = []
        line = self.process.stderr.readline()
        self.stderr.append(line)
        found = re.search(r"listening on http://([0-9.]+):(\d+)", line)
        assert found, f"no address in {line!r}"
        self.host, self.port = found.group(1), int(found.group(2))
        self.url = f"http://{self.host}:{self.port}"
        deadline = time.monotonic() + 60
        # Health checks answered (the server counts them among its requests).
        self.health_checks = 0
        while True:
            try:
                status, _, _ = self.request("GET", "/health")
                self.health_checks += 1
            except OSError:
                status = None
            if status == 200:
                break
            assert status in (None, 503), status
            assert self.process.poll() is None, "the server exited while loading"
            assert time.monotonic() < deadline, "the server did not become ready in 60 s"
            time.sleep(0.05)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers, body bytes) of one request on a new connection."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def post_json(self, path, document, headers=None):
        status, _, body = self.request(
            "POST", path, json.dumps(document), {"content-type": "application/json", **(headers or {})}
        )
        return status, json.loads(body)

    def stop(self):
        """SIGTERM, and the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self.stderr.append(self.process.stderr.read())
        return code


@pytest.fixture
def digits():
    server = Server(DIGITS, "--max-delay-ms", "5")
    yield server
    server.stop()


@pytest.fixture
def clip():
    server = Server(CLIP, "--api-key", "test-key")
    yield server
    server.stop()


def cli_lines(*args):
    """The JSON Lines a CLI command writes to standard output."""
    out = subprocess.run([VITRT, *args, "--device", "cpu"], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def data_uri(path):
    kind = {"jpg": "jpeg", "png": "png", "webp": "webp"}[path.suffix[1:]]
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode()


def f32(values):
    return np.asarray(values, dtype=np.float32)


def test_openai_client_embeds_texts_and_images_as_the_cli_does(clip):
    import openai

    client = openai.OpenAI(base_url=clip.url + "/v1", api_key="test-key")
    texts = ["a photo of a cat", "a cup of coffee"]
    inputs = [texts[0], data_uri(PHOTOS[0]), texts[1], data_uri(PHOTOS[1])]
    # The client asks for base64 unless told otherwise; then float.
    for encoding in (None, "float"):
        kwargs = {} if encoding is None else {"encoding_format": encoding}
        response = client.embeddings.create(model=str(CLIP), input=inputs, **kwargs)
        assert response.model == str(CLIP)
        assert [d.index for d in response.data] == [0, 1, 2, 3]
        assert response.usage.prompt_tokens > 0
        got = [f32(d.embedding) for d in response.data]
        text_rows = cli_lines(
            "embed-text", "--model", str(CLIP), "--text", texts[0], "--text", texts[1], "--normalize", "-o", "-"
        )
        image_rows = cli_lines(
            "embed", "--model", str(CLIP), str(PHOTOS[0]), str(PHOTOS[1]), "--normalize", "-o", "-"
        )
        want = [text_rows[0], image_rows[0], text_rows[1], image_rows[1]]
        for g, w in zip(got, want):
            assert g.shape == (len(w["embedding"]),)
            # The same f32 values: the server's rows are the CLI's, bit for bit.
            np.testing.assert_array_equal(g, f32(w["embedding"]))
    # One string alone.
    single = client.embeddings.create(model=str(CLIP), input=texts[0], encoding_format="float")
    np.testing.assert_array_equal(f32(single.data[0].embedding), f32(text_rows[0]["embedding"]))


def test_the_api_key_is_required(clip):
    import openai

    client = openai.OpenAI(base_url=clip.url + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.embeddings.create(model=str(CLIP), input="a cat")
    status, _, _ = clip.request("GET", "/v1/models")
    assert status == 401
    status, _, body = clip.request("GET", "/v1/models", headers={"authorization": "Bearer test-key"})
    assert status == 200 and json.loads(body)["data"][0]["id"] == str(CLIP)
    # Health stays open, for load balancers.
    assert clip.request("GET", "/health")[0] == 200


def test_zero_shot_answers_as_the_cli(clip):
    auth = {"authorization": "Bearer test-key"}
    images = [base64.b64encode(p.read_bytes()).decode() for p in PHOTOS]
    status, answer = clip.post_json(
        "/v1/zero-shot", {"images": images, "labels": ["cat", "coffee", "astronaut"], "top_k": 3}, auth
    )
    assert status == 200, answer
    want = cli_lines(
        "zero-shot", "--model", str(CLIP), *map(str, PHOTOS), "--labels", "cat,coffee,astronaut",
        "--top-k", "3", "--format", "jsonl",
    )
    for got, expected in zip(answer["results"], want):
        assert [p["label"] for p in got["predictions"]] == [p["label"] for p in expected["predictions"]]
        np.testing.assert_array_equal(
            f32([p["probability"] for p in got["predictions"]]),
            f32([p["probability"] for p in expected["predictions"]]),
        )
    # Multipart, with the labels and a template as form fields, gives the same answer.
    command = [
        "curl", "-sS", "--fail-with-body", "-H", "authorization: Bearer test-key",
        "-F", f"file=@{PHOTOS[0]}", "-F", "labels=cat,coffee,astronaut", "-F", "top_k=3",
        f"{clip.url}/v1/zero-shot",
    ]
    form = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert form["results"][0] == answer["results"][0]
    # Bad labels and templates are 400s that say why.
    status, answer = clip.post_json("/v1/zero-shot", {"images": images[:1]}, auth)
    assert status == 400 and "labels" in answer["error"]["message"]
    status, answer = clip.post_json(
        "/v1/zero-shot", {"images": images[:1], "labels": "cat,dog", "template": "no slot"}, auth
    )
    assert status == 400 and "template" in answer["error"]["message"]


def test_curl_multipart_and_raw_bodies_classify_as_the_cli(digits):
    files = DIGIT_IMAGES[:3]
    command = ["curl", "-sS", "--fail-with-body", f"{digits.url}/v1/classify?top_k=3"]
    for f in files:
        command += ["-F", f"file=@{f}"]
    answer = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    want = cli_lines("classify", "--model", str(DIGITS), *map(str, files), "--top-k", "3", "--format", "jsonl")
    assert len(answer["results"]) == 3
    for got, expected in zip(answer["results"], want):
        assert [p["index"] for p in got["predictions"]] == [p["index"] for p in expected["predictions"]]
        np.testing.assert_array_equal(
            f32([p["probability"] for p in got["predictions"]]),
            f32([p["probability"] for p in expected["predictions"]]),
        )
    # The raw body, and base64 in JSON, give the same answer as the upload.
    status, _, body = digits.request(
        "POST", "/v1/classify?top_k=3", files[0].read_bytes(), {"content-type": "image/png"}
    )
    assert status == 200 and json.loads(body)["results"][0] == answer["results"][0]
    status, document = digits.post_json(
        "/v1/classify", {"images": [base64.b64encode(files[1].read_bytes()).decode()], "top_k": 3}
    )
    assert status == 200 and document["results"][0]["predictions"] == answer["results"][1]["predictions"]


def test_bad_inputs_are_4xx_naming_the_input(digits):
    good = DIGIT_IMAGES[0].read_bytes()
    # A broken second image: 400 naming input 1.
    status, answer = digits.post_json(
        "/v1/classify", {"images": [base64.b64encode(good).decode(), base64.b64encode(good[:40]).decode()]}
    )
    assert status == 400 and "input 1" in answer["error"]["message"], answer
    status, answer = digits.post_json("/v1/classify", {"images": ["https://example.com/cat.jpg"]})
    assert status == 400 and "URLs and paths are not read" in answer["error"]["message"]
    status, answer = digits.post_json("/v1/classify", {"images": ["/etc/passwd"]})
    assert status == 400
    status, _, _ = digits.request("POST", "/v1/classify", b"", {"content-type": "image/png"})
    assert status == 400
    status, _, _ = digits.request("POST", "/v1/classify", b"{not json", {"content-type": "application/json"})
    assert status == 400
    status, answer = digits.post_json("/v1/classify", {"images": [base64.b64encode(good).decode()], "top_k": 0})
    assert status == 400 and "top_k" in answer["error"]["message"]
    # A misspelt field is refused, not ignored (in JSON, the query and a form).
    status, answer = digits.post_json("/v1/classify", {"images": [base64.b64encode(good).decode()], "topk": 3})
    assert status == 400 and '"topk"' in answer["error"]["message"], answer
    status, _, _ = digits.request("POST", "/v1/classify?topk=3", good, {"content-type": "image/png"})
    assert status == 400
    command = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-F", f"file=@{DIGIT_IMAGES[0]}",
               "-F", "top-k=3", f"{digits.url}/v1/classify"]
    assert subprocess.run(command, capture_output=True, text=True, check=True).stdout == "400"
    # Text on a model without a text tower.
    status, answer = digits.post_json("/v1/embeddings", {"input": "a cat"})
    assert status == 400 and "text tower" in answer["error"]["message"]
    status, answer = digits.post_json("/v1/embeddings", {"input": [[1, 2, 3]]})
    assert status == 400
    uri = "data:image/png;base64," + base64.b64encode(good).decode()
    status, answer = digits.post_json("/v1/embeddings", {"input": uri, "dimensions": 7})
    assert status == 400 and "dimensions" in answer["error"]["message"], answer
    width = len(digits.post_json("/v1/embeddings", {"input": uri})[1]["data"][0]["embedding"])
    status, answer = digits.post_json("/v1/embeddings", {"input": uri, "dimensions": width})
    assert status == 200, answer
    status, answer = digits.post_json("/v1/zero-shot", {"images": [base64.b64encode(good).decode()], "labels": "a,b"})
    assert status == 400
    assert digits.request("GET", "/nowhere")[0] == 404
    # The server is fine after all that.
    status, _, body = digits.request("POST", "/v1/classify", good, {"content-type": "image/png"})
    assert status == 200


def test_images_past_the_pixel_limit_are_400():
    server = Server(DIGITS, "--max-pixels", "10")
    try:
        status, _, answer = server.request(
            "POST", "/v1/classify", DIGIT_IMAGES[0].read_bytes(), {"content-type": "image/png"}
        )
        assert status == 400 and "input 0" in json.loads(answer)["error"]["message"], answer
    finally:
        assert server.stop() == 0


def test_bodies_past_the_limit_are_413():
    server = Server(DIGITS, "--max-body-bytes", "1000")
    try:
        big = DIGIT_IMAGES[0].read_bytes() * 20
        assert len(big) > 1000
        assert server.request("POST", "/v1/classify", big, {"content-type": "image/png"})[0] == 413
        command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-F", f"file=@-;filename=a.png", f"{server.url}/v1/classify"]
        out = subprocess.run(command, input=big, capture_output=True, check=True)
        assert out.stdout == b"413"
    finally:
        assert server.stop() == 0


def test_local_files_only_when_allowed_and_only_inside_the_folder():
    images = DIGIT_IMAGES[0].parent
    server = Server(DIGITS, "--allow-local-files", str(images))
    try:
        name = DIGIT_IMAGES[0].name
        status, by_file = server.post_json("/v1/classify", {"images": [f"file:{name}"]})
        assert status == 200, by_file
        status, _, by_body = server.request(
            "POST", "/v1/classify", DIGIT_IMAGES[0].read_bytes(), {"content-type": "image/png"}
        )
        assert json.loads(by_body) == by_file
        for bad in ["file:../digits-vit/config.json", "file:/etc/passwd", "file:missing.png"]:
            status, answer = server.post_json("/v1/classify", {"images": [bad]})
            assert status == 400, (bad, answer)
        # A folder entry that is not an image file is refused by the decoder, naming the input.
        status, answer = server.post_json("/v1/classify", {"images": ["file:README.md"]})
        assert status == 400 and "input 0" in answer["error"]["message"], answer
        status, answer = server.post_json("/v1/embeddings", {"input": [f"file:{name}"]})
        assert status == 200 and len(answer["data"]) == 1
    finally:
        assert server.stop() == 0


class FileServer:
    """Python's own HTTP server over a folder, on a loopback port, in a thread."""

    def __init__(self, folder):
        import functools
        import http.server
        import threading

        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        handler.log_message = lambda *args: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_urls_fetched_only_when_allowed_and_within_reach():
    files = FileServer(ROOT / "examples")
    name = DIGIT_IMAGES[0].name
    url = f"{files.url}/digits/{name}"
    try:
        # Without the flag a URL is refused, saying which flag fetches it; with it, the default
        # reach (public addresses) refuses loopback, saying why.
        for flags, said in [((), "--allow-url-fetch"), (("--allow-url-fetch",), "not a public address")]:
            server = Server(DIGITS, *flags)
            try:
                status, answer = server.post_json("/v1/classify", {"images": [url]})
                assert status == 400 and said in answer["error"]["message"], answer
            finally:
                assert server.stop() == 0
        server = Server(DIGITS, "--allow-url-fetch", "any", "--max-file-size", "100000")
        try:
            status, by_url = server.post_json("/v1/classify", {"images": [url]})
            assert status == 200, by_url
            status, _, by_body = server.request(
                "POST", "/v1/classify", DIGIT_IMAGES[0].read_bytes(), {"content-type": "image/png"}
            )
            assert json.loads(by_body) == by_url
            status, answer = server.post_json("/v1/embeddings", {"input": [url]})
            assert status == 200 and len(answer["data"]) == 1, answer
            # A missing file is a 400 naming the input and the status; a file past
            # --max-file-size (the model's 600 kB of weights) a 400 naming the limit.
            status, answer = server.post_json("/v1/classify", {"images": [url, f"{files.url}/digits/missing.png"]})
            message = answer["error"]["message"]
            assert status == 400 and "input 1" in message and "404" in message, answer
            status, answer = server.post_json("/v1/classify", {"images": [f"{files.url}/digits-vit/model.safetensors"]})
            assert status == 400 and "limit of 100000" in answer["error"]["message"], answer
        finally:
            assert server.stop() == 0
    finally:
        files.close()


def expected_top1():
    """Each digit image's top label by the CLI."""
    rows = cli_lines("classify", "--model", str(DIGITS), *map(str, DIGIT_IMAGES), "--top-k", "1", "--format", "jsonl")
    return {Path(r["image"]).name: r["predictions"][0] for r in rows}


def test_load_mixed_good_and_bad_at_concurrency_64(digits):
    want = expected_top1()
    rng = random.Random(7)
    good = [(p.name, p.read_bytes()) for p in DIGIT_IMAGES]
    bad = [b"", b"\x89PNG\r\n\x1a\n" + b"\0" * 30, good[0][1][: len(good[0][1]) // 2], b"GIF89a" + b"\0" * 20]
    plan = [("good", rng.choice(good)) if rng.random() < 0.8 else ("bad", ("", rng.choice(bad))) for _ in range(2000)]

    def one(item):
        kind, (name, body) = item
        status, _, answer = digits.request("POST", "/v1/classify?top_k=1", body, {"content-type": "image/png"})
        return kind, name, status, answer

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(one, plan))
    took = time.monotonic() - started
    assert took < 300, f"2,000 requests took {took:.0f} s"
    for kind, name, status, answer in results:
        if kind == "good":
            assert status == 200, answer
            prediction = json.loads(answer)["results"][0]["predictions"][0]
            assert prediction["index"] == want[name]["index"], name
            assert np.float32(prediction["probability"]) == np.float32(want[name]["probability"]), name
        else:
            assert 400 <= status < 500, (status, answer)
    assert digits.request("GET", "/health")[0] == 200
    # Requests were batched together: more images than forward passes.
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(digits.request("GET", "/metrics")[2].decode())}
    batch = {s.name: s.value for s in families["vitrt_batch_size"].samples if not s.labels.get("le")}
    assert batch["vitrt_batch_size_sum"] > batch["vitrt_batch_size_count"] > 0, batch


def test_metrics_parse_with_prometheus_client(digits):
    from prometheus_client.parser import text_string_to_metric_families

    body = DIGIT_IMAGES[0].read_bytes()
    for _ in range(3):
        assert digits.request("POST", "/v1/classify", body, {"content-type": "image/png"})[0] == 200
    assert digits.request("POST", "/v1/classify", b"junk", {"content-type": "image/png"})[0] == 400
    status, headers, text = digits.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    requests = {
        (s.labels["route"], s.labels["status"]): s.value for s in families["vitrt_requests"].samples
    }
    assert requests[("/v1/classify", "200")] == 3
    assert requests[("/v1/classify", "400")] == 1
    assert families["vitrt_request_duration_seconds"].type == "histogram"
    assert families["vitrt_batch_size"].type == "histogram"
    assert families["vitrt_queue_depth"].type == "gauge"
    images = [s.value for s in families["vitrt_images"].samples if s.name == "vitrt_images_total"]
    # The warm-up batches are not requests: three images answered.
    assert images == [3]
    assert families["vitrt_images_per_second"].samples[0].value > 0


def test_a_request_alone_does_not_wait_for_company():
    # A batch waits up to 5 s for images already admitted, and for nothing when none are.
    server = Server(DIGITS, "--max-delay-ms", "5000")
    try:
        body = DIGIT_IMAGES[0].read_bytes()
        started = time.monotonic()
        for _ in range(3):
            assert server.request("POST", "/v1/classify", body, {"content-type": "image/png"})[0] == 200
        assert time.monotonic() - started < 5, "a lone request waited for the batch delay"
    finally:
        assert server.stop() == 0


def test_a_full_queue_is_429_with_retry_after():
    # Two images may wait at a time, and a batch waits up to 300 ms for an image admitted
    # behind its first.
    server = Server(DIGITS, "--max-queue", "2", "--max-delay-ms", "300")
    try:
        body = DIGIT_IMAGES[0].read_bytes()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(
                pool.map(
                    lambda _: server.request("POST", "/v1/classify", body, {"content-type": "image/png"}),
                    range(64),
                )
            )
        statuses = [status for status, _, _ in results]
        assert set(statuses) <= {200, 429}, statuses
        assert 429 in statuses and 200 in statuses, statuses
        for status, headers, answer in results:
            if status == 429:
                assert headers["retry-after"] == "1"
                assert "queue is full" in json.loads(answer)["error"]["message"]
        assert server.request("GET", "/health")[0] == 200
    finally:
        assert server.stop() == 0


def test_sigterm_mid_load_loses_no_accepted_request():
    server = Server(DIGITS, "--max-delay-ms", "20")
    want = expected_top1()
    good = [(p.name, p.read_bytes()) for p in DIGIT_IMAGES]
    answered, unanswered = [], []

    def one(i):
        name, body = good[i % len(good)]
        try:
            status, _, answer = server.request("POST", "/v1/classify?top_k=1", body, {"content-type": "image/png"})
        except ConnectionError:
            # Refused, reset or closed before an answer: the server had stopped accepting
            # (whether it had begun the request is counted by the server, below).
            unanswered.append(i)
            return
        answered.append((name, status, answer))

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(one, i) for i in range(600)]
        # Stop once some requests have been answered and many are in flight.
        while len(answered) < 50:
            time.sleep(0.005)
        server.process.send_signal(signal.SIGTERM)
        for f in futures:
            f.result()
    assert server.process.wait(timeout=60) == 0
    stderr = server.process.stderr.read()
    assert len(answered) + len(unanswered) == 600
    assert len(answered) >= 50
    for name, status, answer in answered:
        assert status == 200, answer
        assert json.loads(answer)["results"][0]["predictions"][0]["index"] == want[name]["index"]
    # Every request the server began was answered, and every answer reached its client (the
    # health checks while it loaded are requests too).
    found = re.search(r"stopped: (\d+) requests begun, (\d+) answered", stderr)
    assert found, stderr
    begun, done = int(found.group(1)), int(found.group(2))
    assert begun == done == len(answered) + server.health_checks, (stderr, len(answered))


def test_sigterm_while_loading_exits_0():
    process = subprocess.Popen(
        [VITRT, "serve", "--model", str(CLIP), "--device", "cpu", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "listening on" in process.stderr.readline()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, process.stderr.read()


def test_requests_of_every_kind_at_once_get_their_own_answers(clip):
    """Zero-shot against two label sets, image and text embeddings, all at once: batches hold
    one kind, label sets are encoded as they change, and each answer equals the one the same
    request gets alone."""
    auth = {"authorization": "Bearer test-key"}
    photos = [base64.b64encode(p.read_bytes()).decode() for p in PHOTOS]
    kinds = []
    for k, photo in enumerate(photos):
        kinds.append(("/v1/zero-shot", {"images": [photo], "labels": ["cat", "coffee"], "top_k": 2}))
        kinds.append(("/v1/zero-shot", {"images": [photo], "labels": "astronaut,dog,car", "top_k": 3}))
        kinds.append(("/v1/embeddings", {"input": ["data:image/png;base64," + photo], "encoding_format": "base64"}))
        kinds.append(("/v1/embeddings", {"input": [f"text number {k}"], "encoding_format": "base64"}))
    alone = [clip.post_json(path, body, auth) for path, body in kinds]
    assert all(status == 200 for status, _ in alone), alone
    rng = random.Random(3)
    plan = [rng.randrange(len(kinds)) for _ in range(400)]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        got = list(pool.map(lambda i: (i, clip.post_json(*kinds[i], auth)), plan))
    for i, (status, answer) in got:
        assert status == 200, answer
        if "results" in answer:
            assert answer["results"] == alone[i][1]["results"], kinds[i][0]
        else:
            assert answer["data"] == alone[i][1]["data"], kinds[i][0]


def test_naflex_answers_as_the_cli_whatever_shares_its_batch():
    """SigLIP 2 NaFlex through the `openai` client: images of different aspect ratios and a
    text embedded as `vitrt embed --normalize` and `vitrt embed-text --normalize` do; then
    zero-shot and embedding requests of single images at once from 16 threads, batched
    together across requests (each image padded to max_num_patches with its mask), each
    answer within float summation order of the one the same request gets alone."""
    import openai

    server = Server(NAFLEX, "--max-delay-ms", "20", "--max-batch-size", "8")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        uris = [data_uri(p) for p in NAFLEX_IMAGES]
        text = "a photo of a cat."
        response = client.embeddings.create(model=str(NAFLEX), input=[uris[0], text, uris[1]])
        got = [f32(d.embedding) for d in response.data]
        images = cli_lines("embed", "--model", str(NAFLEX), *map(str, NAFLEX_IMAGES[:2]), "--normalize", "-o", "-")
        texts = cli_lines("embed-text", "--model", str(NAFLEX), "--text", text, "--normalize", "-o", "-")
        for g, w in zip(got, [images[0], texts[0], images[1]]):
            np.testing.assert_allclose(g, f32(w["embedding"]), rtol=1e-5, atol=1e-6)

        labels = ["a photo of a cat.", "a photo of a dog.", "a photo of a bird."]
        kinds = []
        for uri in uris:
            kinds.append(("/v1/zero-shot", {"images": [uri], "labels": labels, "template": "{}", "top_k": 3}))
            kinds.append(("/v1/embeddings", {"input": [uri]}))
        alone = [server.post_json(path, body) for path, body in kinds]
        assert all(status == 200 for status, _ in alone), alone
        rng = random.Random(5)
        plan = [rng.randrange(len(kinds)) for _ in range(200)]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda i: (i, server.post_json(*kinds[i])), plan))
        for i, (status, answer) in answers:
            assert status == 200, answer
            want = alone[i][1]
            if "results" in answer:
                got, expected = answer["results"][0]["predictions"], want["results"][0]["predictions"]
                assert [p["label"] for p in got] == [p["label"] for p in expected]
                values = [f32([p["probability"] for p in preds]) for preds in (got, expected)]
            else:
                values = [f32(answer["data"][0]["embedding"]), f32(want["data"][0]["embedding"])]
            np.testing.assert_allclose(values[0], values[1], rtol=1e-5, atol=1e-6)
        # The batches held several requests' images.
        status, _, body = server.request("GET", "/metrics")
        sizes = re.search(r"vitrt_batch_size_sum (\S+)\n.*vitrt_batch_size_count (\S+)", body.decode(), re.S)
        assert sizes and float(sizes.group(1)) > float(sizes.group(2)), body.decode()
    finally:
        assert server.stop() == 0


def test_bench_serve_loads_the_server_and_counts_every_answer(digits, tmp_path):
    """`vitrt bench serve` (the compiled load generator) keeps its connections busy and
    accounts for every request: all 200 here, with the figures in its JSON; a server that is
    not there is a one-line error and exit 1."""
    report = tmp_path / "load.json"
    subprocess.run(
        [VITRT, "bench", "serve", "--url", digits.url, "--concurrency", "8", "--requests", "200",
         "--json", str(report), str(ROOT / "examples" / "digits")],
        capture_output=True, text=True, check=True,
    )
    figures = json.loads(report.read_text())
    assert figures["statuses"] == {"200": 200}
    assert figures["images_per_s_answered_200"] > 0
    assert figures["latency_ms"]["p50"] <= figures["latency_ms"]["p99"]
    gone = subprocess.run([VITRT, "bench", "serve", "--url", "127.0.0.1:9", "--requests", "1",
                           str(DIGIT_IMAGES[0])], capture_output=True, text=True)
    assert gone.returncode == 1
    assert "connecting to 127.0.0.1:9" in gone.stderr


def test_bench_serve_posts_embeddings_requests_as_a_peer_server_takes_them(tmp_path):
    """`vitrt bench serve --embeddings MODEL` (the mode scripts/gpu/gpu-serve-peers.sh loads both
    vitrt serve and infinity_emb with) posts each photo as an OpenAI-style embeddings request
    with a data URI: every one answered 200 by /v1/embeddings on the CLIP fixture, on the
    default route and on the one --path names; --time-limit ends a run of many requests early."""
    server = Server(CLIP)
    try:
        report = tmp_path / "embeddings.json"
        subprocess.run(
            [VITRT, "bench", "serve", "--url", server.url, "--embeddings", "clip", "--concurrency", "4",
             "--requests", "30", "--json", str(report), *map(str, PHOTOS)],
            capture_output=True, text=True, check=True,
        )
        figures = json.loads(report.read_text())
        assert figures["statuses"] == {"200": 30}
        assert figures["path"] == "/v1/embeddings" and figures["body"] == "embeddings"
        # The route as named (infinity_emb's is /embeddings).
        routed = tmp_path / "routed.json"
        subprocess.run(
            [VITRT, "bench", "serve", "--url", server.url, "--embeddings", "clip", "--path", "/v1/embeddings",
             "--concurrency", "2", "--requests", "4", "--json", str(routed), str(PHOTOS[0])],
            capture_output=True, text=True, check=True,
        )
        assert json.loads(routed.read_text())["statuses"] == {"200": 4}
        refused = subprocess.run(
            [VITRT, "bench", "serve", "--url", server.url, "--embeddings", "clip", "--path", "v1/embeddings",
             str(PHOTOS[0])], capture_output=True, text=True,
        )
        assert refused.returncode == 1 and "--path" in refused.stderr
        bounded = tmp_path / "bounded.json"
        started = time.monotonic()
        subprocess.run(
            [VITRT, "bench", "serve", "--url", server.url, "--embeddings", "clip", "--concurrency", "2",
             "--requests", "1000000", "--time-limit", "1", "--json", str(bounded), str(PHOTOS[0])],
            capture_output=True, text=True, check=True,
        )
        assert time.monotonic() - started < 30
        figures = json.loads(bounded.read_text())
        assert 0 < figures["requests"] < 1000000 and figures["requests_asked"] == 1000000
        assert figures["statuses"] == {"200": figures["requests"]}
    finally:
        assert server.stop() == 0
