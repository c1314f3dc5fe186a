package hostsim_test

import (
	"testing"
	"time"

	"github.com/goccl/goccl/device/devicetest"
	"github.com/goccl/goccl/device/hostsim"
)

func TestConformance(t *testing.T) {
	dev := hostsim.New()
	defer dev.Close()
	devicetest.Run(t, dev)
	devicetest.RunMisuse(t, dev)
}

// TestConformanceLatency runs the suite with every piece of work slowed
// down, so that streams really do overlap and ordering bugs show.
func TestConformanceLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("slow with latency")
	}
	dev := hostsim.New(hostsim.Latency{Copy: 50 * time.Microsecond, CopyBandwidth: 10e9, Kernel: 100 * time.Microsecond, Launch: 100 * time.Microsecond})
	defer dev.Close()
	devicetest.Run(t, dev)
	devicetest.RunMisuse(t, dev)
}
