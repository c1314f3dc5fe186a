package rendezvous

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
)

// Config is what a process brings to the rendezvous: its place in the job
// and the settings of the transports it connects. Init fills it from its
// options; every epoch of the lineage keeps it.
type Config struct {
	JobID   string // keeps jobs apart in the store and in handshakes
	JobRank int    // this process's rank in the job (Init's world)
	JobSize int

	Secret  []byte
	Streams int    // TCP connections a pair (0: 1)
	Ifname  string // the interface TCP listens on
	TLS     *tls.Config
	// Handshake bounds a connection's authentication (0: the transport's
	// default, which reads GOCCL_HANDSHAKE_TIMEOUT).
	Handshake time.Duration
	// Lazy: TCP links come up when first needed, through an AddrBook.
	Lazy bool
	// Spin is the transports' Spin (GOCCL_SPIN; 0: their defaults;
	// negative: no polling).
	Spin time.Duration
	// Yield: the transports' waits give the core to other threads between
	// polls (tcp.Config.Yield, shm.Config.Yield): more ranks than cores.
	Yield bool

	// Log, when set, hears the choices Connect makes.
	Log *slog.Logger
	// Test hooks, nil in production: WrapConn wraps each TCP connection
	// (tcp.Config.WrapConn); HostID replaces a job rank's host identity,
	// to put the ranks of one process on pretend hosts; IBConfig adjusts
	// a job rank's transport/ib configuration (a fake provider).
	WrapConn func(peer int, c net.Conn) net.Conn
	HostID   func(jobRank int) string
	IBConfig func(jobRank int, c *ib.Config)
}

// Rendezvous is how a communicator's ranks meet: the job's store, shared
// by every communicator of the lineage, and the epoch whose keys they meet
// under. Init makes one with New; Shrink and Readmit make the next
// epoch's with Next. Its methods may be called from one goroutine at a
// time, except Release.
type Rendezvous struct {
	Config
	Gen     int   // generation of the world: Init 0, each Readmit one more
	Shrink  int   // shrink epoch within the generation: 0, the full world
	Members []int // job rank of each rank of the communicator; nil: all

	st    *shared
	token []byte    // this process's alive key value
	book  *AddrBook // set by Connect when TCP links are lazy
}

// shared counts the holders of the job's store: the last Release closes
// it.
type shared struct {
	st   store.Store
	refs atomic.Int32
}

// New returns the rendezvous of generation 0 of the job over st, which it
// holds once: Release closes st when every holder has released it.
func New(st store.Store, cfg Config) *Rendezvous {
	r := &Rendezvous{Config: cfg, st: &shared{st: st}}
	r.st.refs.Store(1)
	r.token = []byte(strconv.Itoa(os.Getpid()) + "-" + rand.Text())
	return r
}

// Store returns the job's store.
func (r *Rendezvous) Store() store.Store { return r.st.st }

// Release drops r's hold on the store, and closes it when r held it last.
func (r *Rendezvous) Release() error {
	if r.st.refs.Add(-1) == 0 {
		return r.st.st.Close()
	}
	return nil
}

// Next returns the rendezvous of generation gen, shrink epoch shrink, of
// the job ranks members (nil: all), holding the store once more. It keeps
// r's address book until its own Connect makes one.
func (r *Rendezvous) Next(gen, shrink int, members []int) *Rendezvous {
	n := *r
	n.Gen, n.Shrink, n.Members = gen, shrink, members
	n.st.refs.Add(1)
	return &n
}

// JobRanks returns the job rank of every rank of the communicator.
func (r *Rendezvous) JobRanks() []int {
	if r.Members != nil {
		return r.Members
	}
	all := make([]int, r.JobSize)
	for i := range all {
		all[i] = i
	}
	return all
}

// Book returns the address book of r's lazy TCP links, or nil when its
// links are not lazy (or not TCP).
func (r *Rendezvous) Book() *AddrBook { return r.book }

// Key names a job-wide store key: goccl/<job>/<name>.
func (r *Rendezvous) Key(name string) string { return "goccl/" + r.JobID + "/" + name }

// Epoch names r's generation and shrink epoch as a key prefix: "" for
// Init's world (its keys are as they were before epochs existed), else
// "g<gen>.s<shrink>/".
func (r *Rendezvous) Epoch() string {
	if r.Gen == 0 && r.Shrink == 0 {
		return ""
	}
	return fmt.Sprintf("g%d.s%d/", r.Gen, r.Shrink)
}

