package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// FileStore is a Store kept in one file on a filesystem that every rank
// sees (NFS, Lustre, a local disk for ranks of one machine). The file is an
// append-only log of records, each a wire-protocol frame: a Set
// (key, value) or a Delete (key). Writers append under an exclusive
// flock(2); readers take a shared lock and replay what was appended since
// their last look. Get and Wait poll the file every Options.PollInterval.
//
// The file is never truncated: keys left by an earlier job are seen by the
// next one. Remove the file between jobs, or give each job its own keys
// with WithPrefix.
type FileStore struct {
	path string
	opts Options

	mu     sync.Mutex // guards everything below; flock does not exclude goroutines sharing f
	f      *os.File
	off    int64 // bytes of the log replayed into data
	data   map[string][]byte
	closed bool
}

var _ Store = (*FileStore)(nil)

// NewFileStore opens (creating if needed) the store file at path. At most
// one Options value may be given; its Timeout and PollInterval apply.
func NewFileStore(path string, opts ...Options) (*FileStore, error) {
	var o Options
	if len(opts) > 1 {
		return nil, &OpError{Op: "open", Addr: path, Err: fmt.Errorf("NewFileStore takes at most one Options, got %d", len(opts))}
	}
	if len(opts) == 1 {
		o = opts[0]
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, &OpError{Op: "open", Addr: path, Err: err}
	}
	s := &FileStore{path: path, opts: o, f: f, data: make(map[string][]byte)}
	if err := s.locked("open", "", false, func() error { return nil }); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// locked runs fn with the file locked and the log replayed up to its end.
func (s *FileStore) locked(op, key string, exclusive bool, fn func() error) error {
	wrap := func(err error) error { return &OpError{Op: op, Key: key, Addr: s.path, Err: err} }
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return wrap(ErrClosed)
	}
	if err := lockFile(s.f, exclusive); err != nil {
		return wrap(fmt.Errorf("lock: %w", err))
	}
	defer unlockFile(s.f)
	if err := s.catchUp(); err != nil {
		return wrap(err)
	}
	if err := fn(); err != nil {
		return wrap(err)
	}
	return nil
}

// catchUp replays the records appended since the last call.
func (s *FileStore) catchUp() error {
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size < s.off { // the file was replaced or truncated: start over
		s.off = 0
		s.data = make(map[string][]byte)
	}
	if size == s.off {
		return nil
	}
	buf := make([]byte, size-s.off)
	if _, err := s.f.ReadAt(buf, s.off); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	for pos := 0; pos < len(buf); {
		rest := buf[pos:]
		if len(rest) < 4 {
			return fmt.Errorf("%w: truncated record at offset %d", ErrProtocol, s.off+int64(pos))
		}
		n := int(binary.LittleEndian.Uint32(rest))
		if n > len(rest)-4 {
			return fmt.Errorf("%w: truncated record at offset %d", ErrProtocol, s.off+int64(pos))
		}
		m, err := decodeMsg(rest[4 : 4+n])
		if err != nil {
			return fmt.Errorf("record at offset %d: %w", s.off+int64(pos), err)
		}
		switch {
		case m.op == opSet && len(m.args) == 2:
			s.data[string(m.args[0])] = m.args[1]
		case m.op == opDelete && len(m.args) == 1:
			delete(s.data, string(m.args[0]))
		default:
			return fmt.Errorf("%w: bad record %v at offset %d", ErrProtocol, m.op, s.off+int64(pos))
		}
		pos += 4 + n
	}
	s.off = size
	return nil
}

// appendRecord writes one record; the exclusive lock must be held and the
// log replayed, so the record lands at s.off.
func (s *FileStore) appendRecord(m *msg) error {
	b := appendMsg(nil, m)
	if _, err := s.f.Write(b); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	s.off += int64(len(b))
	switch m.op {
	case opSet:
		s.data[string(m.args[0])] = m.args[1]
	case opDelete:
		delete(s.data, string(m.args[0]))
	}
	return nil
}

// poll calls check under a shared lock until it reports done or ctx ends.
func (s *FileStore) poll(ctx context.Context, op, key string, check func() bool) error {
	ctx, cancel := withTimeout(ctx, s.opts.timeout())
	defer cancel()
	var t *time.Timer
	for {
		done := false
		if err := s.locked(op, key, false, func() error { done = check(); return nil }); err != nil {
			return err
		}
		if done {
			return nil
		}
		if t == nil {
			t = time.NewTimer(s.opts.pollInterval())
			defer t.Stop()
		} else {
			t.Reset(s.opts.pollInterval())
		}
		select {
		case <-ctx.Done():
			return &OpError{Op: op, Key: key, Addr: s.path, Err: ctx.Err()}
		case <-t.C:
		}
	}
}

// Set implements Store.
func (s *FileStore) Set(ctx context.Context, key string, value []byte) error {
	if err := ctx.Err(); err != nil {
		return &OpError{Op: "set", Key: key, Addr: s.path, Err: err}
	}
	return s.locked("set", key, true, func() error {
		return s.appendRecord(&msg{op: opSet, args: [][]byte{[]byte(key), bytes.Clone(value)}})
	})
}

// Get implements Store.
func (s *FileStore) Get(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.poll(ctx, "get", key, func() bool {
		var ok bool
		var cur []byte
		cur, ok = s.data[key]
		v = bytes.Clone(cur)
		return ok
	})
	return v, err
}

// Add implements Store.
func (s *FileStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, &OpError{Op: "add", Key: key, Addr: s.path, Err: err}
	}
	var v int64
	err := s.locked("add", key, true, func() error {
		var err error
		if v, err = addCounter(s.data[key], delta); err != nil {
			return err
		}
		return s.appendRecord(&msg{op: opSet, args: [][]byte{[]byte(key), strconv.AppendInt(nil, v, 10)}})
	})
	return v, err
}

// CompareSet implements Store.
func (s *FileStore) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, &OpError{Op: "compareset", Key: key, Addr: s.path, Err: err}
	}
	var cur []byte
	err := s.locked("compareset", key, true, func() error {
		old, ok := s.data[key]
		if (!ok && len(expected) == 0) || (ok && bytes.Equal(old, expected)) {
			cur = bytes.Clone(desired)
			if cur == nil {
				cur = []byte{}
			}
			return s.appendRecord(&msg{op: opSet, args: [][]byte{[]byte(key), cur}})
		}
		cur = bytes.Clone(old)
		return nil
	})
	return cur, err
}

// Wait implements Store.
func (s *FileStore) Wait(ctx context.Context, keys ...string) error {
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	return s.poll(ctx, "wait", key, func() bool {
		for _, k := range keys {
			if _, ok := s.data[k]; !ok {
				return false
			}
		}
		return true
	})
}

// Delete implements Store.
func (s *FileStore) Delete(ctx context.Context, key string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, &OpError{Op: "delete", Key: key, Addr: s.path, Err: err}
	}
	var existed bool
	err := s.locked("delete", key, true, func() error {
		if _, existed = s.data[key]; !existed {
			return nil
		}
		return s.appendRecord(&msg{op: opDelete, args: [][]byte{[]byte(key)}})
	})
	return existed, err
}

// NumKeys implements Store.
func (s *FileStore) NumKeys(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, &OpError{Op: "numkeys", Addr: s.path, Err: err}
	}
	var n int64
	err := s.locked("numkeys", "", false, func() error { n = int64(len(s.data)); return nil })
	return n, err
}

// Close closes the file; it does not remove it.
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.f.Close()
}
