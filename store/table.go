package store

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
)

// table is the in-memory state of a server: the keys and, for each missing
// key somebody waits for, a channel closed when the key appears.
type table struct {
	mu      sync.Mutex
	data    map[string][]byte
	waiters map[string]chan struct{}
}

func newTable() *table {
	return &table{data: make(map[string][]byte), waiters: make(map[string]chan struct{})}
}

// setLocked stores value and wakes the key's waiters. t.mu must be held.
func (t *table) setLocked(key string, value []byte) {
	t.data[key] = value
	if ch, ok := t.waiters[key]; ok {
		close(ch)
		delete(t.waiters, key)
	}
}

func (t *table) set(key string, value []byte) {
	t.mu.Lock()
	t.setLocked(key, value)
	t.mu.Unlock()
}

func (t *table) add(key string, delta int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, err := addCounter(t.data[key], delta)
	if err != nil {
		return 0, err
	}
	t.setLocked(key, strconv.AppendInt(nil, v, 10))
	return v, nil
}

// addCounter parses old (nil counts as 0) and adds delta.
func addCounter(old []byte, delta int64) (int64, error) {
	if old == nil {
		return delta, nil
	}
	v, err := strconv.ParseInt(string(old), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %.32q", ErrNotInteger, old)
	}
	return v + delta, nil
}

// compareSet implements Store.CompareSet; present reports whether the key
// exists after the call.
func (t *table) compareSet(key string, expected, desired []byte) (cur []byte, present bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.data[key]
	if (!ok && len(expected) == 0) || (ok && bytes.Equal(old, expected)) {
		t.setLocked(key, desired)
		return desired, true
	}
	return old, ok
}

func (t *table) del(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.data[key]
	delete(t.data, key)
	return ok
}

// delIf deletes key if it still holds value.
func (t *table) delIf(key string, value []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.data[key]; ok && bytes.Equal(old, value) {
		delete(t.data, key)
	}
}

func (t *table) numKeys() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int64(len(t.data))
}

// wait blocks until every key exists or ctx ends, and returns the value of
// the first key.
func (t *table) wait(ctx context.Context, keys ...string) ([]byte, error) {
	for {
		t.mu.Lock()
		var missing chan struct{}
		for _, k := range keys {
			if _, ok := t.data[k]; !ok {
				missing = t.waiters[k]
				if missing == nil {
					missing = make(chan struct{})
					t.waiters[k] = missing
				}
				break
			}
		}
		if missing == nil {
			var v []byte
			if len(keys) > 0 {
				v = t.data[keys[0]]
			}
			t.mu.Unlock()
			return v, nil
		}
		t.mu.Unlock()
		select {
		case <-missing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