// EpochKey names a key of r's epoch: goccl/<job>/<epoch><name>.
func (r *Rendezvous) EpochKey(name string) string { return r.Key(r.Epoch() + name) }

// epochStore is the store seen from r's epoch: its keys are the epoch's.
func (r *Rendezvous) epochStore() store.Store { return store.WithPrefix(r.st.st, r.Key(r.Epoch())) }

// handshakeJob is the job id the transports' handshakes carry: the job
// and the epoch, so that a stale rank of an older epoch cannot connect to
// a newer one.
func (r *Rendezvous) handshakeJob() string {
	if e := r.Epoch(); e != "" {
		return r.JobID + "/" + strings.TrimSuffix(e, "/")
	}
	return r.JobID
}

// segmentJob names the epoch's shared-memory segments.
func (r *Rendezvous) segmentJob() string { return segmentJob(r.JobID + "." + r.Epoch()) }

// AliveKey is where job rank jr says it is alive: an ephemeral key (the
// store deletes it when the process's connection ends). It is job-wide:
// a process is alive or not whatever the epoch.
func (r *Rendezvous) AliveKey(jr int) string { return r.Key("alive/" + strconv.Itoa(jr)) }

// genKey holds the newest generation of the world that has formed.
func (r *Rendezvous) genKey() string { return r.Key("gen") }

// Rejoin makes r the rendezvous of a replacement process: it joins the
// generation after the newest that has formed (one store request). It
// reads the key without making it: an Add of 0 would set it to "0", and
// generation 1's record (Settled: from no key to "1") would then never
// take, so that a second Readmit's replacement would join generation 1
// while the survivors met in generation 2.
func (r *Rendezvous) Rejoin(ctx context.Context) error {
	v, err := peek(ctx, r.st.st, r.genKey())
	if err != nil {
		return err
	}
	g := 0
	if v != nil {
		if g, err = strconv.Atoi(string(v)); err != nil || g < 0 {
			return fmt.Errorf("%w: %s is %q", transport.ErrProtocol, r.genKey(), v)
		}
	}
	r.Gen = g + 1
	return nil
}

// Settled is a communicator's last step of the rendezvous, once all its
// ranks are connected: a world communicator (shrink epoch 0) says this
// process is alive for as long as its store connection lives (a store
// without ephemeral keys cannot, and Shrink then decides by its wait),
// and one of a new generation records that generation (the ranks race to
// record it; a compare-and-set keeps it from going back).
func (r *Rendezvous) Settled(ctx context.Context) error {
	if r.Shrink != 0 {
		return nil
	}
	if e, ok := r.st.st.(interface {
		SetEphemeral(ctx context.Context, key string, value []byte) error
	}); ok {
		if err := e.SetEphemeral(ctx, r.AliveKey(r.JobRank), r.token); err != nil {
			return fmt.Errorf("registering as alive: %w", err)
		}
	}
	if r.Gen > 0 {
		prev := []byte(strconv.Itoa(r.Gen - 1))
		if r.Gen == 1 {
			prev = nil
		}
		if _, err := r.st.st.CompareSet(ctx, r.genKey(), prev, []byte(strconv.Itoa(r.Gen))); err != nil {
			return fmt.Errorf("recording generation %d: %w", r.Gen, err)
		}
	}
	return nil
}

// Alive reports whether job rank jr's alive key is set, without waiting.
// A store without ephemeral keys never has one: TracksAlive says whether
// a missing key means a dead process.
func (r *Rendezvous) Alive(ctx context.Context, jr int) (bool, error) {
	v, err := peek(ctx, r.st.st, r.AliveKey(jr))
	return v != nil, err
}

// TracksAlive reports whether the store keeps alive keys: whether this
// process's own is there.
func (r *Rendezvous) TracksAlive(ctx context.Context) (bool, error) { return r.Alive(ctx, r.JobRank) }

// peek reads key without waiting for it: nil when it is not set.
func peek(ctx context.Context, st store.Store, key string) ([]byte, error) {
	absent := []byte{0} // CompareSet with it reads a key without waiting
	return st.CompareSet(ctx, key, absent, absent)
}

// getInt reads a positive counter.
func getInt(ctx context.Context, st store.Store, key string) (int64, error) {
	v, err := st.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s is %q", transport.ErrProtocol, key, v)
	}
	return n, nil
}

// log logs when r has a logger.
func (r *Rendezvous) log(level slog.Level, msg string, args ...any) {
	if r.Log != nil {
		r.Log.Log(context.Background(), level, msg, args...)
	}
}
