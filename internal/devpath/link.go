package devpath

import (
	"log/slog"

	"github.com/goccl/goccl/algo"
)

// Link is what the data path needs of a communicator for one call: goccl
// implements it over the peers of the call.
type Link interface {
	// Rank is this rank's index in the group, Size the group's size.
	Rank() int
	Size() int

	// Isend and Irecv move one message under the call's tag, as the
	// call's algo.Peers would (the first message to or from a peer may
	// carry the call's fingerprint). Peers calls them one at a time, under
	// a lock of its own: they need not be safe for concurrent use. The
	// returned requests are waited for from other goroutines.
	Isend(to int, b []byte) algo.Request
	Irecv(from int, b []byte) algo.Request

	// IsendCtl and IrecvCtl move a control message (an IPC ack) under a
	// tag of the call's that no data message uses, so that a receive
	// posted for the peer's data cannot match it. They may be called
	// concurrently with each other and with Isend and Irecv.
	IsendCtl(to int, b []byte) algo.Request
	IrecvCtl(from int, b []byte) algo.Request

	// SameHost reports whether peer is on this host, where device memory
	// may move by IPC. Both ends of a route must give the same answer.
	SameHost(peer int) bool

	// JobRank is the rank of group rank peer in the job: what the
	// per-device state (Ctx), shared by a communicator's groups, keys
	// its peers by.
	JobRank(peer int) int

	// Log logs msg at level with args (key-value pairs), on the
	// communicator's debug log.
	Log(level slog.Level, msg string, args ...any)
}
