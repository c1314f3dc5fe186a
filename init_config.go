package goccl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/settings"
	"github.com/goccl/goccl/store"
)

// EnvConfig names the configuration file Init and New read when no
// WithConfig is given.
const EnvConfig = "GOCCL_CONFIG"

// EnvTimeout sets the default timeout of collectives (WithTimeout).
const EnvTimeout = "GOCCL_TIMEOUT"

// EnvSpin sets how long a goroutine waiting on a peer polls before it
// sleeps, in every transport Init makes (the Spin of tcp.Config,
// shm.Config, mem.Config and ib.Config): a Go duration ("50us"); 0 turns
// polling off; "yield" polls 10 ms giving the core to other threads
// between polls (tcp.Config.Yield). Unset: each transport's default, or
// yield when the launcher puts more ranks on this host than it has CPUs.
const EnvSpin = "GOCCL_SPIN"

// Config is a configuration file in DeepSpeed's shape: a "comms_logger"
// block as DeepSpeed's ds_config.json has it (read by
// commslog.ParseDeepSpeed) and a "goccl" block with this package's
// settings. Every setting has one name in the file; where a
// setting is also given by an option or an environment variable, the order
// is options > environment > file > defaults, setting by setting.
//
//	{
//	  "comms_logger": {"enabled": true, "verbose": false, "prof_all": false,
//	                   "prof_ops": ["all_reduce"], "debug": false},
//	  "goccl": {"algorithm": "ring", "backend": "auto", "timeout": "10m", "transport": "tcp",
//	            "streams": 2, "secret_file": "/run/secrets/goccl"}
//	}
type Config struct {
	// CommsLogger is the comms_logger block as commslog.ParseDeepSpeed
	// reads it (DeepSpeed's defaults for missing keys, and goccl's
	// "style"); nil when the file has no such block. Each field is
	// overridden by its GOCCL_COMMS_LOG* variable when that is set, and
	// the whole block by WithCommsLog.
	CommsLogger *commslog.Config `json:"-"`
	Goccl       GocclConfig      `json:"goccl"`
	// Path is the file the Config was read from; empty when built in code.
	Path string `json:"-"`
}

// GocclConfig is the "goccl" block. Each key names the option and the
// environment variable that override it.
type GocclConfig struct {
	Algorithm     string   `json:"algorithm"`      // WithAlgorithm, GOCCL_ALGO
	Timeout       Duration `json:"timeout"`        // WithTimeout, GOCCL_TIMEOUT
	ShrinkWait    Duration `json:"shrink_wait"`    // WithShrinkWait
	MismatchCheck *bool    `json:"mismatch_check"` // WithMismatchCheck
	Debug         string   `json:"debug"`          // GOCCL_DEBUG: "", info or debug
	Backend       string   `json:"backend"`        // WithBackend, GOCCL_BACKEND: auto, goccl, nccl or mpi

	Transport  string `json:"transport"`   // WithTransport, GOCCL_TRANSPORT
	Streams    int    `json:"streams"`     // WithStreams, GOCCL_STREAMS
	Connect    string `json:"connect"`     // WithConnect, GOCCL_CONNECT: lazy or eager
	SecretFile string `json:"secret_file"` // WithSecret, GOCCL_SECRET: the file holds the secret
	TLSCert    string `json:"tls_cert"`    // WithTLS, GOCCL_TLS_CERT
	TLSKey     string `json:"tls_key"`     // WithTLS, GOCCL_TLS_KEY
	TLSCA      string `json:"tls_ca"`      // WithTLS, GOCCL_TLS_CA
	JobID      string `json:"job_id"`      // WithJobID, GOCCL_JOB_ID
	Ifname     string `json:"ifname"`      // GOCCL_IFNAME
	StoreBind  string `json:"store_bind"`  // GOCCL_STORE_BIND
	// HandshakeTimeout bounds a connection's authentication, at the store
	// and at every rank's listener (GOCCL_HANDSHAKE_TIMEOUT).
	HandshakeTimeout Duration `json:"handshake_timeout"`
	ExternalStore    bool     `json:"external_store"` // GOCCL_EXTERNAL_STORE=1

	CommsLogStraggler bool   `json:"comms_log_straggler"` // GOCCL_COMMS_LOG_STRAGGLER
	CommsLogUnits     string `json:"comms_log_units"`     // GOCCL_COMMS_LOG_UNITS: GBps or Gbps
}

// Duration is a time.Duration in a configuration file: a string Go's
// time.ParseDuration reads ("90s", "10m") or a number of seconds.
type Duration time.Duration

