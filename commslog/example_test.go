package commslog_test

import (
	"fmt"
	"os"
	"time"

	"github.com/goccl/goccl/commslog"
)

// A 1 GB allreduce that takes one second on four ranks moves data at
// 1 GB/s (algbw) and loads each link at 1.5 GB/s (busbw), as nccl-tests
// reports it.
func ExampleLogger() {
	log := commslog.New(commslog.Config{Enabled: true}, 0, 4)

	// The communicator does this around every collective.
	if log.Profiling(commslog.AllReduce) {
		log.Append(commslog.Record{Op: commslog.AllReduce, Bytes: 1e9, DType: "float32",
			Algo: "ring", Latency: time.Second})
	}

	r := log.Records()[0]
	fmt.Printf("%s %s: algbw %.2f GB/s, busbw %.2f GB/s\n", r.Op, commslog.ConvertSize(r.Bytes),
		commslog.GBps.Convert(r.AlgBW), commslog.GBps.Convert(r.BusBW))
	log.WriteSummary(os.Stdout)
	// Output:
	// all_reduce 953.67 MB: algbw 1.00 GB/s, busbw 1.50 GB/s
	// Comm. Op            Message Size        Count               Total Latency(ms)   Avg Latency(ms)     algbw_avg (GB/s)    busbw_avg (GB/s)
	// all_reduce
	//                     953.67 MB           1                   1000.000            1000.000            1.00                1.50
}

func ExampleConfigFromEnv() {
	env := map[string]string{
		"GOCCL_COMMS_LOG":          "1",
		"GOCCL_COMMS_LOG_PROF_OPS": "all_reduce,all_gather_into_tensor",
		"GOCCL_COMMS_LOG_UNITS":    "Gbps",
	}
	cfg := commslog.ConfigFromEnv(func(k string) string { return env[k] })
	log := commslog.New(cfg, 0, 8)
	fmt.Println(cfg.Enabled, cfg.ProfOps, cfg.Units)
	fmt.Println(log.Profiling(commslog.AllReduce), log.Profiling(commslog.Broadcast))
	// Output:
	// true [all_reduce all_gather_into_tensor] Gbps
	// true false
}

func ExampleBusFactor() {
	for _, op := range []string{commslog.AllReduce, commslog.AllGatherIntoTensor, commslog.Broadcast} {
		fmt.Printf("%s on 8 ranks: %.3f\n", op, commslog.BusFactor(op, 8))
	}
	// Output:
	// all_reduce on 8 ranks: 1.750
	// all_gather_into_tensor on 8 ranks: 0.875
	// broadcast on 8 ranks: 1.000
}
