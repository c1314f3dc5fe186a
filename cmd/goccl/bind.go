package main

// Binding local ranks to CPUs.
//
// Ranks that share a machine run best on disjoint cores: each rank's
// sender and receiver then take turns on its own core instead of four
// busy threads of two ranks chasing each other around two cores and
// waiting on each other's wake-ups. On the 2-core development machine a
// 2-rank TCP allreduce of 8 bytes took 20-25 us bound against 21-55 us
// unbound, and one of 64 MiB moved 1.69 GB/s against 1.40 (medians of
// eight alternated runs; BENCHMARKS.md). This is what mpirun's --bind-to core and srun's
// --cpu-bind do; goccl run and goccl bench do it by default (-cpu-bind).

// rankCPUs returns the CPUs local rank local of nproc is bound to: an
// equal, contiguous share of allowed (the CPUs this process may use). It
// returns nil, for no binding, when there is one rank or more ranks than
// CPUs: two ranks on one CPU would only take turns on it, as mpirun
// binds to nothing when it oversubscribes.
func rankCPUs(allowed []int, nproc, local int) []int {
	n := len(allowed)
	if nproc <= 1 || nproc > n || local < 0 || local >= nproc {
		return nil
	}
	return allowed[local*n/nproc : (local+1)*n/nproc]
}
