package goccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/internal/devpath"
	"github.com/goccl/goccl/reduceop"
)

// TestDeviceIPC: between ranks of one process (hostsim shares memory
// within a process, as CUDA IPC does within a host) a device allreduce
// moves its large messages device to device, with no staging through host
// memory; when a rank's device refuses IPC, every message to and from it
// is staged instead, the result is the same, and the debug log says why.
func TestDeviceIPC(t *testing.T) {
	const count = 3 << 20 / 4 // float32: messages of 256 KiB and more for n <= 3
	for _, a := range []algo.Algorithm{algo.Ring, algo.Halving, algo.Tree} {
		for _, n := range []int{2, 3} {
			for _, refuse := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/n=%d/refuse=%v", a, n, refuse), func(t *testing.T) {
					devs := make([]*hostsim.Device, n)
					for r := range devs {
						var opts []hostsim.Option
						if refuse && r == 1 {
							opts = append(opts, hostsim.NoIPC)
						}
						devs[r] = hostsim.New(opts...)
						devs[r].StartTimeline()
						defer devs[r].Close()
					}
					var log testutil.Buffer
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					defer cancel()
					err := RunLocal(ctx, n, func(ctx context.Context, c *Comm) error {
						d := devs[c.Rank()]
						b, err := d.Alloc(reduceop.Float32, count)
						if err != nil {
							return err
						}
						defer b.Free()
						mem := b.(*hostsim.Buffer).Bytes()
						for i := range count {
							binary.NativeEndian.PutUint32(mem[4*i:], math.Float32bits(float32(c.Rank()+1+i%13)))
						}
						if err := c.AllReduce(ctx, b, reduceop.Sum); err != nil {
							return err
						}
						for i := range count {
							want := float32(n*(n+1)/2 + n*(i%13))
							if got := math.Float32frombits(binary.NativeEndian.Uint32(mem[4*i:])); got != want {
								return fmt.Errorf("rank %d: element %d = %v, want %v", c.Rank(), i, got, want)
							}
						}
						return nil
					}, WithAlgorithm(a), fakeEnv(map[string]string{EnvDebug: "debug"}), withDebugOutput(&log))
					if err != nil {
						t.Fatal(err)
					}
					var staged, direct int
					for _, d := range devs {
						for _, s := range d.Timeline() {
							switch s.Kind {
							case hostsim.KindCopyToHost:
								staged += s.Bytes
							case hostsim.KindCopy:
								direct += s.Bytes
							}
						}
					}
					out := log.String()
					t.Logf("%d bytes copied device to device, %d staged through host memory", direct, staged)
					if !refuse {
						if staged != 0 || direct < 4*count || !strings.Contains(out, `msg="goccl device ipc" `) {
							t.Errorf("IPC between every pair: want no bytes staged, and %d or more copied device to device; log:\n%s", 4*count, out)
						}
						return
					}
					if staged == 0 {
						t.Errorf("rank 1 refuses IPC: nothing was staged")
					}
					// Rank 1 cannot export (what it sends is staged) and cannot
					// import (its peers' handles are refused, and they say so).
					for _, want := range []string{
						`msg="goccl device ipc export failed, staging through host memory" rank=1 peer=\d`,
						`msg="goccl device ipc refused, staging through host memory" rank=1 peer=\d`,
						`msg="goccl device ipc refused by the peer, staging through host memory" rank=\d peer=1`,
					} {
						if !regexp.MustCompile(want).MatchString(out) {
							t.Errorf("log has no %q:\n%s", want, out)
						}
					}
				})
			}
		}
	}
}

// TestDeviceIPCOff: GOCCL_DEVICE_IPC=0 stages every message, as a device
// without IPC does.
func TestDeviceIPCOff(t *testing.T) {
	const count = 1 << 20 / 4
	devs := []*hostsim.Device{hostsim.New(), hostsim.New()}
	for _, d := range devs {
		d.StartTimeline()
		defer d.Close()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := RunLocal(ctx, 2, func(ctx context.Context, c *Comm) error {
		b, err := devs[c.Rank()].Alloc(reduceop.Float32, count)
		if err != nil {
			return err
		}
		defer b.Free()
		return c.AllReduce(ctx, b, reduceop.Sum)
	}, WithAlgorithm(algo.Ring), fakeEnv(map[string]string{EnvDeviceIPC: "0"}))
	if err != nil {
		t.Fatal(err)
	}
	for r, d := range devs {
		for _, s := range d.Timeline() {
			if s.Kind == hostsim.KindCopy {
				t.Errorf("rank %d: a device to device copy of %d bytes with IPC off", r, s.Bytes)
			}
		}
	}
}

// The package's name for the variable, in its errors, is goccl's.
func TestEnvDeviceIPCIsDevpaths(t *testing.T) {
	if EnvDeviceIPC != devpath.EnvIPC {
		t.Fatalf("EnvDeviceIPC %q, internal/devpath's EnvIPC %q", EnvDeviceIPC, devpath.EnvIPC)
	}
}
