package commslog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Style selects the conventions and layout of summaries and Verbose lines.
// The zero value is StyleNCCLTests.
type Style uint8

const (
	// StyleNCCLTests counts message sizes and bus bandwidths as nccl-tests
	// does (see BusFactor) and shows them in Config.Units. It is goccl's
	// own style, and the zero value.
	StyleNCCLTests Style = iota
	// StyleDeepSpeed reproduces DeepSpeed's comms logger: its message
	// sizes, its tput and busbw in Gbps (calc_bw_log), the table of
	// deepspeed.comm.log_summary and its verbose line. See
	// DeepSpeedMsgSize and DeepSpeedBW.
	StyleDeepSpeed
)

// String returns "nccl-tests" or "deepspeed".
func (s Style) String() string {
	switch s {
	case StyleNCCLTests:
		return "nccl-tests"
	case StyleDeepSpeed:
		return "deepspeed"
	}
	return fmt.Sprintf("Style(%d)", uint8(s))
}

// ParseStyle reads a Style name, ignoring case: "nccl-tests", "nccl" and ""
// are StyleNCCLTests; "deepspeed" and "ds" are StyleDeepSpeed.
func ParseStyle(s string) (Style, error) {
	switch strings.ToLower(s) {
	case "", "nccl-tests", "nccl", "nccl_tests", "nccltests":
		return StyleNCCLTests, nil
	case "deepspeed", "ds", "deep-speed":
		return StyleDeepSpeed, nil
	}
	return 0, fmt.Errorf("commslog: unknown style %q (nccl-tests or deepspeed)", s)
}

// MarshalText returns String's name; it fails for an unknown Style.
func (s Style) MarshalText() ([]byte, error) {
	if s > StyleDeepSpeed {
		return nil, fmt.Errorf("commslog: unknown style %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a name as ParseStyle does.
func (s *Style) UnmarshalText(b []byte) error {
	v, err := ParseStyle(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// deepSpeedKeys are the keys of DeepSpeed's comms_logger block
// (deepspeed/comm/config.py, CommsLoggerConfig), then goccl's one
// addition.
var deepSpeedKeys = []string{"enabled", "verbose", "prof_all", "prof_ops", "debug", "style"}

// ParseDeepSpeed reads the "comms_logger" block of a DeepSpeed config, the
// JSON object
//
//	{"enabled": true, "verbose": false, "prof_all": true, "prof_ops": [], "debug": false}
//
// into a Config whose Style is StyleDeepSpeed. Missing keys take
// DeepSpeed's defaults: enabled, verbose and debug false, prof_all true,
// prof_ops empty. "prof_all": false sets ProfOpsOnly, so that only the ops
// in prof_ops are timed (none when it is empty), as in DeepSpeed. goccl
// also reads "style" ("deepspeed" or "nccl-tests"), which DeepSpeed itself
// would reject. Any other key is an error that names it, as DeepSpeed's
// config model forbids extra keys; so is a value of the wrong JSON type.
//
// One difference: DeepSpeed turns the logger on whenever the block is
// present, whatever "enabled" says; goccl follows "enabled".
func ParseDeepSpeed(block []byte) (Config, error) {
	c := Config{ProfAll: true, Style: StyleDeepSpeed}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(block, &m); err != nil {
		return Config{}, fmt.Errorf("commslog: comms_logger: %w", err)
	}
	if m == nil {
		return Config{}, fmt.Errorf("commslog: comms_logger: want a JSON object, got %s", bytes.TrimSpace(block))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first unknown key, whatever map order says
	for _, k := range keys {
		if !slices.Contains(deepSpeedKeys, k) {
			return Config{}, fmt.Errorf("commslog: comms_logger: unknown key %q (want %s)", k, strings.Join(deepSpeedKeys, ", "))
		}
	}
	bools := []struct {
		key string
		dst *bool
	}{{"enabled", &c.Enabled}, {"verbose", &c.Verbose}, {"prof_all", &c.ProfAll}, {"debug", &c.Debug}}
	for _, b := range bools {
		raw, ok := m[b.key]
		if !ok {
			continue
		}
		if err := strictUnmarshal(raw, b.dst); err != nil {
			return Config{}, fmt.Errorf("commslog: comms_logger: %q must be true or false, got %s", b.key, raw)
		}
	}
	c.ProfOpsOnly = !c.ProfAll
	if raw, ok := m["prof_ops"]; ok {
		var ops []string
		if err := strictUnmarshal(raw, &ops); err != nil {
			return Config{}, fmt.Errorf("commslog: comms_logger: \"prof_ops\" must be a list of op names, got %s", raw)
		}
		c.ProfOps = ops
	}
	if raw, ok := m["style"]; ok {
		var s string
		if err := strictUnmarshal(raw, &s); err != nil {
			return Config{}, fmt.Errorf("commslog: comms_logger: \"style\" must be a string, got %s", raw)
		}
		st, err := ParseStyle(s)
		if err != nil {
			return Config{}, fmt.Errorf("commslog: comms_logger: \"style\": %w", err)
		}
		c.Style = st
	}
	return c, nil
}

// ParseDeepSpeedConfig reads a whole DeepSpeed config file (ds_config.json)
// and returns ParseDeepSpeed of its "comms_logger" block; the file's other
// keys are not goccl's business and are ignored. Without the block it
// returns a Config that is not Enabled, with StyleDeepSpeed.
func ParseDeepSpeedConfig(file []byte) (Config, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(file, &m); err != nil {
		return Config{}, fmt.Errorf("commslog: DeepSpeed config: %w", err)
	}
	block, ok := m["comms_logger"]
	if !ok {
		return Config{ProfAll: true, Style: StyleDeepSpeed}, nil
	}
	return ParseDeepSpeed(block)
}

// strictUnmarshal decodes raw into v, refusing null (which json.Unmarshal
// would take as "leave v alone").
func strictUnmarshal(raw json.RawMessage, v any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("null")
	}
	return json.Unmarshal(raw, v)
}
