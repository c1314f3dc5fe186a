package goccl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// EnvDebug turns on Init's debug log, like NCCL_DEBUG: "info" logs what
// Init decided (launcher, rank, size, master address, transport per peer,
// algorithms, timeout); "debug" adds details. Lines go to stderr through
// log/slog's TextHandler, each with this process's rank. Unset, empty or
// "off": nothing is logged and nothing is paid.
const EnvDebug = "GOCCL_DEBUG"

// parseDebug reads GOCCL_DEBUG's value (any case).
func parseDebug(v string) (slog.Level, bool, error) {
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

// withDebugOutput sends the debug log to w instead of stderr (tests).
func withDebugOutput(w io.Writer) Option { return func(o *options) { o.debugOut = w } }

// debugLogger returns the debug log of rank, or nil when it is off.
func (o *options) debugLogger(rank int) *slog.Logger {
	if !o.debugOn {
		return nil
	}
	w := o.debugOut
	if w == nil {
		w = os.Stderr
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: o.debugLevel})
	return slog.New(h).With("rank", rank)
}

// debugLog logs msg at level on l; a nil l costs a comparison.
func debugLog(l *slog.Logger, level slog.Level, msg string, args ...any) {
	if l != nil {
		l.Log(context.Background(), level, msg, args...)
	}
}
