package commslog

import (
	"fmt"
	"strings"
	"time"
)

// Op names, as DeepSpeed's comms logger spells them.
const (
	AllReduce           = "all_reduce"
	AllReduceCoalesced  = "all_reduce_coalesced"
	InferenceAllReduce  = "inference_all_reduce"
	Broadcast           = "broadcast"
	Reduce              = "reduce"
	AllGather           = "all_gather" // list form: one tensor per rank
	AllGatherIntoTensor = "all_gather_into_tensor"
	AllGatherCoalesced  = "all_gather_coalesced"
	ReduceScatter       = "reduce_scatter" // list form
	ReduceScatterTensor = "reduce_scatter_tensor"
	AllToAll            = "all_to_all" // list form
	AllToAllSingle      = "all_to_all_single"
	Gather              = "gather"
	Scatter             = "scatter"
	Send                = "send"
	Recv                = "recv"
	Isend               = "isend"
	Irecv               = "irecv"
	Barrier             = "barrier"
	MonitoredBarrier    = "monitored_barrier"
	BroadcastObjectList = "broadcast_object_list"
	AllGatherObject     = "all_gather_object"
	GatherObject        = "gather_object"
	ScatterObjectList   = "scatter_object_list"
)

// opNames is the canonical order of the known ops. Ranks agree on it
// without talking, so Straggler lays out its allgather by it.
var opNames = [...]string{
	AllReduce, AllReduceCoalesced, InferenceAllReduce, Broadcast,
	Reduce, AllGather, AllGatherIntoTensor, AllGatherCoalesced,
	ReduceScatter, ReduceScatterTensor, AllToAll, AllToAllSingle,
	Gather, Scatter, Send, Recv, Isend, Irecv, Barrier,
	MonitoredBarrier, BroadcastObjectList, AllGatherObject,
	GatherObject, ScatterObjectList,
}

// OpNames returns every op name this package knows, in a fixed order.
func OpNames() []string { return append([]string(nil), opNames[:]...) }

// BusFactor returns nccl-tests' bus bandwidth factor for op on n ranks:
// busbw = algbw * BusFactor. It is 2(n-1)/n for the allreduce family,
// (n-1)/n for allgather, reduce-scatter, all-to-all, gather and scatter (and
// their list, coalesced and object forms), and 1 for everything else
// (broadcast, reduce, send/recv, barriers, unknown names). n < 1 counts as 1.
func BusFactor(op string, n int) float64 {
	if n < 1 {
		n = 1
	}
	f := float64(n-1) / float64(n)
	switch op {
	case AllReduce, AllReduceCoalesced, InferenceAllReduce:
		return 2 * f
	case AllGather, AllGatherIntoTensor, AllGatherCoalesced, AllGatherObject,
		ReduceScatter, ReduceScatterTensor,
		AllToAll, AllToAllSingle,
		Gather, GatherObject, Scatter, ScatterObjectList:
		return f
	}
	return 1
}

// AlgBW returns the algorithm bandwidth of moving bytes in d, in bytes per
// second: bytes / d. It is 0 when d is not positive.
func AlgBW(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds()
}

// Units selects how bandwidths are shown. The zero value is GBps.
type Units uint8

const (
	// GBps shows 10^9 bytes per second, as nccl-tests does.
	GBps Units = iota
	// Gbps shows 10^9 bits per second, as DeepSpeed's comms logger does.
	Gbps
)

// String returns "GB/s" or "Gbps".
func (u Units) String() string {
	switch u {
	case GBps:
		return "GB/s"
	case Gbps:
		return "Gbps"
	}
	return fmt.Sprintf("Units(%d)", uint8(u))
}

// Convert turns a bandwidth in bytes per second into u.
func (u Units) Convert(bytesPerSec float64) float64 {
	if u == Gbps {
		return bytesPerSec * 8 / 1e9
	}
	return bytesPerSec / 1e9
}

// ParseUnits reads a Units name. "GBps", "GB/s", "GB" and "" mean GBps
// (bytes); "Gbps", "gbps", "Gbit/s" and "Gb" mean Gbps (bits). Exact
// spellings are matched first; otherwise the match ignores case and any
// name containing "bit" or spelled "gbps" means bits.
func ParseUnits(s string) (Units, error) {
	switch s {
	case "", "GBps", "GB/s", "GB":
		return GBps, nil
	case "Gbps", "Gbit/s", "Gb":
		return Gbps, nil
	}
	switch strings.ToLower(s) {
	case "gbps", "gbit/s", "gbits", "gbit":
		return Gbps, nil
	case "gb/s", "gbyte/s", "gbytes":
		return GBps, nil
	}
	return 0, fmt.Errorf("commslog: unknown units %q (GBps or Gbps)", s)
}
