package tcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// KV is the rendezvous store ranks use to find each other's addresses. The
// store package's client satisfies it.
type KV interface {
	// Set stores value under key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, waiting until some rank sets it or
	// ctx ends.
	Get(ctx context.Context, key string) ([]byte, error)
}

// AddrKey is the KV key under which rank publishes its listening address.
func AddrKey(rank int) string { return fmt.Sprintf("tcp/addr/%d", rank) }

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout  = 5 * time.Second
	DefaultInitTimeout  = 5 * time.Minute
	DefaultSocketBuffer = 4 << 20
	DefaultMaxMessage   = 1 << 32
	// DefaultStripeMin is the smallest message split over several streams
	// when Config.Streams > 1.
	DefaultStripeMin = 1 << 20
	// DefaultHandshakeTimeout bounds one connection's handshake, so a
	// stranger that connects and stalls cannot hold a slot for long. A
	// rank's handshake is two round trips (plus TLS's): a few seconds is
	// plenty even on a loaded host. GOCCL_HANDSHAKE_TIMEOUT overrides it.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxPending is how many accepted connections may be in their
	// handshake at once (Config.MaxPending).
	DefaultMaxPending = 256
	// DefaultSpin is how long a goroutine waiting on a receive polls the
	// socket before it sleeps in the network poller (Config.Spin).
	DefaultSpin = 100 * time.Microsecond
)

// EnvHandshakeTimeout names the environment variable read when
// Config.HandshakeTimeout is zero: a Go duration ("5s", "300ms") or a
// number of seconds. The rendezvous store reads it too.
const EnvHandshakeTimeout = "GOCCL_HANDSHAKE_TIMEOUT"

// Config says how a rank joins the mesh. Rank, Size, JobID and KV are
// required; every other zero value means the documented default.
type Config struct {
	Rank, Size int
	// JobID names the job; peers of another job are refused.
	JobID string
	// KV is where ranks publish their addresses (key AddrKey(rank)).
	KV KV
	// ListenHost is the host or IP this rank listens on and advertises.
	// Empty: the first address of Interface if set, else this host's name
	// resolved to a non-loopback IP, else 127.0.0.1.
	ListenHost string
	// Interface names the network interface to listen on when ListenHost
	// is empty. Empty: the GOCCL_IFNAME environment variable.
	Interface string
	// Streams is the number of TCP connections per pair of ranks. Messages
	// of at least DefaultStripeMin bytes are split evenly over them. Zero
	// means 1. Every rank must use the same value.
	Streams int
	// Secret, when set, makes both ends of every connection prove they
	// know it (HMAC-SHA256 over a fresh random challenge). Every rank must
	// use the same secret.
	Secret []byte
	// TLS, when set, wraps every connection in TLS with this
	// configuration (both ends use it: set Certificates, RootCAs, and for
	// mutual authentication ClientCAs with ClientAuth). The dialer's
	// ServerName defaults to the peer's advertised host. TLSFromFiles
	// builds one from PEM files. Small messages then go through the TLS
	// writer rather than the inline non-blocking write.
	TLS *tls.Config
	// Logger receives refused connections and peer failures. Nil means
	// slog.Default().
	Logger *slog.Logger
	// DialTimeout bounds one connection attempt (DefaultDialTimeout).
	DialTimeout time.Duration
	// InitTimeout bounds Connect as a whole (DefaultInitTimeout).
	InitTimeout time.Duration
	// HandshakeTimeout bounds one connection's handshake, TLS included: a
	// peer that connects and then stalls is dropped after it. Zero means
	// GOCCL_HANDSHAKE_TIMEOUT if set, else DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxPending caps the accepted connections in their handshake at
	// once; beyond it the listener closes new connections as soon as it
	// accepts them (a legitimate peer's dial retries). Zero means
	// DefaultMaxPending, or Rank×Streams (the links this rank accepts) if
	// that is more; negative means no cap. Before authentication a peer
	// can make the listener read at most one hello (at most 1,076 bytes)
	// and one MAC.
	MaxPending int
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF (DefaultSocketBuffer);
	// negative leaves the system default.
	SocketBuffer int
	// MaxMessage is the largest message accepted from the wire
	// (DefaultMaxMessage); a frame announcing more is a protocol error.
	MaxMessage int64
	// Spin is how long a goroutine waiting on a receive from a peer polls the
	// socket (a read, then poll(2) and a read when there are bytes) before it
	// sleeps in Go's network poller (DefaultSpin); negative: it never polls. On
	// an exchange of small messages the answer often comes within the spin, and
	// then costs no thread wake-up; polling also pauses by itself while it does
	// not pay (reader.go). Connections under TLS or WrapConn never poll.
	Spin time.Duration
	// Yield makes the polls of a wait give the core to any runnable thread
	// between them (sched_yield) and go on when the core was taken, as on
	// a host with more ranks than cores (transport.NewYieldSpinner).
	Yield bool
	// Lazy makes Connect link only the ring neighbours (rank-1 and
	// rank+1) and every other pair when the first message between them is
	// sent (lazy.go); the endpoint then keeps listening for its life.
	// Every rank must use the same value. With Streams above 1 Connect
	// links every pair as if Lazy were false.
	Lazy bool
	// WrapConn, when set, wraps each connection to peer once its handshake
	// has passed, before any frame moves over it: for instrumentation, or
	// for tests that inject faults (a connection that breaks mid-message,
	// a peer that sends garbage). A wrapped connection is written through
	// its own Write method rather than the inline vectored write.
	WrapConn func(peer int, c net.Conn) net.Conn
}

