#!/usr/bin/python3
"""Independent NumPy reference for goccl's onebit.CompressedAllReduce.

It simulates p ranks running DeepSpeed's compressed allreduce (the
communication of 1-bit Adam) for a few steps with error feedback carried,
and writes the golden vectors that onebit's Go tests compare against.

Regenerate (from the repository root):

    /usr/bin/python3 onebit/reference/onebit_ref.py > testdata/onebit/golden.json

Numerics, step by step, all float32 except the sum of squares:
  * pad the input with zeros to a multiple of 8*p;
  * c = x + worker_error;
  * scale = float32(sqrt(sum c^2)) / float32(sqrt(len(c))), the sum of
    squares exact (math.fsum over float64 squares);
  * sign bit = 1 unless c < 0: +0, -0 and NaN are positive. This is
    DeepSpeed's c.sign().add_(1).bool(); note that np.signbit would call -0
    negative, so it is deliberately not used;
  * worker_error = c - scale * (+1 or -1);
  * bits packed with np.packbits (most significant bit first);
  * server i: acc = sum over workers j, in rank order, of
    (+1 or -1) * (scale_j * float32(1/p)); c = acc + server_error; then the
    same scale / sign / error update over the chunk;
  * output chunk j = (+1 or -1) * server_scale_j, trimmed to n.

Float arrays are stored as base64 of little-endian float32, sign arrays as
base64 of the packed bytes.
"""
import base64
import json
import math
import sys

import numpy as np

F32 = np.float32


def b64(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.float32:
        a = a.astype("<f4")
    return base64.b64encode(a.tobytes()).decode("ascii")


def positive(c):
    return ~(c < 0)  # not np.signbit: -0.0 and NaN count as positive


def rms(c):
    ss = math.fsum((c.astype(np.float64) ** 2).tolist())
    return F32(np.sqrt(ss)) / F32(np.sqrt(len(c)))


def pm1(bits):
    return np.where(bits, F32(1), F32(-1)).astype(np.float32)


def compress(c):
    """Returns (scale, packed sign bytes, new error) for compensated c."""
    s = rms(c)
    bits = positive(c)
    err = (c - s * pm1(bits)).astype(np.float32)
    return F32(s), np.packbits(bits), err


def step(xs, werr, serr, n, p, padded):
    chunk = padded // p
    cb = chunk // 8
    wscales, wsigns = [], []
    for r in range(p):
        x = np.zeros(padded, np.float32)
        x[:n] = xs[r]
        c = (x + werr[r]).astype(np.float32)
        s, bits, werr[r] = compress(c)
        wscales.append(s)
        wsigns.append(bits)
    sscales, ssigns = [], []
    inv = F32(1.0 / p)
    for i in range(p):
        acc = np.zeros(chunk, np.float32)
        for j in range(p):
            signs = pm1(np.unpackbits(wsigns[j][i * cb:(i + 1) * cb]).astype(bool))
            acc = (acc + signs * F32(wscales[j] * inv)).astype(np.float32)
        c = (acc + serr[i]).astype(np.float32)
        s, bits, serr[i] = compress(c)
        sscales.append(s)
        ssigns.append(bits)
    out = np.concatenate(
        [pm1(np.unpackbits(ssigns[j]).astype(bool)) * sscales[j] for j in range(p)]
    ).astype(np.float32)[:n]
    return dict(
        inputs=[b64(x) for x in xs],
        output=b64(out),
        worker_scales=b64(np.array(wscales, np.float32)),
        worker_signs=[b64(b) for b in wsigns],
        server_scales=b64(np.array(sscales, np.float32)),
        server_signs=b64(np.concatenate(ssigns)),
    )


def make_inputs(rng, kind, n, p):
    xs = []
    for r in range(p):
        if kind == "zeros":
            x = np.zeros(n, np.float32)
        elif kind == "negzeros":
            x = np.full(n, -0.0, np.float32)
        elif kind == "offset":
            x = (rng.standard_normal(n) * 0.1 + 1.0 + r).astype(np.float32)
        else:
            x = (rng.standard_normal(n) * (1 + r)).astype(np.float32)
            if n > 2:
                x[rng.integers(0, n, max(1, n // 10))] = F32(0.0)
                x[rng.integers(0, n, max(1, n // 10))] = F32(-0.0)
        xs.append(x)
    return xs


def case(rng, name, n, p, steps, kind):
    padded = -(-max(n, 0) // (8 * p)) * (8 * p)
    werr = [np.zeros(padded, np.float32) for _ in range(p)]
    serr = [np.zeros(padded // p, np.float32) for _ in range(p)]
    out = []
    for t in range(steps):
        k = kind if t == 0 or kind == "normal" else "normal"
        out.append(step(make_inputs(rng, k, n, p), werr, serr, n, p, padded))
    return dict(name=name, n=n, world=p, padded=padded, steps=out,
                worker_errors=[b64(e) for e in werr],
                server_errors=[b64(e) for e in serr])


def main():
    rng = np.random.default_rng(20240601)
    cases = []
    for p in range(1, 9):
        for n in (1, 7, 100):
            cases.append(case(rng, f"n{n}_p{p}", n, p, 3, "normal"))
    for p in (1, 3, 8):
        cases.append(case(rng, f"n1001_p{p}", 1001, p, 3, "normal"))
    cases.append(case(rng, "zeros_n37_p3", 37, 3, 2, "zeros"))
    cases.append(case(rng, "negzeros_n37_p3", 37, 3, 2, "negzeros"))
    cases.append(case(rng, "offset_n64_p4", 64, 4, 4, "offset"))
    cases.append(case(rng, "n257_p5", 257, 5, 3, "normal"))
    json.dump(dict(cases=cases), sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
