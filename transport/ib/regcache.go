package ib

import (
	"container/list"
	"fmt"
	"sync"
)

// regCache keeps memory regions registered across calls, so that a buffer
// a program reuses (a gradient bucket, a receive buffer) is registered once
// and not on every rendezvous.
//
// An entry holds the buffer's slice, from its first byte to its capacity,
// and the cgo provider pins it while registered: so a registered buffer can
// never be freed, and its address can never be handed to another
// allocation, while the entry lives. That is how the cache stays correct
// when a program drops a buffer: the stale-address hazard of C registration
// caches (free, then malloc returns the same address over other pages)
// cannot arise, because the garbage collector frees nothing the cache
// still references. The cost is that the cache keeps memory alive; it is
// bounded by maxBytes, least recently used entries going first, and
// emptied by Forget and Close. An entry in use by an operation in flight
// is deregistered only when the operation lets go of it.
type regCache struct {
	dev      Device
	maxBytes int64 // < 0: no caching
	mu       sync.Mutex
	byAddr   map[uint64]*regEntry
	lru      list.List // of *regEntry, most recent at the front
	bytes    int64
	stats    CacheStats
}

// CacheStats counts the registration cache's work.
type CacheStats struct {
	Registrations   int64 // ibv_reg_mr calls for user and pooled buffers
	Hits            int64 // lookups served by a cached region
	Deregistrations int64
	Bytes           int64 // bytes registered through the cache now
}

type regEntry struct {
	buf     []byte // [addr, addr+cap)
	addr    uint64
	mr      MR
	refs    int
	elem    *list.Element // nil once out of the cache
	evicted bool
}

const regAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead

func newRegCache(dev Device, maxBytes int64) *regCache {
	return &regCache{dev: dev, maxBytes: maxBytes, byAddr: map[uint64]*regEntry{}}
}

// get returns a registration covering b (which must not be empty), taking
// a reference that put gives back.
func (c *regCache) get(b []byte) (*regEntry, error) {
	b = b[:cap(b)]
	addr := AddrOf(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byAddr[addr]; e != nil {
		if len(e.buf) >= len(b) {
			e.refs++
			c.lru.MoveToFront(e.elem)
			c.stats.Hits++
			return e, nil
		}
		c.drop(e) // a longer buffer at the same address
	}
	mr, err := c.dev.RegMR(b, regAccess)
	if err != nil {
		return nil, fmt.Errorf("ib: register %d bytes: %w", len(b), err)
	}
	c.stats.Registrations++
	e := &regEntry{buf: b, addr: addr, mr: mr, refs: 1}
	if c.maxBytes < 0 {
		e.evicted = true // used once, deregistered by put
		return e, nil
	}
	e.elem = c.lru.PushFront(e)
	c.byAddr[addr] = e
	c.bytes += int64(len(b))
	c.stats.Bytes = c.bytes
	for c.bytes > c.maxBytes && c.lru.Len() > 1 {
		c.drop(c.lru.Back().Value.(*regEntry))
	}
	return e, nil
}

// put lets go of a reference taken by get.
func (c *regCache) put(e *regEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.evicted {
		c.dereg(e)
	}
}

// drop takes e out of the cache; it is deregistered now or when its last
// user lets go. c.mu is held.
func (c *regCache) drop(e *regEntry) {
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
		delete(c.byAddr, e.addr)
		c.bytes -= int64(len(e.buf))
		c.stats.Bytes = c.bytes
	}
	e.evicted = true
	if e.refs == 0 {
		c.dereg(e)
	}
}

func (c *regCache) dereg(e *regEntry) {
	if e.mr == nil {
		return
	}
	e.mr.Dereg() // the region goes either way; nothing to tell the caller
	e.mr = nil
	e.buf = nil
	c.stats.Deregistrations++
}

// forget drops the registration of the buffer starting at b's first byte.
func (c *regCache) forget(b []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byAddr[AddrOf(b)]
	if e == nil {
		return false
	}
	c.drop(e)
	return true
}

// close drops every entry; the caller has made sure no operation is in
// flight.
func (c *regCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.lru.Len() > 0 {
		e := c.lru.Back().Value.(*regEntry)
		e.refs = 0
		c.drop(e)
	}
}

func (c *regCache) snapshot() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