func (c *Config) check() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("tcp: size %d < 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("tcp: rank %d out of range [0,%d)", c.Rank, c.Size)
	case c.KV == nil:
		return errors.New("tcp: Config.KV is nil")
	case c.Streams < 0 || c.Streams > 64:
		return fmt.Errorf("tcp: Streams %d out of range [0,64]", c.Streams)
	case len(c.JobID) > 1024:
		return errors.New("tcp: JobID longer than 1024 bytes")
	}
	return nil
}

func (c *Config) defaults() {
	if c.Streams == 0 {
		c.Streams = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.InitTimeout <= 0 {
		c.InitTimeout = DefaultInitTimeout
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
		if d, err := parseDuration(os.Getenv(EnvHandshakeTimeout)); err == nil {
			c.HandshakeTimeout = d
		}
	}
	if c.MaxPending == 0 {
		c.MaxPending = max(DefaultMaxPending, c.Rank*c.Streams)
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.Interface == "" {
		c.Interface = os.Getenv("GOCCL_IFNAME")
	}
}

// parseDuration reads GOCCL_HANDSHAKE_TIMEOUT's value: a Go duration or
// a number of seconds, positive (as store.ParseHandshakeTimeout, which
// Init uses to report a bad value).
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || !(f > 0 && f < 1e6) {
			return 0, fmt.Errorf("%s=%q: not a positive duration or number of seconds", EnvHandshakeTimeout, s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s=%q: not positive", EnvHandshakeTimeout, s)
	}
	return d, nil
}

// listenHost picks the host to listen on and advertise.
func (c *Config) listenHost() (string, error) {
	if c.ListenHost != "" {
		return c.ListenHost, nil
	}
	if c.Interface != "" {
		ifc, err := net.InterfaceByName(c.Interface)
		if err != nil {
			return "", fmt.Errorf("tcp: interface %q: %w", c.Interface, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("tcp: interface %q: %w", c.Interface, err)
		}
		var v6 string
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				if ipn.IP.To4() != nil {
					return ipn.IP.String(), nil
				}
				if v6 == "" && !ipn.IP.IsLinkLocalUnicast() {
					v6 = ipn.IP.String()
				}
			}
		}
		if v6 != "" {
			return v6, nil
		}
		return "", fmt.Errorf("tcp: interface %q has no usable address", c.Interface)
	}
	if h, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(h); err == nil {
			for _, ip := range ips {
				if !ip.IsLoopback() && ip.To4() != nil && isLocal(ip) {
					return ip.String(), nil
				}
			}
		}
	}
	if ip := firstInterfaceIP(); ip != nil {
		return ip.String(), nil
	}
	return "127.0.0.1", nil
}

// isLocal reports whether ip is an address of one of this host's
// interfaces (a hostname can resolve to an address that is not, on hosts
// whose /etc/hosts maps their name to 127.0.1.1 or a stale entry).
func isLocal(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// firstInterfaceIP returns the IPv4 address of the first interface that is
// up, not loopback and not a container bridge (NCCL skips docker and lo by
// default too), or nil.
func firstInterfaceIP() net.IP {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 ||
			strings.HasPrefix(ifc.Name, "docker") || strings.HasPrefix(ifc.Name, "veth") {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP
			}
		}
	}
	return nil
}

// TLSFromFiles builds a mutual-TLS configuration from PEM files: this
// rank's certificate and key, and the CA that signed every rank's
// certificate (which must name the address the rank advertises).
func TLSFromFiles(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tcp: TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tcp: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tcp: TLS CA %s: no certificate found", caFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}
