package goccl

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/cpu"
	"github.com/goccl/goccl/internal/launch"
	"github.com/goccl/goccl/internal/rendezvous"
	"github.com/goccl/goccl/internal/settings"
	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/route"
	"github.com/goccl/goccl/transport/tcp"
)

// Env is a process's place in a job, as its launcher describes it.
type Env struct {
	Rank, Size int
	// LocalRank and LocalSize count the ranks on this host; -1 when the
	// launcher does not say.
	LocalRank, LocalSize int
	// MasterAddr and MasterPort locate the rendezvous store that rank 0
	// hosts.
	MasterAddr string
	MasterPort int
	// Source names the launcher recognised: "torchrun", "openmpi", "pmi",
	// "slurm", "options" when given by WithEnv, or "none" when Init found
	// no launcher and, the transport being mem, ran a one-rank job.
	Source string
}

// FromEnv reads the launcher's environment: torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's
// OMPI_COMM_WORLD_*; MPICH's PMI_RANK and PMI_SIZE; Slurm's SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID with the master taken from the node list.
// Open MPI wins over Slurm inside `salloc ... mpirun`. The error lists
// every variable looked for when none is found.
func FromEnv() (Env, error) { return envFrom(os.Getenv) }

func envFrom(getenv func(string) string) (Env, error) {
	info, err := launch.Discover(getenv)
	if err != nil {
		return Env{}, fmt.Errorf("goccl: %w", err)
	}
	return Env(info), nil
}

// WithEnv gives Init the job's layout instead of reading the environment.
func WithEnv(e Env) Option { return func(o *options) { o.env = &e } }

// WithTransport chooses Init's transport (GOCCL_TRANSPORT does the same):
//
//   - "auto" (the default): transport/shm between the ranks of one host;
//     between hosts transport/ib when every rank of the job can use it
//     (a build with the ibverbs tag and an active port: ib.Probe), else
//     transport/tcp. Ranks are on one host when they have
//     the same host identity: host name, kernel boot id
//     (/proc/sys/kernel/random/boot_id), the /dev/shm they see, their pid
//     namespace and user, so that two hosts with one name are two hosts
//     and two containers count as one host only when shared memory works
//     between them.
//   - "tcp": TCP between every pair of ranks.
//   - "shm": shared memory between every pair of ranks; Init fails, naming
//     them, when some ranks are on another host.
//   - "ib": InfiniBand or RoCE verbs (transport/ib) between every pair of
//     ranks, on the device GOCCL_IB_HCA names (else the first active
//     port). Init fails before it contacts the store when this build has
//     no verbs (an error wrapping ErrInvalid: build with -tags ibverbs)
//     or the host no active port.
//   - "mem": a one-rank job in this process, which needs no launcher:
//     without launcher variables Init makes this process rank 0 of 1.
//
// Comm.TransportFor says which one carries the messages to each peer.
func WithTransport(name string) Option { return func(o *options) { o.transport = name } }

// WithSecret makes every connection, and the rendezvous store, prove
// knowledge of secret (HMAC-SHA256 over a fresh challenge); strangers are
// refused. GOCCL_SECRET does the same.
func WithSecret(secret []byte) Option { return func(o *options) { o.secret = secret } }

// WithJobID names the job: peers and store keys of other jobs are kept
// apart. GOCCL_JOB_ID does the same; the default is the master address.
func WithJobID(id string) Option { return func(o *options) { o.jobID = id } }

// WithTLS wraps every TCP connection between ranks in TLS with cfg (see
// tcp.Config.TLS). GOCCL_TLS_CERT, GOCCL_TLS_KEY and GOCCL_TLS_CA (PEM
// files) do the same through tcp.TLSFromFiles.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithRejoin makes Init join as the replacement of a lost rank (the
// environment variable GOCCL_REJOIN=1 does the same): the process takes
// the lost rank's RANK and the job's WORLD_SIZE, never hosts the store,
// and joins the next generation of the world, which the survivors form by
// calling Readmit.
func WithRejoin() Option { return func(o *options) { o.rejoin = true } }

