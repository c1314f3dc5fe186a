package store

import (
	"log/slog"
	"sync"
	"time"
)

// Why a server dropped a connection before it authenticated.
const (
	refusedSilent   = "silent"       // no first message within the handshake timeout
	refusedClosed   = "closed"       // the client closed before authenticating
	refusedGarbage  = "garbage"      // bytes that are not the protocol
	refusedTooLarge = "too_large"    // a frame over MaxPreAuthMessage
	refusedAuth     = "wrong_secret" // an authentication that failed
	refusedOverCap  = "over_cap"     // MaxPending connections were already waiting
)

// summaryEvery is the least time between two warn-level summaries of
// refused connections.
const summaryEvery = 10 * time.Second

// refusals logs the connections a server drops before they authenticate:
// each at debug level, and at warn level the first one and then a count
// by reason at most every summaryEvery, so that a port scanner, health
// checks or a flood of silent connections cannot flood the log.
type refusals struct {
	mu      sync.Mutex
	counts  map[string]int
	total   int
	since   time.Time // the last summary
	example []any     // remote and error of the latest refusal
}

func (r *refusals) note(log *slog.Logger, reason, remote string, err error) {
	attrs := []any{"reason", reason, "remote", remote}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	log.Debug("store: refused a connection before authentication", attrs...)
	r.mu.Lock()
	if r.counts == nil {
		r.counts = make(map[string]int)
	}
	r.counts[reason]++
	r.total++
	r.example = attrs[2:]
	if !r.since.IsZero() && time.Since(r.since) < summaryEvery {
		r.mu.Unlock()
		return
	}
	first := r.since.IsZero()
	attrs = r.summaryLocked()
	r.mu.Unlock()
	msg := "store: refused connections before authentication"
	if first {
		msg = "store: refused a connection before authentication (further refusals are summarised at most every 10s; each at debug level)"
	}
	log.Warn(msg, attrs...)
}

// flush logs what was refused since the last summary, if anything.
func (r *refusals) flush(log *slog.Logger) {
	r.mu.Lock()
	if r.total == 0 {
		r.mu.Unlock()
		return
	}
	attrs := r.summaryLocked()
	r.mu.Unlock()
	log.Warn("store: refused connections before authentication", attrs...)
}

// summaryLocked returns the summary's attributes and starts a new period;
// r.mu is held.
func (r *refusals) summaryLocked() []any {
	attrs := []any{"count", r.total}
	if !r.since.IsZero() {
		attrs = append(attrs, "in", time.Since(r.since).Round(10*time.Millisecond).String())
	}
	for _, reason := range []string{refusedSilent, refusedClosed, refusedGarbage, refusedTooLarge, refusedAuth, refusedOverCap} {
		if n := r.counts[reason]; n > 0 {
			attrs = append(attrs, reason, n)
		}
	}
	attrs = append(attrs, slog.Group("latest", r.example...))
	clear(r.counts)
	r.total = 0
	r.since = time.Now()
	return attrs
}
