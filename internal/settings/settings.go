// Package settings reads the values of goccl's settings, as the
// environment and the configuration file spell them (the root's
// init_config.go resolves them: option > environment > file > default).
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Seconds reads a positive duration: "90s" or a number of seconds.
func Seconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, fmt.Errorf("%q is neither a duration (90s, 10m) nor a number of seconds", s)
		}
		if !(f > 0 && f < 1e9) {
			return 0, fmt.Errorf("%q seconds is out of range", s)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not positive", s)
	}
	return d, nil
}

// SecondsJSON is Seconds of a JSON string or number.
func SecondsJSON(b []byte) (time.Duration, error) {
	s := string(b)
	if u, err := strconv.Unquote(s); err == nil {
		s = u
	}
	return Seconds(s)
}

// YieldSpin is how long a wait polls when its polls yield the core
// (GOCCL_SPIN=yield, and Init's choice where ranks outnumber cores).
const YieldSpin = 10 * time.Millisecond

// Spin reads GOCCL_SPIN: a duration of at least 0, which turns
// polling off (a negative Spin to the transports), or "yield": polls for
// YieldSpin that give the core to other threads between them.
func Spin(s string) (d time.Duration, yield bool, err error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "yield") {
		return YieldSpin, true, nil
	}
	d, err = time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("want a duration such as 50us, 0 for no polling, or yield: %w", err)
	case d < 0:
		return 0, false, errors.New("want a duration of at least 0 (0: no polling), or yield")
	case d == 0:
		return -1, false, nil
	}
	return d, false, nil
}

// Debug reads GOCCL_DEBUG's value (any case).
func Debug(v string) (slog.Level, bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "off", "none":
		return 0, false, nil
	case "warn":
		return slog.LevelWarn, true, nil
	case "info":
		return slog.LevelInfo, true, nil
	case "debug", "trace":
		return slog.LevelDebug, true, nil
	}
	return 0, false, fmt.Errorf("%q: want info, debug, warn or off", v)
}

// DecodeBlock decodes one block of a configuration file, refusing keys v
// has no field for; its errors wrap invalid.
func DecodeBlock(raw json.RawMessage, block string, v any, invalid error) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%w: unknown key %s in %q", invalid, name, block)
	}
	return fmt.Errorf("%w: %q: %w", invalid, block, err)
}
