package devpath

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/transport"
)

// Device memory between the ranks of one host (IPC). When both ends of a
// message of at least ipcMin bytes hold device memory and the peer is on
// this host (its route is shm or mem), the data path moves the message as
// one item instead of staged chunks:
//
//	sender                                  receiver
//	header: IPC handle of the buffer,  -->  import the handle; copy device to
//	        offset, length                  device on the recv stream; wait
//	wait for the ack                   <--  ack: done
//
// so the bytes cross once, device to device, with no pinned staging and
// nothing on the wire but the header. A device without IPC (or whose
// export fails) sends a header saying so, and a receiver whose import
// fails (another process's hostsim memory, CUDA refusing a handle of its
// own process, a container without the IPC namespace) acks "refused"; in
// both cases the message then goes the staged way, chunk by chunk, and
// the debug log says so once per peer. A sender that was refused by a
// peer stops offering it handles, but always sends the header, so the
// two ends never have to agree on anything but the message's length.
//
// The acks travel as control messages (Link.IsendCtl, under a tag of
// their own): on the call's tag they could be matched by a receive posted
// for the peer's data.
const (
	ipcMin       = 64 << 10
	ipcHeaderLen = 4 + device.IPCHandleMax + 16

	ipcStaged  = 0 // header kinds
	ipcHandle  = 1
	ackDone    = 1 // ack values
	ackRefused = 2
)

// EnvIPC is goccl.EnvDeviceIPC, named in errors: set to 0 (or off,
// false), it turns device IPC off for a rank (IPCDisabled).
const EnvIPC = "GOCCL_DEVICE_IPC"

// IPCDisabled reports whether v, the value of EnvIPC, turns device IPC
// off: the rank offers no handles and refuses its peers', so its
// same-host device messages are staged.
func IPCDisabled(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "off", "false", "no":
		return true
	}
	return false
}

// useIPC reports whether a message of n bytes to or from peer, in device
// memory on this side, goes as one IPC item. Both ends compute the same
// answer: the fingerprint makes sure both hold device memory, the
// algorithm that both run gives the message the same length at both ends,
// and a route is same-host at both ends or at neither (Link.SameHost).
func (p *Peers) useIPC(peer int, onDev bool, n int) bool {
	if !onDev || n < ipcMin {
		return false
	}
	return p.link.SameHost(peer)
}

// ipc moves one IPC item, c, with every earlier chunk of the lane done.
func (l *lane) ipc(c chunk) error {
	if l.send {
		return l.ipcSend(c)
	}
	return l.ipcRecv(c)
}

func (l *lane) ipcSend(c chunk) error {
	p := l.p
	if p.after != nil {
		// On a framework's stream the buffer is ready when the event the
		// call's streams wait on is: the peer copies from it on a stream
		// of its own, which knows nothing of that event.
		if err := p.d.run(p.ctx, p.ss.send, func() error { return nil }); err != nil {
			return fmt.Errorf("device IPC to rank %d: waiting for the stream: %w", l.peer, err)
		}
	}
	hdr := make([]byte, ipcHeaderLen)
	handle := p.d.export(p, l.peer, c.buf)
	if handle != nil {
		hdr[0] = ipcHandle
		binary.LittleEndian.PutUint16(hdr[2:], uint16(len(handle)))
		copy(hdr[4:], handle)
	}
	binary.LittleEndian.PutUint64(hdr[4+device.IPCHandleMax:], uint64(c.off))
	binary.LittleEndian.PutUint64(hdr[12+device.IPCHandleMax:], uint64(c.n))
	if err := p.wire(l.peer, true, hdr); err != nil {
		return err
	}
	if handle != nil {
		ack := make([]byte, 1)
		if err := p.ctl(l.peer, false, ack); err != nil {
			return err
		}
		switch ack[0] {
		case ackDone:
			return nil
		case ackRefused:
			p.d.refusedBy(p, l.peer)
		default:
			return fmt.Errorf("device IPC with rank %d: ack %d: %w", l.peer, ack[0], transport.ErrProtocol)
		}
	}
	return l.pipeline(c)
}

