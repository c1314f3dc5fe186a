package tcp_test

import (
	"context"
	"sync"
)

// memKV is an in-memory KV for tests: Get waits until the key is set.
type memKV struct {
	mu   sync.Mutex
	vals map[string][]byte
	set  map[string]chan struct{} // closed when the key is set
}

func newMemKV() *memKV {
	return &memKV{vals: map[string][]byte{}, set: map[string]chan struct{}{}}
}

func (kv *memKV) ch(key string) chan struct{} {
	c := kv.set[key]
	if c == nil {
		c = make(chan struct{})
		kv.set[key] = c
	}
	return c
}

func (kv *memKV) Set(ctx context.Context, key string, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	_, had := kv.vals[key]
	kv.vals[key] = append([]byte(nil), value...)
	if !had {
		close(kv.ch(key))
	}
	return nil
}

func (kv *memKV) Get(ctx context.Context, key string) ([]byte, error) {
	kv.mu.Lock()
	c := kv.ch(key)
	kv.mu.Unlock()
	select {
	case <-c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return kv.vals[key], nil
}
