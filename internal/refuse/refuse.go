// Package refuse logs the connections a listener drops before they
// authenticate (the store's and every rank's), so that a port scanner,
// health checks or a flood of silent connections cannot flood the log:
// each refusal at debug level, and at warn level the first one and then a
// count by reason at most every SummaryEvery.
package refuse

import (
	"log/slog"
	"sync"
	"time"
)

// SummaryEvery is the least time between two warn-level summaries.
const SummaryEvery = 10 * time.Second

// Words is what one listener's log lines say.
type Words struct {
	Each    string   // the debug line of one refusal
	First   string   // the warn line of the first refusal
	Summary string   // the warn line of a summary
	Reasons []string // the reasons, in the order a summary lists them
}

// Log counts refusals; its zero value is ready to use.
type Log struct {
	mu      sync.Mutex
	counts  map[string]int
	total   int
	since   time.Time // the last summary
	example []any     // remote and error of the latest refusal
}

// Note logs one refusal.
func (r *Log) Note(log *slog.Logger, w *Words, reason, remote string, err error) {
	attrs := []any{"reason", reason, "remote", remote}
	if err != nil {
		attrs = append(attrs, "err", err.Error())
	}
	log.Debug(w.Each, attrs...)
	r.mu.Lock()
	if r.counts == nil {
		r.counts = make(map[string]int)
	}
	r.counts[reason]++
	r.total++
	r.example = attrs[2:]
	if !r.since.IsZero() && time.Since(r.since) < SummaryEvery {
		r.mu.Unlock()
		return
	}
	first := r.since.IsZero()
	attrs = r.summaryLocked(w)
	r.mu.Unlock()
	msg := w.Summary
	if first {
		msg = w.First
	}
	log.Warn(msg, attrs...)
}

// Flush logs what was refused since the last summary, if anything.
func (r *Log) Flush(log *slog.Logger, w *Words) {
	r.mu.Lock()
	if r.total == 0 {
		r.mu.Unlock()
		return
	}
	attrs := r.summaryLocked(w)
	r.mu.Unlock()
	log.Warn(w.Summary, attrs...)
}

// summaryLocked returns the summary's attributes and starts a new period;
// r.mu is held.
func (r *Log) summaryLocked(w *Words) []any {
	attrs := []any{"count", r.total}
	if !r.since.IsZero() {
		attrs = append(attrs, "in", time.Since(r.since).Round(10*time.Millisecond).String())
	}
	for _, reason := range w.Reasons {
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
