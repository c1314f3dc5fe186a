"""The Gloo side of scripts/hosts-bench.sh (issue 37).

One rank of torch.distributed's gloo backend, joined under torchrun's
variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; GLOO_SOCKET_IFNAME
picks the link). It times one collective over float32 at sizes b, b*f, ...
up to e as goccl bench and hosts-bench-mpi time theirs (warm calls, a
barrier, then iters calls back to back; the time is the mean over ranks of
each rank's average) and rank 0 prints goccl bench's CSV rows:

  op,ranks,transport,size,count,type,redop,root,algo,time_us,algbw,busbw,wrong,sent_per_rank

The size is the whole buffer, rounded down as goccl bench rounds it (a
size that rounds to nothing is left out). An
allgather is the list form (all_gather): this torch's gloo has no
all_gather_into_tensor, and no reduce-scatter at all.

  hosts-bench-gloo.py op b e f warm iters check
"""

import socket
import sys
import time

import torch
import torch.distributed as dist


def main():
    if len(sys.argv) != 8:
        sys.exit("usage: hosts-bench-gloo.py op b e f warm iters check")
    op = sys.argv[1]
    b, e, f, warm, iters, check = (int(a) for a in sys.argv[2:])
    if op not in ("allreduce", "allgather"):
        sys.exit(f"hosts-bench-gloo: -op {op}: gloo here has allreduce and allgather only")
    # The ranks share the machine's cores: one thread each for torch's own
    # work (filling buffers), as the other paths' ranks do theirs.
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()

    # Where the ranks are: each one's host name (its UTS namespace's).
    hosts = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    if rank == 0:
        print(f"# gloo: torch {torch.__version__}, ranks' hosts {' '.join(hosts)}", flush=True)

    unit = 4 if op == "allreduce" else 4 * n
    factor = 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n
    step = b
    while step <= e:
        size = step // unit * unit
        count = size // 4
        if count == 0:
            # gloo's allgather of empty blocks dies of SIGFPE.
            step *= f
            continue
        if op == "allreduce":
            # In place, as torch's all_reduce is: zeros while timed, so
            # that repeated sums neither grow nor reach inf; the check
            # fills it with rank+1.
            buf = torch.zeros(count)

            def call():
                dist.all_reduce(buf)

        else:
            block = count // n
            send = torch.full((block,), float(rank + 1))
            recv = [torch.empty(block) for _ in range(n)]

            def call():
                dist.all_gather(recv, send)

        for _ in range(warm):
            call()
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            call()
        t = (time.perf_counter() - t) / iters

        wrong = 0
        if check:
            dist.barrier()
            if op == "allreduce":
                buf.fill_(float(rank + 1))
                call()
                wrong = int((buf != n * (n + 1) / 2).sum())
            else:
                for r in recv:
                    r.fill_(-1)
                call()
                wrong = sum(int((r != i + 1).sum()) for i, r in enumerate(recv))
        agg = torch.tensor([t, float(wrong)], dtype=torch.float64)
        dist.all_reduce(agg)
        if rank == 0:
            us = agg[0].item() / n * 1e6
            algbw = size / (us * 1e3) if us > 0 else 0
            redop = "sum" if op == "allreduce" else "none"
            print(f"{op},{n},gloo,{size},{count},float32,{redop},-1,gloo,{us:.3f},{algbw:.4f},{algbw * factor:.4f},{int(agg[1].item())},0",
                  flush=True)
        step *= f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
