package goccl

import (
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/devpath"
)

// Device memory between the ranks of one host moves device to device by
// IPC (internal/devpath, ipc.go there). Its acks travel under a tag of
// their own, the call's tag with tagP2P and tagIPC set, which no
// point-to-point call can produce: on the call's tag they could be matched
// by a receive posted for the peer's data.
const tagIPC = 1 << 38

// EnvDeviceIPC set to 0 (or off, false) turns device IPC off for this
// rank, as NCCL_P2P_DISABLE does: it offers no handles and refuses its
// peers', so its same-host device messages are staged (goccl bench
// compares the two ways with it).
const EnvDeviceIPC = "GOCCL_DEVICE_IPC"

func ipcDisabled(v string) bool { return devpath.IPCDisabled(v) }

func (l devLink) IsendCtl(to int, b []byte) algo.Request   { return l.ctl(to, "->", b) }
func (l devLink) IrecvCtl(from int, b []byte) algo.Request { return l.ctl(from, "<-", b) }

// ctl starts a control message to or from peer under the call's IPC tag.
func (l devLink) ctl(peer int, dir string, b []byte) algo.Request {
	p := l.p
	tag, ep, to := p.tag|tagP2P|tagIPC, p.c.shared.ep, p.c.ranks[peer]
	r := &request{p: p, peer: peer, dir: dir}
	if dir == "->" {
		r.r = ep.Isend(to, tag, b)
	} else {
		r.r = ep.Irecv(to, tag, b)
	}
	return r
}
