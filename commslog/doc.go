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
// Which ops are timed can change at run time: StartProfiling() times every
// op and StopProfiling() stops that (DeepSpeed's start_profiling_comms and
// stop_profiling_comms); with op names they add to or remove from the ops
// timed (start_profiling_op, stop_profiling_op).
//
// # Styles
//
// Config.Style picks the conventions of the summary and of the Verbose
// lines. StyleNCCLTests, the zero value, is the one above. StyleDeepSpeed
// reproduces DeepSpeed's comms logger (deepspeed/utils/comms_logging.py:
// convert_size, calc_bw_log, CommsLogger.append and log_all, which
// deepspeed.comm.log_summary calls), so that its table and its lines read
// as DeepSpeed's do for the same latencies. It is the default of
// ParseDeepSpeed and ParseDeepSpeedConfig, which read DeepSpeed's
// "comms_logger" JSON.
//
//	                  nccl-tests (zero value)          deepspeed
//	message size      whole message: allgather         the tensor DeepSpeed reads: allgather
//	                  output, reduce-scatter input,    and gather per-rank input, scatter
//	                  gather/scatter all ranks' parts  per-rank output, reduce-scatter whole
//	                                                   input, others as nccl-tests
//	algbw / tput      bytes / time                     size/time; allgather, reduce-scatter:
//	                                                   size*n/time; allreduce: 2*size/time
//	busbw             algbw * BusFactor: allreduce     allreduce: size/time * 2(n-1)/n;
//	                  2(n-1)/n; allgather, reduce-     allgather, reduce-scatter: size*n/time
//	                  scatter, all-to-all, gather,     * (n-1)/n; all_to_all_single: (n-1)/n;
//	                  scatter (n-1)/n; others 1        others = tput
//	units             GB/s (or Gbps, Config.Units)     Gbps always
//	averages          drop floor(10%) at each end      drop round(10%) (halves to even) at
//	                                                   each end, numpy's mean
//	row order         by name, then size               names as they first appear, then size
//	latency columns   3 decimals                       2 decimals, every cell padded to 20
//	verbose line      slog attributes                  "[Rank 0] comm op: ... | time (ms): ...
//	                                                   | msg size: ... | algbw (Gbps): ... |
//	                                                   busbw (Gbps): ...", rank 0 only
//	straggler table   total per op minus the fastest   DeepSpeed's "Breakdown with straggler
//	                  rank's                           effect": per call, minus the minimum
//	                                                   over ranks
//
// In the DeepSpeed style, n is the size of the communicator the op ran on
// (DeepSpeed uses its world size even for a subgroup). Ops DeepSpeed cannot
// log (its calc_bw_log exits on them) take the nearest rule: all_to_all that
// of all_to_all_single, all_gather_coalesced that of all_gather,
// monitored_barrier and the object ops size/time.
//
// The straggler reports run their allgathers under a context marked by
// Internal. A communicator does not record a collective whose context
// IsInternal reports; that is how goccl keeps the calls it makes for itself
// (the straggler reports', the barrier that ends Init) out of the user's
// summary.
//
// A nil *Logger, or one whose Config is not Enabled, does nothing: Profiling
// returns false in about a nanosecond and the communicator skips the clock
// reads (see BenchmarkDisabled). commslog imports nothing of goccl's root
// package; the root calls it.
package commslog