// DefaultConnect is how Init links the ranks when neither WithConnect,
// GOCCL_CONNECT nor the configuration file's "connect" says.
const DefaultConnect = "lazy"

// WithConnect says when the TCP links between ranks are made
// (GOCCL_CONNECT does the same): "lazy" (the default) links a pair of ranks when the
// first message between them is sent, and at Init only each rank's ring
// neighbours, so that a job whose algorithms talk to few peers holds few
// links (an allreduce-only job O(log N) per rank), as NCCL's runtime
// connection does; "eager" links every pair at Init, so that set-up
// failures show at once (NCCL_RUNTIME_CONNECT=0). A peer that cannot be
// reached when first needed fails the call naming it, within the
// handshake and dial timeouts. Every rank must use the same setting; with
// WithStreams above 1 links are eager. Shared memory (transport shm) is
// set up at Init either way.
func WithConnect(mode string) Option { return func(o *options) { o.connect = mode } }

// WithStreams sets the number of TCP connections per pair of ranks
// (GOCCL_STREAMS; default 1).
func WithStreams(n int) Option { return func(o *options) { o.streams = n } }

// Init joins the job this process was launched into and returns the world
// communicator (torch.distributed.init_process_group). It reads the
// launcher's environment (FromEnv), meets the other ranks through the
// rendezvous store that rank 0 hosts at MASTER_ADDR:MASTER_PORT, connects
// every pair of ranks (over shared memory within a host and TCP between
// hosts, unless WithTransport says otherwise; with WithConnect("lazy")
// only each rank's ring neighbours over TCP, the other pairs when they
// first talk), and returns once all ranks are connected. The store lives until the communicator is closed.
//
// With transport mem (GOCCL_TRANSPORT=mem or WithTransport("mem")) and no
// launcher variables, Init returns a one-rank communicator in this
// process, for running a distributed program alone (a notebook, a unit
// test, a debugger), and says so in its debug log (GOCCL_DEBUG=info).
func Init(ctx context.Context, opts ...Option) (*Comm, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	// buildOptions resolved each setting: options > environment > file
	// > defaults (init_config.go).
	kind := o.transport
	env := o.env
	alone := false
	if env == nil {
		e, err := envFrom(o.getenv)
		switch {
		case errors.Is(err, launch.ErrNotFound) && kind == "mem":
			e, alone = Env{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Source: "none"}, true
		case errors.Is(err, launch.ErrNotFound):
			return nil, errNoLauncher
		case err != nil:
			return nil, err
		}
		env = &e
	}
	if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size {
		return nil, fmt.Errorf("goccl: init: rank %d out of range for world size %d", env.Rank, env.Size)
	}
	secret := o.secret
	if secret == nil && o.secretFile != "" {
		if secret, err = readSecret(o.secretFile); err != nil {
			return nil, fmt.Errorf("goccl: init: %w", err)
		}
	}
	tlsCfg := o.tls
	if cert := o.tlsFiles[0]; tlsCfg == nil && cert != "" {
		if tlsCfg, err = tcp.TLSFromFiles(cert, o.tlsFiles[1], o.tlsFiles[2]); err != nil {
			return nil, fmt.Errorf("goccl: init: %w", err)
		}
	}
	streams := o.streams
	log := o.debugLogger(env.Rank)
	if alone {
		debugLog(log, slog.LevelInfo, "goccl init: no launcher environment and transport mem: a one-rank job in this process")
	}
	spin := o.spin
	if cpus := cpu.Online(); spin == 0 && (env.LocalSize > cpus || o.backend == string(backend.MPI)) {
		// More ranks than CPUs, or MPI beside goccl's links (the check's): waits yield the core (DECISIONS.md).
		spin, o.yield = settings.YieldSpin, true
		debugLog(log, slog.LevelInfo, "goccl init: waits poll and yield the core between polls", "local_size", env.LocalSize, "cpus", cpus, "backend", o.backend)
	}
	o.spin = spin // the communicator's board polls as its transports do
	if log != nil {
		debugLog(log, slog.LevelInfo, "goccl init", "launcher", env.Source, "size", env.Size,
			"local_rank", env.LocalRank, "local_size", env.LocalSize,
			"master", net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort)), "config", o.cfg.Path)
		algos := "cost model"
		if len(o.algos) > 0 {
			algos = fmt.Sprint(o.algos)
		}
		debugLog(log, slog.LevelInfo, "goccl settings", "transport", cmp.Or(kind, "auto"), "streams", max(streams, 1), "connect", o.connect, "spin", spinString(spin), "yield", o.yield,
			"tls", tlsCfg != nil, "secret", secret != nil, "algorithms", algos, "backend", backend.Kind(o.backend).Describe(),
			"timeout", o.timeout, "stall_grace", stallGrace(o.timeout), "mismatch_check", !o.noCheck,
			"comms_log", o.logCfg != nil && o.logCfg.Enabled)
		debugLog(log, slog.LevelDebug, "goccl details", "ifname", o.ifname, "store_bind", o.storeBind,
			"external_store", o.externalStore, "secret_file", o.secretFile, "tls_files", o.tlsFiles[:],
			"shrink_wait", o.shrinkWait, "comms_log_config", fmt.Sprintf("%+v", *o.logCfg))
	}

	var ep transport.Endpoint
	var rdv *rendezvous.Rendezvous
	perHost := 1 // ranks a host, in blocks (init_topology.go)
	switch kind {
	case "mem":
		if env.Size != 1 {
			return nil, fmt.Errorf("goccl: init: transport mem runs all ranks in one process: use NewLocal (world size is %d)", env.Size)
		}
		if ep, err = route.New(0, 1, route.Route{Name: "mem", Endpoint: mem.NewWithConfig(1, mem.Config{Spin: spin})[0]}); err != nil {
			return nil, fmt.Errorf("goccl: init: %w", err)
		}
	case "", "auto", "tcp", "shm", "ib":
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		jobID := o.jobID
		addr := net.JoinHostPort(env.MasterAddr, strconv.Itoa(env.MasterPort))
		if jobID == "" {
			jobID = addr
		}
		cfg := rendezvous.Config{
			JobID: jobID, JobRank: env.Rank, JobSize: env.Size,
			Secret: secret, Streams: streams, Ifname: o.ifname, TLS: tlsCfg, Handshake: o.handshake,
			Lazy: o.connect == "lazy", Spin: spin, Yield: o.yield,
			Log: log, WrapConn: testWrapConn, HostID: testHostID, IBConfig: testIBConfig,
		}
		rejoin := o.rejoin || o.getenv("GOCCL_REJOIN") == "1"
		if kind == "ib" && !rejoin {
			// Refused here, before the store hears of this rank: a build
			// without verbs, or a host without an active port.
			if err := ibUsable(&cfg); err != nil {
				return nil, fmt.Errorf("goccl: init rank %d: %w", env.Rank, err)
			}
		}
		// A replacement rank never hosts the store: the job's store is
		// already up (see Readmit). Nor does anyone when the job runs its
		// own (`goccl store`).
		host := env.Rank == 0 && !rejoin && !o.externalStore
		debugLog(log, slog.LevelInfo, "goccl rendezvous", "store", addr, "host_store", host, "job_id", jobID, "rejoin", rejoin)
		// The handshake timeout (GOCCL_HANDSHAKE_TIMEOUT or the file) bounds
		// authentication at the store and at every rank's listener.
		sopts := store.Options{Secret: secret, ListenHost: o.storeBind, HandshakeTimeout: o.handshake}
		client, err := store.Host(ctx, addr, host, sopts)
		if err != nil {
			return nil, fmt.Errorf("goccl: init rank %d: rendezvous store at %s: %w", env.Rank, addr, err)
		}
		rdv = rendezvous.New(client, cfg)
		if rejoin {
			// Join the next generation of the world, which the survivors
			// form with Readmit.
			if err := rdv.Rejoin(ctx); err != nil {
				client.Close()
				return nil, fmt.Errorf("goccl: init rank %d (rejoin): %w", env.Rank, err)
			}
		}
		if rejoin && kind != "tcp" {
			// Readmit's survivors connect the next generation over TCP
			// (init_elastic.go): so must their replacement.
			debugLog(log, slog.LevelInfo, "goccl rejoin: transport tcp, as the survivors' Readmit")
			kind = "tcp"
		}
		ep, perHost, err = rdv.Connect(ctx, kind, env.Rank, env.Size)
		if err != nil {
			client.Close()
			return nil, fmt.Errorf("goccl: init rank %d: %w", env.Rank, err)
		}
	default:
		return nil, fmt.Errorf("goccl: init: unknown transport %q (GOCCL_TRANSPORT or WithTransport: auto, tcp, shm, ib or mem)", kind)
	}
	c, err := newComm(ep, o)
	if err != nil {
		ep.Close()
		if rdv != nil {
			rdv.Release()
		}
		return nil, err
	}
	c.shared.rdv = rdv
	c.shared.perHost, c.perHost = perHost, perHost
	if err := c.settle(ctx); err != nil {
		return nil, fmt.Errorf("goccl: init: %w", err)
	}
	if log != nil {
		for p := range env.Size {
			if p != env.Rank {
				debugLog(log, slog.LevelInfo, "goccl peer", "peer", p, "transport", c.TransportFor(p))
			}
		}
		debugLog(log, slog.LevelInfo, "goccl init done")
	}
	return c, nil
}

