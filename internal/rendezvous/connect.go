package rendezvous

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/route"
	"github.com/goccl/goccl/transport/tcp"
)

// Choice is how a rank reaches its peers: over shared memory within its
// host, and over a full mesh of TCP or InfiniBand links to the others.
type Choice struct {
	// Shm lists the job ranks reached over transport/shm, this rank
	// included, sorted; nil: none.
	Shm []int
	// Mesh is "tcp" or "ib", the transport that links every pair of ranks
	// and carries the messages to the ranks Shm does not hold; "" when
	// Shm holds them all. (Its links to the ranks Shm holds stay idle.)
	Mesh string
}

// Via names the transport that carries this rank's messages to peer.
func (c Choice) Via(peer int) string {
	if _, ok := slices.BinarySearch(c.Shm, peer); ok {
		return "shm"
	}
	return c.Mesh
}

// choose is the choice of transport for rank of size ranks, given the
// transport asked for (kind: "tcp", "ib", "shm", or "" and "auto"), the
// ranks on its host and whether they have room for shared memory (h),
// and whether every rank of the job can use InfiniBand (ib). It fails
// when kind is "shm" and shared memory cannot reach every rank. Kinds
// "tcp" and "ib" need no h.
func choose(kind string, rank, size int, h Host, ib bool) (Choice, error) {
	switch kind {
	case "tcp", "ib":
		return Choice{Mesh: kind}, nil
	}
	local := h.Local
	switch {
	case kind == "shm" && len(local) < size:
		return Choice{}, fmt.Errorf("transport shm: ranks %s are not on this host (%s)", formatRanks(others(local, size), 16), h.ID)
	case kind == "shm" && h.Nonce == "":
		return Choice{}, fmt.Errorf("transport shm: no room in shared memory for the rings of this host's %d ranks (rank %d measured it; GOCCL_DEBUG=warn there says more)", len(local), h.First)
	case h.Nonce == "":
		local = []int{rank} // TCP to everyone
	}
	var c Choice
	if len(local) > 1 || len(local) == size {
		c.Shm = local
	}
	if len(local) < size {
		c.Mesh = "tcp"
		if ib {
			c.Mesh = "ib"
		}
	}
	return c, nil
}

// Connect connects this process as rank of size ranks in r's epoch over
// the transports that kind names ("" is "auto"; see goccl.WithTransport),
// under one route.Endpoint that names each peer's, and returns it with
// the ranks a host the job agreed on (1 when it did not look: kinds tcp
// and ib).
//
// Under auto and shm it first meets the ranks of its host (hostGroup,
// agreeHostBlocks, and under auto the InfiniBand offer); see the package
// doc for the keys and who waits for whom.
func (r *Rendezvous) Connect(ctx context.Context, kind string, rank, size int) (ep transport.Endpoint, perHost int, err error) {
	var h Host
	offered := false
	perHost = 1
	if kind != "tcp" && kind != "ib" {
		kv := r.epochStore()
		id, idErr := hostIdentity()
		if r.HostID != nil {
			id, idErr = r.HostID(r.JobRank), nil
		}
		if idErr != nil {
			if kind == "shm" {
				return nil, 0, fmt.Errorf("transport shm: %w", idErr)
			}
			// Alone on a host of its own: no shared memory, TCP to everyone.
			r.log(slog.LevelInfo, "goccl host: no shared memory", "reason", idErr)
			id = "unshared " + strconv.Itoa(r.JobRank) + " " + rand.Text()
		}
		if kind != "shm" {
			// Before hostGroup, whose end every rank's offer precedes.
			if offered, err = r.ibOffer(ctx, kv); err != nil {
				return nil, 0, fmt.Errorf("offering InfiniBand: %w", err)
			}
		}
		room := func(n int) error {
			err := shmRoom(n)
			if err != nil {
				r.log(slog.LevelWarn, "goccl host: no room for shared memory, this host's ranks use TCP", "ranks", n, "reason", err)
			}
			return err
		}
		if h, err = hostGroup(ctx, kv, rank, size, id, room); err != nil {
			return nil, 0, fmt.Errorf("finding the ranks on this host: %w", err)
		}
		h.ID = id
		// The cost model's view of the hosts, before the choice narrows
		// shared memory to this rank when there is no room for it: the
		// ranks still share the host.
		if perHost, err = agreeHostBlocks(ctx, kv, h.Local, size); err != nil {
			return nil, 0, fmt.Errorf("agreeing on the hosts' blocks of ranks: %w", err)
		}
		r.log(slog.LevelInfo, "goccl host", "id", id, "local_ranks", formatRanks(h.Local, 64), "shm", h.Nonce != "")
	}
	c, err := choose(kind, rank, size, h, false)
	if err != nil {
		return nil, 0, err
	}
	if c.Mesh != "" && kind != "tcp" && kind != "ib" {
		// Between hosts InfiniBand when every rank has it, else TCP.
		useIB, err := ibAgreed(ctx, r.epochStore(), offered, size)
		if err != nil {
			return nil, 0, fmt.Errorf("agreeing on InfiniBand: %w", err)
		}
		r.log(slog.LevelInfo, "goccl between hosts", "ib", useIB, "ib_here", offered)
		c, _ = choose(kind, rank, size, h, useIB)
	}
	ep, err = r.connectChoice(ctx, c, rank, size, h.Nonce)
	return ep, perHost, err
}

