package goccl

import (
	"context"
	"io"
	"log/slog"
	"os"
)

// EnvDebug turns on Init's debug log, like NCCL_DEBUG: "info" logs what
// Init decided (launcher, rank, size, master address, transport per peer,
// algorithms, timeout); "debug" adds details. Lines go to stderr through
// log/slog's TextHandler, each with this process's rank. Unset, empty or
// "off": nothing is logged and nothing is paid.
const EnvDebug = "GOCCL_DEBUG"

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
