"""Checks the JSON reports of nibble-llama-service runs (tests/cpp/service/run.sh) against the Rust driver's.

usage: check_service.py (--service SVC.json --frontend F [--expect KEY=DRIVER.json]... [--expect-prompt-only
       KEY=DRIVER.json]...)...
KEY is a prompt (every request with that prompt) or a request id. --expect: prompt ids, generated ids and text
must equal the driver's; --expect-prompt-only: prompt ids only (for runs whose kernels differ from the driver's).
Every run must have served all its requests, report the frontend F, and carry p50/p95 of TTFT, decode tok/s,
queue wait and latency.
"""

from __future__ import annotations

import json
import math
import sys


def fail(msg: str) -> None:
    print(f"check_service: {msg}", file=sys.stderr)
    sys.exit(1)


def parse(argv: list[str]) -> list[dict]:
    runs: list[dict] = []
    it = iter(argv)
    for flag in it:
        value = next(it, None)
        if value is None:
            fail(f"{flag} needs a value")
        if flag == "--service":
            runs.append({"path": value, "frontend": None, "expect": []})
        elif not runs:
            fail(f"{flag} before --service")
        elif flag == "--frontend":
            runs[-1]["frontend"] = value
        elif flag in ("--expect", "--expect-prompt-only"):
            key, _, path = value.partition("=")
            runs[-1]["expect"].append((key, path, flag == "--expect"))
        else:
            fail(f"unknown argument {flag}")
    return runs


def main() -> None:
    runs = parse(sys.argv[1:])
    if not runs:
        fail("no --service given")
    for run in runs:
        name = run["path"]
        doc = json.load(open(run["path"], encoding="utf-8"))
        if doc["frontend"] != run["frontend"]:
            fail(f"{name}: frontend {doc['frontend']!r}, expected {run['frontend']!r}")
        if doc["failed"] or doc["not_run"]:
            fail(f"{name}: {doc['failed']} failed, {doc['not_run']} not run: {doc['results']}")
        results = doc["results"]
        if len(results) != doc["requests"] or not all(r["ran"] for r in results):
            fail(f"{name}: {len(results)} results for {doc['requests']} requests")
        for metric in ("ttft_s", "decode_tok_s", "queue_wait_s", "latency_s"):
            for p in ("p50", "p95"):
                v = doc[metric][p]
                if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                    fail(f"{name}: {metric}.{p} = {v!r}")
            if doc[metric]["p95"] < doc[metric]["p50"]:
                fail(f"{name}: {metric} p95 {doc[metric]['p95']} < p50 {doc[metric]['p50']}")
        if not doc["aggregate_tok_s"] > 0:
            fail(f"{name}: aggregate_tok_s {doc['aggregate_tok_s']}")
        for key, path, full in run["expect"]:
            drv = json.load(open(path, encoding="utf-8"))
            chosen = [r for r in results if (str(r["id"]) == key if key.isdigit() else r["prompt"] == key)]
            if not chosen:
                fail(f"{name}: no request matches {key!r}")
            for r in chosen:
                if r["prompt_token_ids"] != drv["prompt_token_ids"]:
                    fail(f"{name} request {r['id']}: prompt ids differ from {path}:\n  service {r['prompt_token_ids']}"
                         f"\n  driver  {drv['prompt_token_ids']}")
                if full and (r["generated_token_ids"] != drv["generated_token_ids"] or r["text"] != drv["text"]):
                    fail(f"{name} request {r['id']}: generated ids/text differ from {path}:\n  service "
                         f"{r['generated_token_ids']} {r['text']!r}\n  driver  {drv['generated_token_ids']} "
                         f"{drv['text']!r}")
            what = "prompt + generated ids and text" if full else "prompt ids"
            print(f"{name.rsplit('/', 1)[-1]}: {len(chosen)} request(s) [{key[:40]}] = driver's {what}")
        print(f"{name.rsplit('/', 1)[-1]}: {doc['requests']} requests, frontend {doc['frontend']}, TTFT p50/p95 "
              f"{doc['ttft_s']['p50']:.3f}/{doc['ttft_s']['p95']:.3f} s, decode p50/p95 "
              f"{doc['decode_tok_s']['p50']:.1f}/{doc['decode_tok_s']['p95']:.1f} tok/s")


if __name__ == "__main__":
    main()