// errNoLauncher is Init's error when the environment names no launcher
// and the transport is not mem: it says how to get a job.
var errNoLauncher = fmt.Errorf("goccl: init: %w (none of RANK and WORLD_SIZE, OMPI_COMM_WORLD_RANK and _SIZE, "+
	"PMI_RANK and PMI_SIZE, SLURM_PROCID and SLURM_NTASKS is set): start the program with `goccl run -n N -- PROGRAM`, "+
	"torchrun, mpirun, mpiexec or srun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; "+
	"for a one-rank job in this process set GOCCL_TRANSPORT=mem (or pass WithTransport(\"mem\"))", launch.ErrNotFound)

// settle waits until every rank of a new communicator is connected (a
// barrier), so that no one needs the store's addresses any more when a
// rank, the store's host included, moves on. A rank that joined a new
// generation of the world then records it in the store.
func (c *Comm) settle(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, time.Minute+c.opts.timeout/100)
	defer cancel()
	// goccl's own barrier, not logged as the user's call. With lazy links
	// it is the exchange of every rank's address (init_links.go), after which
	// no link made on demand needs the store.
	barrier := c.Barrier
	if r := c.shared.rdv; r != nil && r.Book() != nil {
		barrier = c.shareAddrs
	}
	if err := barrier(commslog.Internal(bctx)); err != nil {
		c.Close()
		return err
	}
	if r := c.shared.rdv; r != nil {
		// Alive for as long as this process's store connection lives
		// (Shrink reads it); a new generation of the world recorded.
		if err := r.Settled(bctx); err != nil {
			c.Close()
			return err
		}
	}
	return nil
}

// testWrapConn, set by tests through export_test.go, wraps Init's TCP
// connections to inject faults.
var testWrapConn func(peer int, c net.Conn) net.Conn

// TransportFor names the transport that carries this rank's messages to
// rank peer of c ("shm", "tcp", "ib" or "mem"; Init's choice, see
// WithTransport), or "" when peer is not a rank of c or c's endpoint does
// not say (a communicator that New made over an endpoint of your own).
func (c *Comm) TransportFor(peer int) string {
	if peer < 0 || peer >= len(c.ranks) {
		return ""
	}
	if v, ok := c.shared.counts.Endpoint.(interface{ Via(peer int) string }); ok {
		return v.Via(c.ranks[peer])
	}
	return ""
}

// testHostID, set by tests, replaces the host identity of job rank r: it
// puts the ranks of one process on pretend hosts.
var testHostID func(rank int) string

// spinString says how the transports Init makes poll, for the debug log.
func spinString(d time.Duration) string {
	switch {
	case d < 0:
		return "off"
	case d == 0:
		return "default"
	}
	return d.String()
}
