package commslog

import (
	"log/slog"
	"strconv"
	"strings"
)

// Config holds DeepSpeed's comms-logger settings. The zero value logs
// nothing.
type Config struct {
	// Enabled turns logging on. When false nothing is timed or kept.
	Enabled bool
	// Verbose writes one log line per op as it completes.
	Verbose bool
	// ProfAll times every op, whatever ProfOps says.
	ProfAll bool
	// ProfOps lists the op names to time ("all_reduce", ...). An empty list
	// means every op, so Config{Enabled: true} times everything, unless
	// ProfOpsOnly is set.
	ProfOps []string
	// ProfOpsOnly makes ProfOps the whole list even when it is empty (then
	// nothing is timed until StartProfiling), as DeepSpeed's "prof_all":
	// false does. ParseDeepSpeed sets it from prof_all; ProfAll overrides it.
	ProfOpsOnly bool
	// Debug records the name of the function that called each collective.
	Debug bool
	// Straggler makes LogSummary add the straggler table. That table is
	// found with a collective, so every rank must call LogSummary.
	Straggler bool
	// Units is how the nccl-tests style shows bandwidths; the zero value
	// is GBps. The DeepSpeed style always shows Gbps, as DeepSpeed does.
	Units Units
	// Style is how summaries and Verbose lines are written: the zero value
	// is StyleNCCLTests (nccl-tests' sizes and bus bandwidths); StyleDeepSpeed
	// reproduces DeepSpeed's log_summary and verbose lines. ParseDeepSpeed
	// and ParseDeepSpeedConfig default it to StyleDeepSpeed.
	Style Style
	// Logger receives the Verbose lines; nil means slog.Default().
	Logger *slog.Logger
}

// Environment variables read by ConfigFromEnv.
const (
	EnvEnabled   = "GOCCL_COMMS_LOG"           // 1/true: Enabled
	EnvVerbose   = "GOCCL_COMMS_LOG_VERBOSE"   // 1/true: Verbose
	EnvProfAll   = "GOCCL_COMMS_LOG_PROF_ALL"  // 1/true: ProfAll
	EnvProfOps   = "GOCCL_COMMS_LOG_PROF_OPS"  // comma-separated op names
	EnvDebug     = "GOCCL_COMMS_LOG_DEBUG"     // 1/true: Debug
	EnvStraggler = "GOCCL_COMMS_LOG_STRAGGLER" // 1/true: Straggler
	EnvUnits     = "GOCCL_COMMS_LOG_UNITS"     // GBps (default) or Gbps
	EnvStyle     = "GOCCL_COMMS_LOG_STYLE"     // nccl-tests (default) or deepspeed
)

// ConfigFromEnv reads a Config from the GOCCL_COMMS_LOG* variables through
// getenv (os.Getenv, or a map lookup in tests). Booleans accept 1, true,
// yes and on (any case); anything else, or unset, is false. An unknown
// GOCCL_COMMS_LOG_UNITS is ignored (GBps), and so is an unknown
// GOCCL_COMMS_LOG_STYLE (nccl-tests).
func ConfigFromEnv(getenv func(string) string) Config {
	var c Config
	if getenv == nil {
		return c
	}
	c.Enabled = envBool(getenv(EnvEnabled))
	c.Verbose = envBool(getenv(EnvVerbose))
	c.ProfAll = envBool(getenv(EnvProfAll))
	c.Debug = envBool(getenv(EnvDebug))
	c.Straggler = envBool(getenv(EnvStraggler))
	for _, op := range strings.Split(getenv(EnvProfOps), ",") {
		if op = strings.TrimSpace(op); op != "" {
			c.ProfOps = append(c.ProfOps, op)
		}
	}
	if u, err := ParseUnits(strings.TrimSpace(getenv(EnvUnits))); err == nil {
		c.Units = u
	}
	if st, err := ParseStyle(strings.TrimSpace(getenv(EnvStyle))); err == nil {
		c.Style = st
	}
	return c
}

// OverlayEnv sets, in c, each field whose environment variable getenv
// has a value for, and leaves the others as they are: the environment
// over a configuration file, field by field.
func OverlayEnv(c *Config, getenv func(string) string) {
	e := ConfigFromEnv(getenv)
	set := func(name string) bool { return getenv(name) != "" }
	if set(EnvEnabled) {
		c.Enabled = e.Enabled
	}
	if set(EnvVerbose) {
		c.Verbose = e.Verbose
	}
	if set(EnvProfAll) {
		c.ProfAll = e.ProfAll
	}
	if set(EnvProfOps) {
		c.ProfOps = e.ProfOps
	}
	if set(EnvDebug) {
		c.Debug = e.Debug
	}
	if set(EnvStraggler) {
		c.Straggler = e.Straggler
	}
	if set(EnvUnits) {
		c.Units = e.Units
	}
	if set(EnvStyle) {
		c.Style = e.Style
	}
}

func envBool(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "yes" || s == "on" {
		return true
	}
	b, _ := strconv.ParseBool(s)
	return b
}
