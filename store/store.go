package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Store is a key-value store that the ranks of a job share to find each
// other: rank 0 publishes its address, the others wait for it; counters
// count arrivals at a barrier.
//
// Every method may be called from several goroutines at once. Methods that
// wait (Get, Wait) block only their caller. When ctx has no deadline, an
// implementation applies its default timeout (Options.Timeout). Errors
// from a cancelled or timed-out call wrap ctx's error, so
// errors.Is(err, context.DeadlineExceeded) works. After Close every method
// returns an error wrapping ErrClosed.
type Store interface {
	// Set stores value under key, replacing any previous value, and wakes
	// every caller waiting for key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, waiting until the key exists or ctx
	// ends.
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the counter under key and returns the new value. A
	// missing key counts as 0. Counters are stored as decimal text, so Get
	// on a counter returns e.g. "3"; Add on a value that is not a decimal
	// integer fails with ErrNotInteger.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareSet stores desired under key if the current value equals
	// expected, where an empty expected also matches a missing key. It
	// returns the value held after the call: desired if it was stored, the
	// current value otherwise (nil when the key is missing).
	CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Wait waits until every key exists or ctx ends.
	Wait(ctx context.Context, keys ...string) error
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// NumKeys returns the number of keys in the store.
	NumKeys(ctx context.Context) (int64, error)
	// Close releases the store's connection or files. It is safe to call
	// more than once.
	Close() error
}

// Errors wrapped by the store's errors. Use errors.Is to test for them.
var (
	// ErrClosed: the store (or its connection to the server) was closed.
	ErrClosed = errors.New("store closed")
	// ErrProtocol: a peer sent bytes that break the wire protocol, or a
	// file store's log is corrupt.
	ErrProtocol = errors.New("store protocol error")
	// ErrAuth: authentication with the shared secret failed, or an
	// unauthenticated connection tried to use a server that needs a secret.
	ErrAuth = errors.New("store authentication failed")
	// ErrNotInteger: Add found a value that is not a decimal integer.
	ErrNotInteger = errors.New("value is not an integer")
	// ErrTooLarge: a key, value or request exceeds Options.MaxMessage.
	ErrTooLarge = errors.New("message too large")
)

// DefaultTimeout is the per-call timeout applied when a call's ctx has no
// deadline and Options.Timeout is zero. It matches torch.distributed's
// default store timeout.
const DefaultTimeout = 5 * time.Minute

// Defaults of a server's guard against connections that do not
// authenticate (Options.HandshakeTimeout, Options.MaxPending).
const (
	// DefaultHandshakeTimeout is how long a server waits for a new
	// connection's first message: a client sends it as soon as it has read
	// the server's hello, so a few seconds is plenty even on a loaded host.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxPending is how many connections a server holds at once
	// that have not yet authenticated: a quarter of the common limit of
	// 1024 open files.
	DefaultMaxPending = 256
	// MaxPreAuthMessage is the largest frame a server reads from a
	// connection before it has authenticated (its first message, without
	// a secret). An authentication takes 83 bytes.
	MaxPreAuthMessage = 1024
)

// Options configure clients, servers and file stores. The zero value
// means: no secret, DefaultTimeout, DefaultMaxMessage,
// DefaultHandshakeTimeout, DefaultMaxPending.
type Options struct {
	// Secret, when not empty, is a key shared by the server and every
	// client. A client proves it knows it with HMAC-SHA256 over a fresh
	// server nonce before anything else; the server proves it back. A
	// server with a secret refuses every request of a connection that has
	// not authenticated. Servers and clients without a secret skip the
	// exchange; a client with a secret refuses a server without one.
	Secret []byte
	// Timeout bounds each call whose ctx has no deadline, and Dial's
	// retries when Dial's ctx has no deadline. Zero means DefaultTimeout;
	// negative means no default timeout.
	Timeout time.Duration
	// MaxMessage is the largest frame, in bytes, that a client or server
	// sends or accepts (keys and values of one request together). Zero
	// means DefaultMaxMessage.
	MaxMessage int
	// PollInterval is how often a file store re-reads its file while a Get
	// or Wait waits. Zero means 10ms. Ignored by TCP clients and servers.
	PollInterval time.Duration

	// The fields below concern servers only.

	// HandshakeTimeout bounds how long a server waits for a new
	// connection to authenticate (with a Secret) or to send its first
	// message (without one); the server then closes it. Once a connection
	// has authenticated no deadline applies: clients wait in Get and Wait
	// for as long as they like. Zero means DefaultHandshakeTimeout;
	// negative means no limit. Before authentication a server also refuses
	// any frame over MaxPreAuthMessage bytes.
	HandshakeTimeout time.Duration
	// MaxPending caps the connections a server holds that have not yet
	// authenticated; beyond it the server closes each new connection as
	// soon as it accepts it (a client's Dial retries). Zero means
	// DefaultMaxPending; negative means no cap.
	MaxPending int
	// ListenHost is the host or IP that Host's server listens on. Empty:
	// the addresses of this machine that addr's host resolves to, or every
	// interface when it resolves to none (a name that this machine maps to
	// 127.0.1.1, as Debian does, or a virtual IP). "0.0.0.0" or "::" listen
	// on every interface. Init takes it from GOCCL_STORE_BIND.
	ListenHost string
	// Logger receives connections that a server refuses before they
	// authenticate: each at debug level, and a summary at warn level at
	// most every 10 s. Nil means slog.Default().
	Logger *slog.Logger
}

