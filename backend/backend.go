// Package backend is the seam through which a goccl call's data movement
// is delegated to another library (MPI today, NCCL later), as
// deepspeed.comm delegates to its backends.
//
// A backend replaces the algorithm and the transport of a call, never its
// front: the root package still checks the arguments, orders the call
// (its sequence number), records it in the flight recorder and the comms
// logger, and bounds it with the call's deadline. What crosses the seam
// is a Call: the buffers as bytes, the dtype, the op, the root (or the
// peer) and the counts. A backend implements Comm: Start issues one call
// and returns a Request that Test polls. Group wraps a Comm with what
// every backend shares: the calls issued in their order, the polling
// under the deadline, Avg as Sum and a division, and the Guard, which
// compares fingerprints and finds the rank behind over goccl's own links
// (guard.go).
//
// Backends register themselves (Register) from packages under this one:
// backend/mpi does so only when built with the mpi tag, and backend/nccl
// only with the cuda tag, so that a binary built without them links no
// MPI and loads no NCCL.
package backend

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/reduceop"
)

// EnvBackend selects the backend (WithBackend, the file's "backend").
const EnvBackend = "GOCCL_BACKEND"

// Kind names a backend.
type Kind string

// The backends GOCCL_BACKEND names.
const (
	// Auto is the default: goccl's own path for host buffers; NCCL for
	// device buffers where backend/nccl is built (tag cuda), its library
	// loads on every rank and the communicator's endpoint can share its
	// id (else goccl's own path for those too); MPI only when asked for.
	Auto  Kind = "auto"
	Goccl Kind = "goccl" // goccl's own algorithms over its own transports
	NCCL  Kind = "nccl"  // backend/nccl, build tag cuda, libnccl.so.2 loaded at run time
	MPI   Kind = "mpi"   // backend/mpi, build tag mpi
)

// Parse reads a backend's name; "" is Auto.
func Parse(s string) (Kind, error) {
	switch k := Kind(strings.ToLower(strings.TrimSpace(s))); k {
	case "":
		return Auto, nil
	case Auto, Goccl, NCCL, MPI:
		return k, nil
	}
	return "", fmt.Errorf("unknown backend %q: want auto, goccl, nccl or mpi", s)
}

// Describe says what k runs, for GOCCL_DEBUG=info.
func (k Kind) Describe() string {
	switch k {
	case Auto, "":
		if _, ok := openers[NCCL]; ok {
			return "auto: goccl's own path for host buffers, NCCL for device buffers where it loads on every rank (MPI only when asked for)"
		}
		return "auto: goccl's own path (no NCCL in a build without -tags cuda; MPI only when asked for)"
	case Goccl:
		return "goccl: goccl's own path"
	}
	return string(k)
}

// Coll names the collective of a Call.
type Coll uint8

// The collectives a backend runs.
const (
	AllReduce Coll = iota + 1
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	Send
	Recv
	Barrier
)

var collNames = [...]string{"", "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
	"alltoall", "gather", "scatter", "send", "recv", "barrier"}

func (c Coll) String() string {
	if int(c) < len(collNames) && c > 0 {
		return collNames[c]
	}
	return fmt.Sprintf("Coll(%d)", uint8(c))
}

// ParseColl is the Coll that String names s ("allreduce"; algo.Collective
// names its collectives alike), 0 for none.
func ParseColl(s string) Coll { return Coll(slices.Index(collNames[1:], s) + 1) }

// inPlace reports whether c runs on one buffer, Send and Recv the same.
func (c Coll) inPlace() bool { return c == AllReduce || c == Broadcast || c == Reduce }

// Call is one call's data movement, as the root hands it over. Buffers
// are this rank's: Send what it contributes, Recv where the result goes
// (the same slice for the in-place collectives: allreduce, broadcast and
// reduce). Counts are in elements. Host memory is in Send and Recv;
// device memory in SendDev and RecvDev instead (Send and Recv nil), for
// a backend whose Memory has Device.
type Call struct {
	Coll       Coll
	Send, Recv []byte
	// SendDev and RecvDev are the device buffers of a call on device
	// memory (the same Buffer for the in-place collectives).
	SendDev, RecvDev device.Buffer
	// Stream is the stream the call is enqueued on; nil: the backend's
	// own. Issued, if not nil, is closed by Run once the call is issued
	// (or failed before it was): a call on a framework's stream
	// (StreamComm) returns then, its work enqueued on the stream.
	Stream     device.Stream
	Issued     chan struct{}
	DType      reduceop.DType
	Op         reduceop.Op // Avg is Sum here and a division after (Group.Run)
	Root       int         // the root of a rooted collective; the peer of Send and Recv
	Tag        int         // Send and Recv: the user's tag
	SendCounts []int       // AllToAll: elements to each rank; nil: equal blocks
	RecvCounts []int       // AllToAll: elements from each rank; ReduceScatter: each rank's block
	// Order is the call's place among the backend calls of its group,
	// from Group.Next when the root orders the call; 0 for Send and Recv,
	// which are issued when made.
	Order uint64

	req Request // issued by Post
}