// UnmarshalJSON reads "10m" or 600.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := settings.SecondsJSON(b)
	*d = Duration(v)
	return err
}

// MarshalJSON writes the duration as time.Duration.String does.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// LoadConfig reads a configuration file (see Config). A key the file
// should not have, in any block, is an error naming the key and the file:
// a typo must not be silently ignored. Errors wrap ErrInvalid, except
// those of reading the file. Relative paths in the file (secret_file,
// tls_*) are taken from the file's directory.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("goccl: config: %w", err)
	}
	c, err := parseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("goccl: config file %s: %w", path, err)
	}
	c.Path = path
	// Files the file names are found next to it.
	for _, f := range []*string{&c.Goccl.SecretFile, &c.Goccl.TLSCert, &c.Goccl.TLSKey, &c.Goccl.TLSCA} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(filepath.Dir(path), *f)
		}
	}
	return c, nil
}

func parseConfig(data []byte) (*Config, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	c := &Config{}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var err error
		switch k {
		case "comms_logger":
			var cl commslog.Config
			if cl, err = commslog.ParseDeepSpeed(top[k]); err != nil {
				err = fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			c.CommsLogger = &cl
		case "goccl":
			err = settings.DecodeBlock(top[k], k, &c.Goccl, ErrInvalid)
		default:
			err = fmt.Errorf("%w: unknown key %q (the blocks are comms_logger and goccl)", ErrInvalid, k)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.Goccl.check(); err != nil {
		return nil, fmt.Errorf("%w: \"goccl\": %w", ErrInvalid, err)
	}
	return c, nil
}

// check refuses values resolve would refuse, so that LoadConfig reports
// them with the file.
func (g *GocclConfig) check() error {
	if _, err := algo.ParseAlgorithms(g.Algorithm); err != nil {
		return fmt.Errorf("algorithm: %w", err)
	}
	if _, err := backend.Parse(g.Backend); err != nil {
		return err
	}
	if g.Streams < 0 {
		return fmt.Errorf("streams %d is not a positive number", g.Streams)
	}
	if _, _, err := settings.Debug(g.Debug); err != nil {
		return fmt.Errorf("debug: %w", err)
	}
	if g.CommsLogUnits != "" {
		if _, err := commslog.ParseUnits(g.CommsLogUnits); err != nil {
			return fmt.Errorf("comms_log_units: %w", err)
		}
	}
	return nil
}

// WithConfig applies a configuration file's settings (LoadConfig) below
// options and environment variables. Without it, Init and New read the
// file GOCCL_CONFIG names, if set.
func WithConfig(c *Config) Option { return func(o *options) { o.cfg = c } }

// resolve settles every setting of o in one order: options, then the
// environment (o.getenv), then the configuration file (WithConfig or
// GOCCL_CONFIG), then the defaults. Options leave their zero value when
// not given.
func resolve(o *options) error {
	f := o.cfg
	if f == nil {
		if p := o.getenv(EnvConfig); p != "" {
			var err error
			if f, err = LoadConfig(p); err != nil {
				return fmt.Errorf("%w (%s)", err, EnvConfig)
			}
		}
	}
	if f == nil {
		f = &Config{}
	}
	o.cfg = f
	g := &f.Goccl
	in := "config file " + f.Path
	if f.Path == "" {
		in = "WithConfig"
	}
	// pick returns the option's value, else the variable's, else the
	// file's, and where it came from.
	pick := func(opt, env, file string) (string, string) {
		if opt != "" {
			return opt, "option"
		}
		if v := o.getenv(env); v != "" {
			return v, env
		}
		return file, in
	}

	// Timeout.
	switch {
	case o.timeoutSet:
		if o.timeout <= 0 {
			return fmt.Errorf("goccl: %w: timeout must be positive, got %v", ErrInvalid, o.timeout)
		}
	case o.getenv(EnvTimeout) != "":
		d, err := settings.Seconds(o.getenv(EnvTimeout))
		if err != nil {
			return fmt.Errorf("goccl: %w: %s=%w", ErrInvalid, EnvTimeout, err)
		}
		o.timeout = d
	case g.Timeout != 0:
		o.timeout = time.Duration(g.Timeout)
	default:
		o.timeout = DefaultTimeout
	}

	// Algorithm.
	v, from := pick(string(o.algo), algo.EnvAlgo, g.Algorithm)
	if from == "option" {
		from = "WithAlgorithm"
	}
	as, err := algo.ParseAlgorithms(v)
	if err != nil {
		return fmt.Errorf("goccl: %w: %s: %w", ErrInvalid, from, err)
	}
	o.algo, o.algos = "", as

	// Backend (backend.go): refused here if this binary lacks it.
	if v, from = pick(o.backend, backend.EnvBackend, g.Backend); from == "option" {
		from = "WithBackend"
	}
	k, err := backend.Resolve(v)
	if err != nil {
		return fmt.Errorf("goccl: %w: %s: %w", ErrInvalid, from, err)
	}
	o.backend = string(k)

	if o.shrinkWait == 0 {
		o.shrinkWait = time.Duration(g.ShrinkWait)
	}
	if !o.checkSet && g.MismatchCheck != nil {
		o.noCheck = !*g.MismatchCheck
	}

	// Debug log level (GOCCL_DEBUG).
	v, from = pick("", EnvDebug, g.Debug)
	if o.debugLevel, o.debugOn, err = settings.Debug(v); err != nil {
		return fmt.Errorf("goccl: %w: %s: %w", ErrInvalid, from, err)
	}

	// Comms logger: WithCommsLog, else field by field its variable or the
	// file (the comms_logger block, and two keys of the goccl block).
	if o.logCfg == nil {
		var c commslog.Config
		if f.CommsLogger != nil {
			c = *f.CommsLogger
		}
		c.Straggler = g.CommsLogStraggler
		if g.CommsLogUnits != "" {
			if c.Units, err = commslog.ParseUnits(g.CommsLogUnits); err != nil {
				return fmt.Errorf("goccl: %w: %s: comms_log_units: %w", ErrInvalid, in, err)
			}
		}
		commslog.OverlayEnv(&c, o.getenv)
		o.logCfg = &c
	}

	// Init's settings.
	o.transport, _ = pick(o.transport, "GOCCL_TRANSPORT", g.Transport)
	if o.streams == 0 {
		if s := o.getenv("GOCCL_STREAMS"); s != "" {
			if o.streams, err = strconv.Atoi(s); err != nil || o.streams < 1 {
				return fmt.Errorf("goccl: %w: GOCCL_STREAMS=%q is not a positive number", ErrInvalid, s)
			}
		} else if g.Streams != 0 {
			if g.Streams < 1 {
				return fmt.Errorf("goccl: %w: %s: streams %d is not a positive number", ErrInvalid, in, g.Streams)
			}
			o.streams = g.Streams
		}
	}
	if o.secret == nil {
		if s := o.getenv("GOCCL_SECRET"); s != "" {
			o.secret = []byte(s)
		} else {
			o.secretFile = g.SecretFile
		}
	}
	if o.tls == nil {
		if cert := o.getenv("GOCCL_TLS_CERT"); cert != "" {
			o.tlsFiles = [3]string{cert, o.getenv("GOCCL_TLS_KEY"), o.getenv("GOCCL_TLS_CA")}
		} else if g.TLSCert != "" {
			o.tlsFiles = [3]string{g.TLSCert, g.TLSKey, g.TLSCA}
		}
	}
	o.connect, _ = pick(o.connect, "GOCCL_CONNECT", g.Connect)
	switch o.connect {
	case "":
		o.connect = DefaultConnect
	case "lazy", "eager":
	default:
		return fmt.Errorf("goccl: %w: connect %q (GOCCL_CONNECT, WithConnect or the file's \"connect\"): want lazy or eager", ErrInvalid, o.connect)
	}
	o.jobID, _ = pick(o.jobID, "GOCCL_JOB_ID", g.JobID)
	o.ifname, _ = pick("", "GOCCL_IFNAME", g.Ifname)
	o.storeBind, _ = pick("", "GOCCL_STORE_BIND", g.StoreBind)
	if v := o.getenv(store.EnvHandshakeTimeout); v != "" {
		d, err := store.ParseHandshakeTimeout(v)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalid, store.EnvHandshakeTimeout, err)
		}
		o.handshake = d
	} else if g.HandshakeTimeout != 0 {
		o.handshake = time.Duration(g.HandshakeTimeout)
	}
	if v := o.getenv(EnvSpin); v != "" {
		if o.spin, o.yield, err = settings.Spin(v); err != nil {
			return fmt.Errorf("goccl: %w: %s=%q: %v", ErrInvalid, EnvSpin, v, err)
		}
	}
	if v := o.getenv("GOCCL_EXTERNAL_STORE"); v != "" {
		o.externalStore = v == "1"
	} else {
		o.externalStore = g.ExternalStore
	}
	return nil
}

// readSecret reads a secret_file: its contents less a final newline.
func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret_file: %w", err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: secret_file %s is empty", ErrInvalid, path)
	}
	return b, nil
}