func (l *lane) ipcRecv(c chunk) error {
	p, ctx := l.p, l.p.ctx
	hdr := make([]byte, ipcHeaderLen)
	if err := p.wire(l.peer, false, hdr); err != nil {
		return err
	}
	le := binary.LittleEndian
	hl := int(le.Uint16(hdr[2:]))
	off, n := le.Uint64(hdr[4+device.IPCHandleMax:]), le.Uint64(hdr[12+device.IPCHandleMax:])
	switch {
	case hdr[0] != ipcStaged && hdr[0] != ipcHandle, hl > device.IPCHandleMax, off > 1<<62:
		return fmt.Errorf("device IPC header from rank %d (kind %d, handle of %d bytes, offset %d): %w",
			l.peer, hdr[0], hl, off, transport.ErrProtocol)
	case n != uint64(c.n):
		return fmt.Errorf("device IPC from rank %d: it sends %d bytes, this rank receives %d: %w",
			l.peer, n, c.n, transport.ErrProtocol)
	}
	if hdr[0] == ipcHandle {
		src, done, err := p.d.importIPC(hdr[4 : 4+hl])
		if err == nil {
			s := p.ss.recv
			err = p.d.run(ctx, s, func() error { return s.Copy(c.buf, c.off, src, int(off), c.n) })
			if err == nil {
				done() // after a failure the copy may still run: the entry stays in use
			}
			if err != nil {
				return fmt.Errorf("device to device copy from rank %d: %w", l.peer, err)
			}
			p.d.note(p, l.peer, "goccl device ipc", "dir", "from")
			return p.ctl(l.peer, true, []byte{ackDone})
		}
		p.d.note(p, l.peer, "goccl device ipc refused, staging through host memory", "dir", "from", "err", err)
		if err := p.ctl(l.peer, true, []byte{ackRefused}); err != nil {
			return err
		}
	}
	return l.pipeline(c)
}

// pipeline moves c the staged way, in chunks of Chunk bytes, at most
// laneSlots in flight: the lane's own path, run here because an IPC item
// holds the whole lane.
func (l *lane) pipeline(c chunk) error {
	p := l.p
	var q []inFlight
	var first error
	finish := func() {
		f := q[0]
		q = q[1:]
		err := f.err
		if err == nil {
			err = l.end(&f)
		}
		if err == nil && f.slot != nil {
			p.d.putSlot(f.slot)
		}
		if err != nil && first == nil {
			first = err
			p.fail(err)
		}
	}
	for lo := 0; lo < c.n && first == nil; lo += Chunk {
		q = append(q, l.begin(chunk{req: c.req, buf: c.buf, off: c.off + lo, n: min(Chunk, c.n-lo)}))
		if len(q) == laneSlots {
			finish()
		}
	}
	for len(q) > 0 && first == nil {
		finish()
	}
	return first
}

// wire sends or receives b to or from peer under the call's tag, as a
// chunk does (the first message of the call carries the fingerprint).
func (p *Peers) wire(peer int, send bool, b []byte) error {
	p.mu.Lock()
	var r algo.Request
	if send {
		r = p.link.Isend(peer, b)
	} else {
		r = p.link.Irecv(peer, b)
	}
	p.mu.Unlock()
	return r.Wait(p.ctx)
}

// ctl sends or receives an ack as a control message (Link.IsendCtl).
func (p *Peers) ctl(peer int, send bool, b []byte) error {
	var r algo.Request
	if send {
		r = p.link.IsendCtl(peer, b)
	} else {
		r = p.link.IrecvCtl(peer, b)
	}
	return r.Wait(p.ctx)
}

// export returns the IPC handle of b for peer, or nil when the message
// goes staged: the device has no IPC, its export fails, or peer refused a
// handle of this communicator before.
func (d *Ctx) export(p *Peers, peer int, b device.Buffer) []byte {
	ipc, ok := d.dev.(device.IPC)
	if !ok || d.noIPC {
		return nil
	}
	d.mu.Lock()
	refused := d.ipcRefused[p.link.JobRank(peer)]
	d.mu.Unlock()
	if refused {
		return nil
	}
	h, err := ipc.IPCExport(b)
	if err == nil && len(h) > device.IPCHandleMax {
		err = fmt.Errorf("handle of %d bytes, more than %d", len(h), device.IPCHandleMax)
	}
	if err != nil {
		d.note(p, peer, "goccl device ipc export failed, staging through host memory", "dir", "to", "err", err)
		return nil
	}
	return h
}

