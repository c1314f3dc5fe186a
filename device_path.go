package goccl

import (
	"context"
	"log/slog"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/devpath"
	"github.com/goccl/goccl/reduceop"
)

// The device data path (a collective on device memory runs the host
// algorithm over stand-ins, moving chunks through pinned slots and
// streams, or device to device by IPC) is package internal/devpath. This
// file is the communicator's side of it: the pools per device, kept in
// shared; devLink, the devpath.Link of one call over its peers; and the
// entry point, onDevice.

// devices is a communicator's devpath.Ctx per device, shared by its
// groups.
type devices struct {
	noIPC bool // GOCCL_DEVICE_IPC=0 (device_ipc.go)
	set   devpath.Devices
}

func (ds *devices) get(dev device.Device) (*devpath.Ctx, error) { return ds.set.Get(dev, ds.noIPC) }

// close frees every device's resources (Comm.Close).
func (ds *devices) close() { ds.set.Close() }

// devPeers is the algo.Peers of a collective on device memory.
type devPeers = devpath.Peers

// onDevice runs alg on the device buffer of v: alg gets a devPeers over p
// and a stand-in for the whole buffer. After a failure p.drain waits for
// the call's device work (call.go calls it once the endpoint is closed).
func (c *Comm) onDevice(ctx context.Context, p *peers, v view, op reduceop.Op, alg func(dp *devPeers, buf []byte) error) error {
	d, err := c.shared.devs.get(v.dev.Device())
	if err != nil {
		return err
	}
	k := devpath.Call{Link: devLink{p}, DType: v.dt, Op: op, After: p.after}
	drain, err := d.Run(ctx, k, v.dev, v.bytes(), alg)
	if drain != nil {
		p.drain = drain
	}
	return err
}

// devLink is the devpath.Link of a call: its data messages go through p
// (fingerprint and error wrapping included), its control messages under
// the call's IPC tag (device_ipc.go).
type devLink struct{ p *peers }

var _ devpath.Link = devLink{}

func (l devLink) Rank() int                             { return l.p.Rank() }
func (l devLink) Size() int                             { return l.p.Size() }
func (l devLink) Isend(to int, b []byte) algo.Request   { return l.p.Isend(to, b) }
func (l devLink) Irecv(from int, b []byte) algo.Request { return l.p.Irecv(from, b) }
func (l devLink) JobRank(peer int) int                  { return l.p.c.ranks[peer] }

// SameHost: a route over shared memory or within the process.
func (l devLink) SameHost(peer int) bool {
	switch l.p.c.TransportFor(peer) {
	case "shm", "mem":
		return true
	}
	return false
}

func (l devLink) Log(level slog.Level, msg string, args ...any) {
	c := l.p.c
	debugLog(c.opts.debugLogger(c.rank), level, msg, args...)
}

// useDevice puts k on the device data path of dev.
func (k *call) useDevice(dev device.Device) {
	k.chunk, k.dev = devpath.Chunk, dev
}

// sameDevice refuses a call whose two device buffers live on different
// devices.
func (c *Comm) sameDevice(op string, a, b view) error {
	if a.dev.Device() != b.dev.Device() {
		return invalid(op, c.rank, "send is on %v but recv on %v", a.dev.Device(), b.dev.Device())
	}
	return nil
}