func (o Options) timeout() time.Duration {
	if o.Timeout == 0 {
		return DefaultTimeout
	}
	return o.Timeout
}

func (o Options) maxMessage() int {
	if o.MaxMessage <= 0 {
		return DefaultMaxMessage
	}
	return o.MaxMessage
}

// EnvHandshakeTimeout names the environment variable that sets the
// handshake timeout of the store (Init, `goccl store`) and of the TCP
// transport's listeners; ParseHandshakeTimeout reads its value.
const EnvHandshakeTimeout = "GOCCL_HANDSHAKE_TIMEOUT"

// ParseHandshakeTimeout parses a handshake timeout as GOCCL_HANDSHAKE_TIMEOUT
// gives it: a Go duration ("5s", "300ms") or a number of seconds ("5",
// "0.5"). It must be positive.
func ParseHandshakeTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, fmt.Errorf("%s=%q is neither a duration (5s, 300ms) nor a number of seconds", EnvHandshakeTimeout, s)
		}
		if !(f > 0 && f < 1e6) {
			return 0, fmt.Errorf("%s=%q is out of range", EnvHandshakeTimeout, s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s=%q is not positive", EnvHandshakeTimeout, s)
	}
	return d, nil
}

func (o Options) handshakeTimeout() time.Duration {
	if o.HandshakeTimeout == 0 {
		return DefaultHandshakeTimeout
	}
	return o.HandshakeTimeout
}

func (o Options) maxPending() int {
	if o.MaxPending == 0 {
		return DefaultMaxPending
	}
	return o.MaxPending
}

func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

func (o Options) pollInterval() time.Duration {
	if o.PollInterval <= 0 {
		return 10 * time.Millisecond
	}
	return o.PollInterval
}

// withTimeout applies the default timeout d when ctx has no deadline.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// OpError is the error of a failed store call: which operation, on which
// key, against which store.
type OpError struct {
	Op   string // "set", "get", "add", "dial", ...
	Key  string // the key, or "" when the operation has none
	Addr string // the server address or file path
	Err  error
}

func (e *OpError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("store: %s %q at %s: %v", e.Op, e.Key, e.Addr, e.Err)
	}
	return fmt.Sprintf("store: %s at %s: %v", e.Op, e.Addr, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// WithPrefix returns a view of s in which every key is stored as
// prefix + "/" + key, so that jobs, groups and retries sharing one store
// do not collide. NumKeys counts the keys of the whole underlying store
// (as torch.distributed's PrefixStore does). Close on the view does
// nothing: the caller that created s closes it.
func WithPrefix(s Store, prefix string) Store {
	return &prefixStore{s: s, p: prefix + "/"}
}

type prefixStore struct {
	s Store
	p string
}

var _ Store = (*prefixStore)(nil)

func (p *prefixStore) Set(ctx context.Context, key string, value []byte) error {
	return p.s.Set(ctx, p.p+key, value)
}

func (p *prefixStore) Get(ctx context.Context, key string) ([]byte, error) {
	return p.s.Get(ctx, p.p+key)
}

func (p *prefixStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return p.s.Add(ctx, p.p+key, delta)
}

func (p *prefixStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	return p.s.CompareSet(ctx, p.p+key, expected, desired)
}

func (p *prefixStore) Wait(ctx context.Context, keys ...string) error {
	pk := make([]string, len(keys))
	for i, k := range keys {
		pk[i] = p.p + k
	}
	return p.s.Wait(ctx, pk...)
}

func (p *prefixStore) Delete(ctx context.Context, key string) (bool, error) {
	return p.s.Delete(ctx, p.p+key)
}

func (p *prefixStore) NumKeys(ctx context.Context) (int64, error) { return p.s.NumKeys(ctx) }

func (p *prefixStore) Close() error { return nil }