// refusedBy records that peer refused a handle: it gets no more.
func (d *Ctx) refusedBy(p *Peers, peer int) {
	d.mu.Lock()
	if d.ipcRefused == nil {
		d.ipcRefused = map[int]bool{}
	}
	d.ipcRefused[p.link.JobRank(peer)] = true
	d.mu.Unlock()
	d.note(p, peer, "goccl device ipc refused by the peer, staging through host memory", "dir", "to")
}

// ipcCacheMax bounds the handles kept open (mapped) per device.
const ipcCacheMax = 64

// ipcEntry is an imported handle, kept open for the next message from the
// same buffer: mapping a handle costs far more than a small copy on CUDA.
// A handle names one allocation for its life (CUDA gives reused addresses
// new handles), so a cached mapping never shows other memory than the
// handle's.
type ipcEntry struct {
	buf  device.Buffer
	refs int    // copies using it now; evicted only at 0
	used uint64 // d.ipcTick at the last use
}

// importIPC returns the memory a peer's handle names and the function to
// call when the copy from it is done.
func (d *Ctx) importIPC(h []byte) (device.Buffer, func(), error) {
	ipc, ok := d.dev.(device.IPC)
	if !ok {
		return nil, nil, fmt.Errorf("device %s has no IPC", d.dev)
	}
	if d.noIPC {
		return nil, nil, fmt.Errorf("device IPC turned off (%s)", EnvIPC)
	}
	key := string(h)
	if e := d.cached(key); e != nil {
		return e.buf, d.done(e), nil
	}
	b, err := ipc.IPCImport(h)
	if err != nil {
		if e := d.cached(key); e != nil {
			return e.buf, d.done(e), nil // opened meanwhile by another call
		}
		return nil, nil, err
	}
	d.mu.Lock()
	if d.ipcOpen == nil {
		d.ipcOpen = map[string]*ipcEntry{}
	}
	if e := d.ipcOpen[key]; e != nil { // opened meanwhile: keep that one
		e.refs++
		d.mu.Unlock()
		b.Free()
		return e.buf, d.done(e), nil
	}
	d.ipcTick++
	e := &ipcEntry{buf: b, refs: 1, used: d.ipcTick}
	d.ipcOpen[key] = e
	var evicted []device.Buffer
	for len(d.ipcOpen) > ipcCacheMax {
		var oldKey string
		var old *ipcEntry
		for k, x := range d.ipcOpen {
			if x.refs == 0 && (old == nil || x.used < old.used) {
				oldKey, old = k, x
			}
		}
		if old == nil {
			break // every entry in use: over the bound until they are done
		}
		delete(d.ipcOpen, oldKey)
		evicted = append(evicted, old.buf)
	}
	d.mu.Unlock()
	for _, x := range evicted {
		x.Free()
	}
	return e.buf, d.done(e), nil
}

// cached returns the open entry for key, counted as in use, or nil.
func (d *Ctx) cached(key string) *ipcEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.ipcOpen[key]
	if e != nil {
		e.refs++
		d.ipcTick++
		e.used = d.ipcTick
	}
	return e
}

func (d *Ctx) done(e *ipcEntry) func() {
	return func() {
		d.mu.Lock()
		e.refs--
		d.mu.Unlock()
	}
}

// note logs msg about peer once per communicator, peer and message (at
// info level for a fallback, debug for IPC in use), and counts it for
// tests.
func (d *Ctx) note(p *Peers, peer int, msg string, args ...any) {
	rank := p.link.JobRank(peer)
	d.mu.Lock()
	if d.notes == nil {
		d.notes = map[ipcNote]int{}
	}
	k := ipcNote{rank, msg}
	d.notes[k]++
	first := d.notes[k] == 1
	d.mu.Unlock()
	if !first {
		return
	}
	level := slog.LevelInfo
	if msg == "goccl device ipc" {
		level = slog.LevelDebug
	}
	p.link.Log(level, msg, append([]any{"peer", peer, "device", d.dev.String()}, args...)...)
}

type ipcNote struct {
	rank int
	msg  string
}
