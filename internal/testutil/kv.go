package testutil

import (
	"context"
	"sync"
)

// KV is an in-memory rendezvous store for ranks in one process (the Set
// and Get of tcp.KV and ib.KV): Get waits until the key is set or ctx
// ends.
type KV struct {
	mu   sync.Mutex
	vals map[string][]byte
	set  map[string]chan struct{} // closed when the key is first set
}

// NewKV returns an empty KV.
func NewKV() *KV {
	return &KV{vals: map[string][]byte{}, set: map[string]chan struct{}{}}
}

func (kv *KV) ch(key string) chan struct{} {
	c := kv.set[key]
	if c == nil {
		c = make(chan struct{})
		kv.set[key] = c
	}
	return c
}

// Set stores a copy of value under key.
func (kv *KV) Set(ctx context.Context, key string, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	_, had := kv.vals[key]
	kv.vals[key] = append([]byte(nil), value...)
	if !had {
		close(kv.ch(key))
	}
	return nil
}

// Get returns the value of key, waiting until it is set.
func (kv *KV) Get(ctx context.Context, key string) ([]byte, error) {
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