// Memory says which buffers a backend takes.
type Memory uint8

// The memories of Comm.Memory.
const (
	Host   Memory = 1 << iota // host memory (MPI)
	Device                    // device memory (NCCL)
)

// Comm is one group's communicator in a backend.
type Comm interface {
	// Name is the backend's name, as the logs and goccl bench show it.
	Name() string
	// Memory says which buffers the backend takes: a call on the other
	// memory runs on goccl's own path (Device only), or is refused
	// (Host only: a device buffer is ErrInvalid).
	Memory() Memory
	// Takes reports whether the backend runs c; a call it does not take
	// runs on goccl's own path (a dtype the library has no name for).
	Takes(c *Call) bool
	// Start issues c and returns at once. Group calls it in Order.
	Start(c *Call) (Request, error)
	// Split makes the communicator of the ranks that pass the same color
	// (negative: none, and nil is returned), ordered by key. Every rank
	// of the parent calls it, in the same order as its other Splits.
	Split(color, key int) (Comm, error)
	// Abort ends the job as the library requires after a call was
	// abandoned (MPI_Abort); it does not return where the library ends
	// the process.
	Abort(code int)
	// Close frees the communicator (and, for the world's, the library).
	Close() error
}

// Request is a call in flight.
type Request interface {
	// Test reports whether the call has completed, and its error.
	Test() (done bool, err error)
}

// Canceler is a Request that can be taken back when its wait ends
// before it completes (the deadline, an abort): Group calls Cancel then.
// NCCL's does so by aborting the communicator (ncclCommAbort); MPI's
// requests have none.
type Canceler interface {
	Cancel()
}

// Linked is a Comm that uses goccl's links itself (NCCL's shares its
// unique id over them): Group.Attach hands them over.
type Linked interface {
	Link(l Links)
}

// Opener makes a backend's world communicator for a job of size ranks,
// checking that the library sees the same rank and size.
type Opener func(rank, size int) (Comm, error)

var openers = map[Kind]Opener{}

// Register makes a backend available to Open; backends call it from an
// init function.
func Register(k Kind, open Opener) { openers[k] = open }

// ErrAborted is goccl.ErrAborted, here so that a backend's error can wrap
// it: a call whose backend communicator was aborted under it (NCCL's at a
// deadline) says so.
var ErrAborted = errors.New("communicator aborted")

// ErrUnavailable is wrapped by Open's error for a backend this binary
// does not have.
var ErrUnavailable = errors.New("backend not available")

// Resolve is Parse, then Available: the backend named s, if this binary
// can run it.
func Resolve(s string) (Kind, error) {
	k, err := Parse(s)
	if err == nil {
		err = Available(k)
	}
	return k, err
}

// Available returns nil if this binary can run backend k, else an error
// that wraps ErrUnavailable and says why.
func Available(k Kind) error {
	switch k {
	case Auto, Goccl, "":
		return nil
	}
	if _, ok := openers[k]; !ok {
		if k == NCCL {
			return fmt.Errorf("%w: backend nccl: goccl built without -tags cuda (build with `go build -tags cuda`; libnccl.so.2 is loaded at run time)", ErrUnavailable)
		}
		if k == MPI {
			return fmt.Errorf("%w: backend mpi: goccl built without -tags mpi (build with `go build -tags mpi` against an MPI's mpi.h)", ErrUnavailable)
		}
		return fmt.Errorf("%w: backend %q", ErrUnavailable, k)
	}
	return nil
}

// Open returns the world communicator of backend k, or nil for Goccl
// (goccl's own path). For Auto it is NCCL's where backend/nccl is built
// and its library loads here, else nil and, where NCCL is built, why not
// (ErrUnavailable wrapped): auto then runs goccl's own path. Every rank
// must agree on Auto's outcome (Agree) before using it.
func Open(k Kind, rank, size int) (Comm, error) {
	if k == Auto || k == "" {
		open, ok := openers[NCCL]
		if !ok {
			return nil, nil
		}
		return open(rank, size) // its error wraps ErrUnavailable
	}
	if err := Available(k); err != nil || k == Goccl {
		return nil, err
	}
	return openers[k](rank, size)
}
