"""Baselines for goccl's kernels, measured with CuPy in the same run.

For 256 MiB of float32 random data: device-to-device copy bandwidth (the
limit), x + y (what a user would write for a reduction), and
cupy.packbits(cupy.signbit(x)) (DeepSpeed's 1-bit path). Each is timed with
CUDA events after a warm-up, median of many runs, and reported as GB/s of
the bytes it must move and as a fraction of the copy bandwidth.
"""
import statistics
import sys

import cupy as cp

N = 64 << 20  # float32 elements: 256 MiB
RUNS = 50


def timed(fn):
    for _ in range(5):
        fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(RUNS):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def main():
    rng = cp.random.default_rng(1)
    x = rng.standard_normal(N, dtype=cp.float32)
    y = rng.standard_normal(N, dtype=cp.float32)
    out = cp.empty_like(x)
    nbytes = x.nbytes
    rows = []
    t = timed(lambda: out.__setitem__(slice(None), x))  # copy: read + write
    copy_bw = 2 * nbytes / t
    rows.append(("d2d copy", 2 * nbytes, t))
    rows.append(("cupy x + y", 3 * nbytes, timed(lambda: cp.add(x, y, out=out))))
    rows.append(("cupy x += y", 3 * nbytes, timed(lambda: x.__iadd__(y))))
    rows.append(("cupy packbits(signbit)", nbytes + N // 8, timed(lambda: cp.packbits(cp.signbit(x)))))
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, N={N} float32, median of {RUNS}")
    for name, moved, t in rows:
        bw = moved / t
        print(f"{name:28s} {t*1e3:8.3f} ms {bw/1e9:8.1f} GB/s {bw/copy_bw:6.2f} of copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
