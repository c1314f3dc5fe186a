package ib

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
)

// This file is the seam between the transport and the verbs library: the
// dozen verbs calls the transport makes, as Go interfaces. Two providers
// implement them: Verbs() over libibverbs (build tag ibverbs, verbs_cgo.go)
// and the in-memory fake in transport/ib/ibfake, which CI runs the
// transport over.

// Provider opens verbs devices (ibv_get_device_list + ibv_open_device).
type Provider interface {
	// Open opens the device called name ("" for the first device with an
	// active port) and prepares port (0 for the first active port), whose
	// GID at gidIndex it publishes: it allocates the protection domain
	// every later object lives in.
	Open(name string, port, gidIndex int) (Device, error)
}

// Device is an open device context with one protection domain and one
// port. Its methods may be called from several goroutines.
type Device interface {
	// Name is the device's name ("mlx5_0").
	Name() string
	// Port describes the port the device was opened on (ibv_query_port,
	// ibv_query_gid).
	Port() PortInfo
	// RegMR registers b for the given access (ibv_reg_mr). b must stay
	// alive and unmoved until the region is deregistered; the cgo provider
	// pins it.
	RegMR(b []byte, access Access) (MR, error)
	// CreateCQ makes a completion queue of at least entries entries with a
	// completion channel to park on (ibv_create_comp_channel,
	// ibv_create_cq).
	CreateCQ(entries int) (CQ, error)
	// CreateQP makes a reliable-connected queue pair whose send and
	// receive completions go to cq (ibv_create_qp), in state RESET.
	CreateQP(cq CQ, caps QPCaps) (QP, error)
	// Close frees the protection domain and the context.
	Close() error
}

// PortInfo is what a rank publishes about its port, plus its state.
type PortInfo struct {
	Num    int      // port number, from 1
	LID    uint16   // local identifier (InfiniBand); 0 on RoCE
	GID    [16]byte // global identifier at GIDIndex (RoCE, routed IB)
	Active bool     // state is ACTIVE
	MTU    MTU      // active MTU
}

// MTU is an IB MTU enum value (ibv_mtu): 1 is 256 bytes ... 5 is 4096.
type MTU int

// Bytes returns the MTU in bytes.
func (m MTU) Bytes() int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// Access is a set of memory-region access flags (ibv_access_flags).
type Access int

