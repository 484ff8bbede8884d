#!/usr/bin/env python3
"""seed.py — seed corpora for the fuzz targets (fuzz/README.md) from the repository's and the
tests' data.

usage: fuzz/seed.py BUILD OUT
  BUILD  an ordinary (not fuzz) build folder with exec_engine, test_ladder, test_store and
         test_golden built (ninja -C build exec_engine test_ladder test_store test_golden)
  OUT    folder to fill: OUT/{gguf,exec,ladder,receipt,golden}/, one seed file each

Sources: the conformance models (gguf: whole and header-only); reply streams captured from
tests/exec_engine.c answering a real session (hello, load, truncate, forward, set_faults, bye),
clean and with each planted flaw (exec); ladders/*.yaml, tests/data/ladders/*.yaml and every
ladder the test_ladder run writes (ladder); every export test_store writes, whole and as the
single receipt / head payloads the receipt target wraps itself (receipt); ladders/*goldens.json
and every goldens file test_golden writes (golden). The test binaries run with TMPDIR pointing
at a scratch folder, which is removed afterwards.
"""
import base64
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def put(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(header, payload=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<I", len(h)) + h + struct.pack("<Q", len(payload)) + payload


def gguf_seeds(out):
    for model in sorted(glob.glob(os.path.join(SHARED, "conformance", "*", "model.gguf"))):
        name = os.path.basename(os.path.dirname(model))
        data = open(model, "rb").read()
        put(out, "gguf", name + ".gguf", data)
        # header-only copy: the metadata-only path, and small inputs (GGUF v3: the tensor data
        # starts after the tensor infos; 16 KiB holds the tiny models' headers)
        put(out, "gguf", name + ".head.gguf", data[:16384])


def exec_seeds(build, out):
    engine = os.path.join(build, "exec_engine")
    model = os.path.join(SHARED, "conformance", "qwen3-dense-tiny-f32", "model.gguf")
    hello = subprocess.run([engine], input=frame({"op": "hello", "protocol": 1}),
                           capture_output=True, timeout=60).stdout
    # n_vocab from the load reply of a first session
    load = frame({"op": "load", "path": model, "n_ctx": 64})
    first = subprocess.run([engine], input=frame({"op": "hello", "protocol": 1}) + load,
                           capture_output=True, timeout=60).stdout
    h = struct.unpack("<I", first[:4])[0]
    at = 4 + h + 8 + struct.unpack("<Q", first[4 + h:12 + h])[0]
    h2 = struct.unpack("<I", first[at:at + 4])[0]
    n_vocab = json.loads(first[at + 4:at + 4 + h2])["n_vocab"]
    session = (frame({"op": "hello", "protocol": 1}) + load +
               frame({"op": "forward", "n_past": 0, "n_tokens": 1}, struct.pack("<i", 1)) +
               frame({"op": "truncate", "n_past": 0}) +
               frame({"op": "forward", "n_past": 0, "n_tokens": 1}, struct.pack("<i", 2)) +
               frame({"op": "set_faults", "faults": []}) + frame({"op": "bye"}))
    prefix = struct.pack("<H", n_vocab)
    put(out, "exec", "hello", prefix + hello)
    for flaw in ([], ["--error-at-forward", "1"], ["--bad-frame"], ["--oversize-frame"],
                 ["--wrong-size"], ["--extra-bytes"], ["--wrong-digest"], ["--no-faults"]):
        r = subprocess.run([engine] + flaw, input=session, capture_output=True, timeout=60)
        name = "session" + ("-" + flaw[0].lstrip("-") if flaw else "")
        put(out, "exec", name, prefix + r.stdout)
    # hand-made edge frames: an error reply, a header that is not an object, one cut short
    put(out, "exec", "error", prefix + frame({"ok": False, "error": "out of\nmemory \x01"}))
    put(out, "exec", "array", prefix + struct.pack("<I", 2) + b"[]" + struct.pack("<Q", 0))
    put(out, "exec", "short", prefix + frame({"ok": True})[:-3])


def run_test(build, test, scratch):
    env = dict(os.environ, TMPDIR=scratch)
    subprocess.run([os.path.join(build, test), "--jobs=1"], env=env, capture_output=True,
                   timeout=600, cwd=build)


def files(scratch, suffix):
    """Regular files under scratch ending in suffix; symlinks are not followed (the tests plant
    links that lead out of their folders, or into loops)."""
    found = []
    for d, _, names in os.walk(scratch):
        for n in names:
            p = os.path.join(d, n)
            if n.endswith(suffix) and os.path.isfile(p) and not os.path.islink(p):
                found.append(p)
    return sorted(found)


def unique(out, target, prefix, data, seen):
    d = hashlib.sha1(data).hexdigest()[:12]
    if d not in seen:
        seen.add(d)
        put(out, target, prefix + "-" + d, data)


def ladder_seeds(build, out, scratch):
    seen = set()
    for y in sorted(glob.glob(os.path.join(ROOT, "ladders", "*.yaml")) +
                    glob.glob(os.path.join(ROOT, "tests", "data", "ladders", "*.yaml"))):
        unique(out, "ladder", os.path.basename(y), open(y, "rb").read(), seen)
    run_test(build, "test_ladder", scratch)
    for y in files(scratch, ".yaml"):
        unique(out, "ladder", "test", open(y, "rb").read(), seen)


def receipt_seeds(build, out, scratch):
    run_test(build, "test_store", scratch)
    seen = set()
    for x in files(scratch, ".jsonl"):
        data = open(x, "rb").read()
        unique(out, "receipt", "export", b"\0" + data, seen)
        for line in data.splitlines():
            try:
                env = json.loads(line)
                payload = base64.b64decode(env["payload"])
            except (ValueError, KeyError, TypeError):
                continue
            mode = b"\2" if env.get("payloadType", "").find("head") >= 0 else b"\1"
            unique(out, "receipt", "payload", mode + payload, seen)


def golden_seeds(build, out, scratch):
    seen = set()
    for g in sorted(glob.glob(os.path.join(ROOT, "ladders", "*goldens*.json"))):
        unique(out, "golden", os.path.basename(g), open(g, "rb").read(), seen)
    run_test(build, "test_golden", scratch)
    for g in files(scratch, ".json"):
        data = open(g, "rb").read()
        if b'"models"' in data:
            unique(out, "golden", "test", data, seen)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: fuzz/seed.py BUILD OUT")
    build, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    gguf_seeds(out)
    exec_seeds(build, out)
    for fn in (ladder_seeds, receipt_seeds, golden_seeds):
        scratch = tempfile.mkdtemp(prefix="gate-fuzz-seed-")
        try:
            fn(build, out, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    for t in sorted(os.listdir(out)):
        print("%-8s %d seeds" % (t, len(os.listdir(os.path.join(out, t)))))


if __name__ == "__main__":
    main()