// connectChoice connects the transports of c, the shared memory of the
// ranks c.Shm (named by nonce) and then the mesh, under one router: a
// peer goes by the first route that reaches it.
func (r *Rendezvous) connectChoice(ctx context.Context, c Choice, rank, size int, nonce string) (transport.Endpoint, error) {
	var routes []route.Route
	if c.Shm != nil {
		// Callers drain the rings where no other transport's polls share
		// the rank's waits, and beside them where ranks outnumber cores
		// and a rank has one P, whose drainers then stand back
		// (shm.Config.Help, StandBack).
		help := c.Mesh == "" || r.Yield && runtime.GOMAXPROCS(0) == 1
		shmEp, err := connectShm(ctx, shmConfig{
			rank: slices.Index(c.Shm, rank), size: len(c.Shm),
			job: r.segmentJob(), nonce: nonce, spin: r.Spin, yield: r.Yield,
			help: help, standBack: help && c.Mesh != "",
		})
		if err != nil {
			// shm numbers the ranks of this host from 0.
			if pe := (*transport.PeerError)(nil); errors.As(err, &pe) && pe.Peer >= 0 && pe.Peer < len(c.Shm) {
				return nil, fmt.Errorf("shared memory with rank %d: %w", c.Shm[pe.Peer], err)
			}
			return nil, fmt.Errorf("shared memory: %w", err)
		}
		routes = append(routes, route.Route{Name: "shm", Endpoint: shmEp, Ranks: c.Shm})
	}
	if c.Mesh != "" {
		connect := r.ConnectTCP
		if c.Mesh == "ib" {
			connect = r.connectIB
		}
		ep, err := connect(ctx, rank, size)
		if err != nil {
			closeRoutes(routes)
			return nil, err
		}
		routes = append(routes, route.Route{Name: c.Mesh, Endpoint: ep})
	}
	ep, err := route.New(rank, size, routes...)
	if err != nil {
		closeRoutes(routes)
		return nil, err
	}
	return ep, nil
}

func closeRoutes(routes []route.Route) {
	for _, rt := range routes {
		rt.Endpoint.Close()
	}
}

// ConnectTCP connects this process as rank of size ranks in r's epoch over
// transport/tcp alone (as Shrink and Readmit do). With lazy links and one
// stream it goes through an address book (Book), which the communicator
// fills at its closing synchronisation.
func (r *Rendezvous) ConnectTCP(ctx context.Context, rank, size int) (transport.Endpoint, error) {
	var kv tcp.KV = r.epochStore()
	if r.Lazy && max(r.Streams, 1) == 1 {
		r.book = NewAddrBook(kv, size)
		kv = r.book
	}
	return tcp.Connect(ctx, tcp.Config{
		Rank: rank, Size: size, JobID: r.handshakeJob(),
		KV:     kv,
		Secret: r.Secret, Streams: r.Streams, Interface: r.Ifname, TLS: r.TLS,
		HandshakeTimeout: r.Handshake, WrapConn: r.WrapConn, Lazy: r.Lazy, Spin: r.Spin, Yield: r.Yield,
	})
}

// ibConfig is the transport/ib configuration of c's job rank, without the
// store: the device comes from GOCCL_IB_HCA and GOCCL_IB_GID_INDEX (read
// by transport/ib), the provider is libibverbs unless the test hook says.
func (c *Config) ibConfig() ib.Config {
	var cfg ib.Config
	if c.IBConfig != nil {
		c.IBConfig(c.JobRank, &cfg)
	}
	return cfg
}

// IBUsable says whether this rank can use transport/ib: verbs built in
// and a device with an active port. In a build without the ibverbs tag
// the error wraps ib.ErrNotBuilt and says how to build one.
func (c *Config) IBUsable() error {
	cfg := c.ibConfig()
	err := cfg.Probe()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ib.ErrNotBuilt):
		return fmt.Errorf("transport ib: InfiniBand verbs are not built in (build with -tags ibverbs, which needs cgo and libibverbs-dev): %w", err)
	default:
		dev := cmp.Or(cfg.HCA, os.Getenv(ib.EnvHCA), "the first active port")
		return fmt.Errorf("transport ib: no usable RDMA device (%s): %w", dev, err)
	}
}

// connectIB connects this process as rank of size ranks in r's epoch over
// transport/ib, through the epoch's keys of the store.
func (r *Rendezvous) connectIB(ctx context.Context, rank, size int) (transport.Endpoint, error) {
	cfg := r.ibConfig()
	cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret = rank, size, r.handshakeJob(), r.Secret
	if r.Spin != 0 {
		cfg.Spin = r.Spin
	}
	cfg.KV = r.epochStore()
	ep, err := ib.Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport ib: %w", err)
	}
	return ep, nil
}

// ibKey counts, under the epoch's keys, the ranks that can use
// transport/ib.
const ibKey = "ib/usable"

// ibOffer is auto's first step towards InfiniBand, before hostGroup: a
// rank that can use transport/ib (verbs built in, an active port) adds
// itself to ibKey. A rank that cannot sends nothing, so a job without
// verbs pays no store request. It returns whether this rank offered.
func (r *Rendezvous) ibOffer(ctx context.Context, st store.Store) (bool, error) {
	if err := r.IBUsable(); err != nil {
		if !errors.Is(err, ib.ErrNotBuilt) {
			r.log(slog.LevelInfo, "goccl ib: not used", "reason", err)
		}
		return false, nil
	}
	if _, err := st.Add(ctx, ibKey, 1); err != nil {
		return false, err
	}
	return true, nil
}

// ibAgreed is auto's second step, after hostGroup: every rank had made
// its offer before any rank returned from hostGroup (each host's first
// arrival waits for every rank's arrival, and the others wait for it), so
// the count is final, and the ranks use transport/ib between hosts when
// all size of them offered. A rank that did not offer knows the answer
// (no) without asking.
func ibAgreed(ctx context.Context, st store.Store, offered bool, size int) (bool, error) {
	if !offered {
		return false, nil
	}
	n, err := st.Add(ctx, ibKey, 0)
	if err != nil {
		return false, err
	}
	return n == int64(size), nil
}