const (
	AccessLocalWrite  Access = 1 << 0
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

// MR is a registered memory region.
type MR interface {
	LKey() uint32
	RKey() uint32
	// Dereg deregisters the region (ibv_dereg_mr) and unpins its memory.
	Dereg() error
}

// CQ is a completion queue with its completion channel.
type CQ interface {
	// Poll fills wc with up to len(wc) completions and returns how many
	// (ibv_poll_cq). It never blocks.
	Poll(wc []WC) (int, error)
	// Arm asks for an event on the channel at the next completion
	// (ibv_req_notify_cq).
	Arm() error
	// Wait blocks until an event arrives on the channel after Arm, or ctx
	// ends (ibv_get_cq_event, ibv_ack_cq_events).
	Wait(ctx context.Context) error
	// Close destroys the queue and its channel.
	Close() error
}

// QPCaps sizes a queue pair.
type QPCaps struct {
	SendDepth, RecvDepth int
	InlineData           int
}

// QP is a reliable-connected queue pair. PostSend and PostRecv may be
// called from several goroutines, but the transport serialises each QP's
// posts under its peer's lock.
type QP interface {
	// Num is the queue pair number.
	Num() uint32
	// Init moves RESET -> INIT (ibv_modify_qp).
	Init(port int, access Access) error
	// ReadyToReceive moves INIT -> RTR towards the remote queue pair.
	ReadyToReceive(a RTRAttr) error
	// ReadyToSend moves RTR -> RTS.
	ReadyToSend(a RTSAttr) error
	// PostSend posts one send work request (ibv_post_send).
	PostSend(wr *SendWR) error
	// PostRecv posts one receive work request (ibv_post_recv).
	PostRecv(wr *RecvWR) error
	// SetError moves the queue pair to ERROR: outstanding work requests
	// complete with StatusFlushed, and the remote side sees no more.
	SetError() error
	// Close destroys the queue pair (ibv_destroy_qp).
	Close() error
}

// RTRAttr is what INIT -> RTR needs: the remote queue pair and the path.
type RTRAttr struct {
	Port       int
	RemoteLID  uint16
	RemoteGID  [16]byte
	UseGID     bool // address through the GRH (RoCE, routed IB)
	GIDIndex   int
	RemoteQPN  uint32
	RemotePSN  uint32
	MTU        MTU
	MinRNRTime uint8 // min_rnr_timer enum
	MaxRdAtom  uint8 // max_dest_rd_atomic
}

// RTSAttr is what RTR -> RTS needs.
type RTSAttr struct {
	PSN       uint32
	Timeout   uint8 // local ACK timeout: 4.096 µs × 2^Timeout
	RetryCnt  uint8 // transport retries, at most 7
	RNRRetry  uint8 // receiver-not-ready retries, 7 = for ever
	MaxRdAtom uint8 // max_rd_atomic
}

// Opcode is the operation of a send work request.
type Opcode int

const (
	OpSend     Opcode = iota // two-sided send into a posted receive
	OpWrite                  // RDMA WRITE
	OpWriteImm               // RDMA WRITE with immediate: consumes a receive
	OpRead                   // RDMA READ (not used by the transport yet)
)

// SendWR is one send work request with one scatter-gather element.
type SendWR struct {
	ID         uint64
	Op         Opcode
	Addr       uint64 // local address (AddrOf)
	Len        uint32
	LKey       uint32
	RemoteAddr uint64 // OpWrite, OpWriteImm, OpRead
	RKey       uint32
	Imm        uint32 // OpWriteImm
	Signaled   bool
}

// RecvWR is one receive work request with one scatter-gather element.
type RecvWR struct {
	ID   uint64
	Addr uint64
	Len  uint32
	LKey uint32
}

// WCOpcode says what a completion completes.
type WCOpcode int

const (
	WCSend    WCOpcode = iota // OpSend
	WCWrite                   // OpWrite, OpWriteImm
	WCRead                    // OpRead
	WCRecv                    // a receive consumed by a send
	WCRecvImm                 // a receive consumed by a write with immediate
)

// WC is a work completion (ibv_wc).
type WC struct {
	ID     uint64
	Status Status
	Op     WCOpcode
	Len    uint32 // bytes received (receives)
	Imm    uint32
	QPN    uint32
	Vendor uint32 // vendor error syndrome
}

// Status is a completion status (ibv_wc_status); the values are libibverbs'.
type Status int

const (
	StatusSuccess       Status = 0
	StatusLocLenErr     Status = 1
	StatusLocQPOpErr    Status = 2
	StatusLocProtErr    Status = 4
	StatusFlushed       Status = 5
	StatusRemAccessErr  Status = 10
	StatusRemOpErr      Status = 11
	StatusRetryExceeded Status = 12
	StatusRNRRetryExc   Status = 13
)

func (s Status) String() string {
	switch s {
	case StatusSuccess:
		return "success"
	case StatusLocLenErr:
		return "local length error"
	case StatusLocQPOpErr:
		return "local QP operation error"
	case StatusLocProtErr:
		return "local protection error"
	case StatusFlushed:
		return "work request flushed (QP in error)"
	case StatusRemAccessErr:
		return "remote access error"
	case StatusRemOpErr:
		return "remote operation error"
	case StatusRetryExceeded:
		return "transport retry counter exceeded"
	case StatusRNRRetryExc:
		return "RNR retry counter exceeded"
	}
	return fmt.Sprintf("status %d", int(s))
}

// CompletionError is a work completion that failed. The transport wraps it
// together with transport.ErrPeerClosed in the PeerError it reports.
type CompletionError struct {
	Status Status
	Op     WCOpcode
	Vendor uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("ib: work completion: %v (vendor syndrome %#x)", e.Status, e.Vendor)
}

// ErrNotBuilt is returned by Verbs().Open in a build without the ibverbs
// tag, and so by Connect when Config.Provider is nil.
var ErrNotBuilt = errors.New("ib: built without the ibverbs tag (libibverbs support is not compiled in)")

// AddrOf is the address of b's first byte as a verbs address. b must be
// kept alive by its owner for as long as the address is used.
func AddrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
