package ib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// KV is the rendezvous store through which ranks exchange their queue pair
// numbers. The store package's client (under store.WithPrefix for the
// job) satisfies it, as it does tcp.KV.
type KV interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, waiting until some rank sets it or
	// ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
}

// Keys of the exchange, relative to the KV's prefix.
func nonceKey(rank int) string    { return fmt.Sprintf("ib/nonce/%d", rank) }
func infoKey(from, to int) string { return fmt.Sprintf("ib/qp/%d/%d", from, to) }
func readyKey(rank int) string    { return fmt.Sprintf("ib/ready/%d", rank) }

// Environment variables read when the matching Config field is zero.
const (
	// EnvHCA names the device and optionally the port: "mlx5_0" or
	// "mlx5_0:1".
	EnvHCA = "GOCCL_IB_HCA"
	// EnvGIDIndex is the GID table index used for RoCE (default 0).
	EnvGIDIndex = "GOCCL_IB_GID_INDEX"
)

// Defaults for the zero values of Config.
const (
	DefaultTimeout     = 14 // local ACK timeout 4.096 µs × 2^14 ≈ 67 ms
	DefaultRetryCount  = 7
	DefaultRNRRetry    = 7 // for ever: the credits make RNR impossible anyway
	DefaultSlotSize    = 16 << 10
	DefaultRecvDepth   = 32
	DefaultRegCache    = 256 << 20
	DefaultSpin        = 50 * time.Microsecond
	DefaultHeartbeat   = time.Second
	DefaultInitTimeout = 5 * time.Minute
	DefaultMaxMessage  = 1 << 32
)

// headerLen is the size of every message header (wire.go).
const headerLen = 48

// Config says how a rank joins the mesh. Rank, Size, JobID and KV are
// required; every other zero value means the documented default.
type Config struct {
	Rank, Size int
	// JobID names the job; it is bound into every authenticated exchange.
	JobID string
	// KV is where ranks exchange their queue pair numbers.
	KV KV
	// Secret, when set, authenticates every rank's published queue pair
	// information with HMAC-SHA256 over the reading rank's fresh nonce
	// (GOCCL_SECRET at the root). Every rank must use the same secret.
	Secret []byte
	// Provider opens devices. Nil means Verbs(), libibverbs, which
	// returns ErrNotBuilt in a build without the ibverbs tag. Tests pass
	// the fake provider of transport/ib/ibfake.
	Provider Provider
	// HCA names the device, optionally with a port: "mlx5_0" or
	// "mlx5_0:1". Empty: GOCCL_IB_HCA, else the first device with an
	// active port.
	HCA string
	// GIDIndex is the GID table index for RoCE and routed fabrics; the
	// GID is used (a GRH added) when the port has no LID. Zero means
	// GOCCL_IB_GID_INDEX, else 0.
	GIDIndex int
	// Timeout is the local ACK timeout exponent (4.096 µs × 2^Timeout)
	// of every queue pair; zero means DefaultTimeout. (The verbs value 0,
	// wait for ever, cannot be chosen.)
	Timeout uint8
	// RetryCount is how often a queue pair retries a packet that got no
	// ACK before failing the link (at most 7); zero means
	// DefaultRetryCount. A peer that vanishes is noticed after about
	// (RetryCount+1) × the timeout.
	RetryCount uint8
	// RNRRetry is the receiver-not-ready retry count (7: for ever); zero
	// means DefaultRNRRetry.
	RNRRetry uint8
	// SlotSize is the size of each pre-registered receive (and send)
	// buffer; messages up to SlotSize-48 bytes go eagerly, larger ones by
	// rendezvous. Zero means DefaultSlotSize. Every rank must agree.
	SlotSize int
	// RecvDepth is the number of receive buffers posted per peer, and so
	// the credits a sender starts with; zero means DefaultRecvDepth, and
	// it must be at least 4. Every rank must agree.
	RecvDepth int
	// RegCacheBytes bounds the bytes of user and pooled buffers the
	// registration cache keeps registered (DefaultRegCache); negative
	// registers each rendezvous buffer for its message only.
	RegCacheBytes int64
	// RendezvousRead makes this rank offer its large messages for the
	// receiver to fetch with RDMA READ (announcement, read, a message
	// back) instead of being told where to write (announcement, reply,
	// write with immediate). Ranks need not agree: each receiver follows
	// the sender's announcement.
	RendezvousRead bool
	// Spin is how long the progress goroutine polls an idle completion
	// queue before it parks on the completion channel (DefaultSpin;
	// negative: park at once).
	Spin time.Duration
	// Heartbeat is how often a zero-byte RDMA WRITE probes each peer, so
	// that a peer that vanishes is noticed while no traffic flows
	// (DefaultHeartbeat; negative: never).
	Heartbeat time.Duration
	// InitTimeout bounds Connect (DefaultInitTimeout).
	InitTimeout time.Duration
	// MaxMessage is the largest message this rank sends, and that a peer
	// may announce (DefaultMaxMessage, 4 GiB); a larger announcement is a
	// protocol error.
	MaxMessage int64
	// Logger receives link failures. Nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) check() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("ib: size %d < 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("ib: rank %d out of range [0,%d)", c.Rank, c.Size)
	case c.KV == nil && c.Size > 1:
		return errors.New("ib: Config.KV is required")
	case c.SlotSize != 0 && c.SlotSize < 2*headerLen:
		return fmt.Errorf("ib: slot size %d < %d", c.SlotSize, 2*headerLen)
	case c.RecvDepth != 0 && c.RecvDepth < 4:
		return fmt.Errorf("ib: receive depth %d < 4", c.RecvDepth)
	case c.RetryCount > 7 || c.RNRRetry > 7 || c.Timeout > 31:
		return fmt.Errorf("ib: retry count %d, RNR retry %d or timeout %d out of range", c.RetryCount, c.RNRRetry, c.Timeout)
	}
	return nil
}

// defaults fills the zero values; getenv reads the environment.
func (c *Config) defaults(getenv func(string) string) error {
	if c.Provider == nil {
		c.Provider = Verbs()
	}
	if c.HCA == "" {
		c.HCA = getenv(EnvHCA)
	}
	if c.GIDIndex == 0 {
		if s := getenv(EnvGIDIndex); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("ib: %s=%q: want a GID index", EnvGIDIndex, s)
			}
			c.GIDIndex = n
		}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RetryCount == 0 {
		c.RetryCount = DefaultRetryCount
	}
	if c.RNRRetry == 0 {
		c.RNRRetry = DefaultRNRRetry
	}
	if c.SlotSize == 0 {
		c.SlotSize = DefaultSlotSize
	}
	if c.RecvDepth == 0 {
		c.RecvDepth = DefaultRecvDepth
	}
	if c.RegCacheBytes == 0 {
		c.RegCacheBytes = DefaultRegCache
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.InitTimeout == 0 {
		c.InitTimeout = DefaultInitTimeout
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// device splits HCA into a device name and a port number (0: first active).
func (c *Config) device() (string, int, error) {
	name, port, ok := strings.Cut(c.HCA, ":")
	if !ok {
		return name, 0, nil
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("ib: HCA %q: port %q is not a number from 1", c.HCA, port)
	}
	return name, n, nil
}

var getenv = os.Getenv
