// Package commslog implements goccl's communication logger: a timed record
// of every collective, the bandwidth figures nccl-tests reports, a summary
// table per operation and message size, and a straggler report.
//
// It plays the part of DeepSpeed's comms logger. When logging is on (the
// goccl.WithCommsLog option, or GOCCL_COMMS_LOG=1 in the environment; see
// ConfigFromEnv), the communicator times each collective and appends a
// Record: the op name, the message size, the dtype, the algorithm, the
// latency and two bandwidths:
//
//	algbw = bytes / latency
//	busbw = algbw * BusFactor(op, n)
//
// Sizes count the whole message as nccl-tests does (an allgather's output,
// a reduce-scatter's input, an allreduce's buffer once), and BusFactor is
// nccl-tests' correction: 2(n-1)/n for allreduce, (n-1)/n for allgather,
// reduce-scatter, all-to-all, gather and scatter, 1 for broadcast, reduce and
// point-to-point. So figures printed here compare directly with nccl-tests
// and with `goccl bench`. Bandwidths are shown in GB/s (10^9 bytes per
// second, as nccl-tests) or, with Units = Gbps, in DeepSpeed's Gbit/s.
//
// Op names are DeepSpeed's log names (AllReduce is "all_reduce",
// AllGatherIntoTensor is "all_gather_into_tensor", ...), so a trace from
// goccl reads like one from deepspeed.comm.
//
// Which ops are timed follows DeepSpeed's settings: Config.ProfAll, or the
// names in Config.ProfOps (an empty list means every op). Verbose writes one
// log/slog line per op as it completes; Debug adds the name of the function
// that called the collective. Logger.Records returns the records as data,
// Logger.WriteSummary prints the table (averages trimmed by 10% at each end),
// and Logger.LogSummary adds the straggler table: each rank's total latency
// per op minus the fastest rank's, found with an allgather over the ranks.
//
// A nil *Logger, or one whose Config is not Enabled, does nothing: Profiling
// returns false in about a nanosecond and the communicator skips the clock
// reads (see BenchmarkDisabled). commslog imports nothing of goccl's root
// package; the root calls it.
package commslog
