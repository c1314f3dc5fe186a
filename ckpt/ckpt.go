package ckpt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// Comm is what a Store needs of a communicator; *goccl.Comm satisfies it.
//
//   - AllGather gathers every rank's send, in rank order, into recv.
//   - AllToAllSplit sends sendCounts[j] elements of send to rank j and
//     receives recvCounts[j] elements from rank j, in rank order.
//   - Broadcast copies root's buf to every rank.
//
// Each call blocks until this rank's part is done or ctx ends. Buffers are
// []byte.
type Comm interface {
	Rank() int
	Size() int
	AllGather(ctx context.Context, send, recv any) error
	AllToAllSplit(ctx context.Context, send any, sendCounts []int, recv any, recvCounts []int) error
	Broadcast(ctx context.Context, buf any, root int) error
}

// Sentinel errors; test with errors.Is.
var (
	// ErrConfig: the Config does not fit the communicator.
	ErrConfig = errors.New("ckpt: bad config")
	// ErrNoCheckpoint: no generation is held by every surviving rank.
	ErrNoCheckpoint = errors.New("ckpt: no checkpoint")
	// ErrTooManyLost: more ranks lost their memory than there are parity
	// shards.
	ErrTooManyLost = errors.New("ckpt: too many ranks lost")
	// ErrCorrupt: fewer than DataShards intact shards of a state remain, or
	// the rebuilt state does not match its checksum.
	ErrCorrupt = errors.New("ckpt: corrupt checkpoint")
)

// Config sets the code. The zero value means the defaults.
type Config struct {
	// ParityShards (m) is how many ranks may lose their memory at once.
	// Zero means 1 on up to 4 ranks and 2 on more.
	ParityShards int
	// DataShards (k) is how many pieces each state is cut into; any k of
	// the k+m shards rebuild it. Zero means min(4, n-1-m).
	DataShards int
}

// withDefaults fills in zero fields for n ranks and validates the result.
func (cfg Config) withDefaults(n int) (Config, error) {
	if cfg.ParityShards < 0 || cfg.DataShards < 0 {
		return cfg, fmt.Errorf("%w: negative shard count (k=%d, m=%d)", ErrConfig, cfg.DataShards, cfg.ParityShards)
	}
	if cfg.ParityShards == 0 {
		cfg.ParityShards = 1
		if n > 4 {
			cfg.ParityShards = 2
		}
	}
	if cfg.DataShards == 0 {
		cfg.DataShards = min(4, n-1-cfg.ParityShards)
	}
	k, m := cfg.DataShards, cfg.ParityShards
	if k < 1 || k+m > n-1 {
		return cfg, fmt.Errorf("%w: k=%d data + m=%d parity shards must go to %d distinct other ranks, but the communicator has %d ranks (need k >= 1 and k+m <= n-1)",
			ErrConfig, k, m, k+m, n)
	}
	if k+m > 256 {
		return cfg, fmt.Errorf("%w: k+m = %d > 256 shards", ErrConfig, k+m)
	}
	return cfg, nil
}

// Per-owner metadata, gathered to every rank at each Save:
//
//	[0:8]   committed generation of the owner before this save
//	[8:16]  state length in bytes
//	[16:48] sha256 of the state
//	[48:]   sha256 of each of the k+m shards
const (
	offGen    = 0
	offLen    = 8
	offSum    = 16
	offShards = 48
)

// generation is one complete checkpoint as seen by one rank.
type generation struct {
	gen    uint64
	meta   []byte         // n entries of metaSize bytes
	shards map[int][]byte // owner rank -> the shard this rank holds for it
	held   int            // bytes in shards
}

// Store is one rank's part of an erasure-coded checkpoint: the shards it
// keeps for other ranks and every rank's metadata. A Store is not safe for
// concurrent use; its methods are collective and every rank of the
// communicator calls them in the same order.
type Store struct {
	c       Comm
	cfg     Config
	n, rank int
	enc     reedsolomon.Encoder

	cur  *generation // last committed generation
	next *generation // complete here, but the commit vote did not finish
}

// New returns an empty Store for this rank of c. cfg is checked against
// c.Size(): shards go to k+m distinct other ranks, so k+m <= Size()-1.
// A rank that lost its memory makes a new Store and calls Restore.
func New(c Comm, cfg Config) (*Store, error) {
	n := c.Size()
	cfg, err := cfg.withDefaults(n)
	if err != nil {
		return nil, fmt.Errorf("ckpt: new on rank %d: %w", c.Rank(), err)
	}
	enc, err := reedsolomon.New(cfg.DataShards, cfg.ParityShards)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return &Store{c: c, cfg: cfg, n: n, rank: c.Rank(), enc: enc}, nil
}

// Rebind moves s to c, the communicator that replaced s's after a failure:
// typically the one (*goccl.Comm).Readmit returns, where the survivors keep
// their ranks and replacement ranks take the lost ones' places. The shards
// and metadata s holds stay as they are. c must have the size of s's
// communicator and give this rank the same rank, since shards are placed
// by rank; otherwise Rebind returns an error wrapping ErrConfig and s is
// unchanged (a communicator from Shrink, which has fewer ranks, does not
// fit).
//
// Rebind is local: it sends nothing. After it, every rank of c calls
// Restore, the survivors on their rebound Stores and the replacements on
// new ones from New.
func (s *Store) Rebind(c Comm) error {
	if n, r := c.Size(), c.Rank(); n != s.n || r != s.rank {
		return fmt.Errorf("ckpt: rebind rank %d: %w: the new communicator has %d ranks and this is rank %d in it; the store's has %d ranks and this is rank %d",
			s.rank, ErrConfig, n, r, s.n, s.rank)
	}
	s.c = c
	return nil
}

// Config returns the configuration in use, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Generation returns the last committed generation (1 after the first
// Save), or 0 if there is none.
func (s *Store) Generation() uint64 {
	if s.cur == nil {
		return 0
	}
	return s.cur.gen
}

// HeldBytes returns how many bytes of other ranks' shards this rank keeps
// for the committed generation.
func (s *Store) HeldBytes() int {
	if s.cur == nil {
		return 0
	}
	return s.cur.held
}

func (s *Store) metaSize() int { return offShards + 32*(s.cfg.DataShards+s.cfg.ParityShards) }

// shardSize is the size of each shard of a state of l bytes.
func (s *Store) shardSize(l int) int { return (l + s.cfg.DataShards - 1) / s.cfg.DataShards }

// holderIndex returns which shard of owner's state rank h holds, and
// whether it holds one: shard j of owner o lives on rank (o+1+j) mod n.
func (s *Store) holderIndex(owner, h int) (int, bool) {
	j := ((h-owner-1)%s.n + s.n) % s.n
	return j, j < s.cfg.DataShards+s.cfg.ParityShards
}

func entry(meta []byte, owner, size int) []byte { return meta[owner*size : (owner+1)*size] }

func stateLen(e []byte) int { return int(binary.LittleEndian.Uint64(e[offLen:])) }

// Save stores state, erasure coded, in the memory of the other ranks. It is
// collective: every rank calls it with its own state (lengths may differ,
// and may be 0). Save copies state; the caller may change it afterwards.
//
// The new generation replaces the last one only once every rank has
// received all of its shards; if Save fails, the previous generation stays
// the one Restore returns.
func (s *Store) Save(ctx context.Context, state []byte) error {
	if err := s.save(ctx, state, 0); err != nil {
		return fmt.Errorf("ckpt: save rank %d: %w", s.rank, err)
	}
	return nil
}

// save runs the save protocol; gen 0 means the next generation number.
func (s *Store) save(ctx context.Context, state []byte, gen uint64) error {
	n, r := s.n, s.rank
	km := s.cfg.DataShards + s.cfg.ParityShards
	ms := s.metaSize()

	// Encode into a send buffer laid out by destination rank, so that the
	// shards are its consecutive slices.
	size := s.shardSize(len(state))
	send := make([]byte, km*size)
	sendCounts := make([]int, n)
	shards := make([][]byte, km)
	off := 0
	for d := range n {
		if j, ok := s.holderIndex(r, d); ok {
			sendCounts[d] = size
			shards[j] = send[off : off+size : off+size]
			off += size
		}
	}
	if size > 0 {
		rest := state
		for j := range s.cfg.DataShards {
			copy(shards[j], rest) // the tail of the last data shard stays zero
			rest = rest[min(size, len(rest)):]
		}
		if err := s.enc.Encode(shards); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
	}

	// Metadata to every rank.
	mine := make([]byte, ms)
	binary.LittleEndian.PutUint64(mine[offGen:], s.Generation())
	binary.LittleEndian.PutUint64(mine[offLen:], uint64(len(state)))
	sum := sha256.Sum256(state)
	copy(mine[offSum:], sum[:])
	for j, sh := range shards {
		h := sha256.Sum256(sh)
		copy(mine[offShards+32*j:], h[:])
	}
	meta := make([]byte, n*ms)
	if err := s.c.AllGather(ctx, mine, meta); err != nil {
		return fmt.Errorf("exchange metadata: %w", err)
	}

	// A generation whose commit vote was cut short is committed if any
	// rank committed it.
	var maxC uint64
	for o := range n {
		maxC = max(maxC, binary.LittleEndian.Uint64(entry(meta, o, ms)[offGen:]))
	}
	if s.next != nil && s.next.gen == maxC {
		s.cur = s.next
	}
	s.next = nil
	if gen == 0 {
		gen = maxC + 1
	}

	// Shards to their holders.
	recvCounts := make([]int, n)
	total := 0
	for o := range n {
		if _, ok := s.holderIndex(o, r); ok {
			recvCounts[o] = s.shardSize(stateLen(entry(meta, o, ms)))
			total += recvCounts[o]
		}
	}
	recv := make([]byte, total)
	if err := s.c.AllToAllSplit(ctx, send, sendCounts, recv, recvCounts); err != nil {
		return fmt.Errorf("send shards: %w", err)
	}
	pending := &generation{gen: gen, meta: meta, shards: make(map[int][]byte), held: total}
	off = 0
	for o, c := range recvCounts {
		if _, ok := s.holderIndex(o, r); ok {
			pending.shards[o] = recv[off : off+c : off+c]
			off += c
		}
	}

	// Commit: every rank says it has all its shards.
	s.next = pending
	votes := make([]byte, n)
	if err := s.c.AllGather(ctx, []byte{1}, votes); err != nil {
		return fmt.Errorf("commit generation %d: %w", gen, err)
	}
	if i := bytes.IndexByte(votes, 0); i >= 0 {
		s.next = nil
		return fmt.Errorf("commit generation %d: rank %d did not receive its shards", gen, i)
	}
	s.cur, s.next = pending, nil
	return nil
}

// Restore rebuilds, on every rank, the state it passed to the last
// committed Save, from the shards the other ranks hold, and returns it. It
// is collective over the same communicator: the ranks that kept their
// Store (survivors) and the ranks that lost it and call Restore on a new,
// empty Store (replacements, taking the lost ranks' places). Every rank,
// survivor or not, gets back its state as of that generation, so that the
// job can resume from one consistent step.
//
// At most ParityShards ranks may be replacements; with more, Restore
// returns ErrTooManyLost naming them. Shards whose checksum does not match
// are dropped and the state is rebuilt from the others; if fewer than
// DataShards intact ones remain, Restore returns ErrCorrupt.
//
// After a successful Restore the checkpoint is saved again, so that the
// replacements hold shards once more and a further loss of up to
// ParityShards ranks can be survived.
func (s *Store) Restore(ctx context.Context) ([]byte, error) {
	state, err := s.restore(ctx)
	if err != nil {
		return nil, fmt.Errorf("ckpt: restore rank %d: %w", s.rank, err)
	}
	return state, nil
}

func (s *Store) restore(ctx context.Context) ([]byte, error) {
	n, r := s.n, s.rank
	k := s.cfg.DataShards
	km := k + s.cfg.ParityShards
	ms := s.metaSize()

	// Who holds which generations.
	mine := make([]byte, 16)
	if s.cur != nil {
		binary.LittleEndian.PutUint64(mine, s.cur.gen)
	}
	if s.next != nil {
		binary.LittleEndian.PutUint64(mine[8:], s.next.gen)
	}
	all := make([]byte, 16*n)
	if err := s.c.AllGather(ctx, mine, all); err != nil {
		return nil, fmt.Errorf("exchange generations: %w", err)
	}
	held := func(o int) (uint64, uint64) {
		return binary.LittleEndian.Uint64(all[16*o:]), binary.LittleEndian.Uint64(all[16*o+8:])
	}
	var survivors, lost []int
	for o := range n {
		if c, p := held(o); c == 0 && p == 0 {
			lost = append(lost, o)
		} else {
			survivors = append(survivors, o)
		}
	}
	if len(survivors) == 0 {
		return nil, fmt.Errorf("%w: no rank holds one", ErrNoCheckpoint)
	}
	if len(lost) > s.cfg.ParityShards {
		return nil, fmt.Errorf("%w: ranks %v lost their memory, m=%d parity shards survive at most %d", ErrTooManyLost, lost, s.cfg.ParityShards, s.cfg.ParityShards)
	}
	// The newest generation every survivor holds.
	var gen uint64
	c0, p0 := held(survivors[0])
	for _, g := range []uint64{max(c0, p0), min(c0, p0)} {
		ok := g != 0
		for _, o := range survivors {
			if c, p := held(o); c != g && p != g {
				ok = false
			}
		}
		if ok {
			gen = g
			break
		}
	}
	if gen == 0 {
		return nil, fmt.Errorf("%w: the surviving ranks %v hold no common generation", ErrNoCheckpoint, survivors)
	}
	var g *generation
	switch {
	case s.cur != nil && s.cur.gen == gen:
		g = s.cur
	case s.next != nil && s.next.gen == gen:
		g = s.next
	}

	// Metadata from the lowest survivor to the replacements.
	root := survivors[0]
	meta := make([]byte, n*ms)
	if r == root {
		copy(meta, g.meta)
	}
	if err := s.c.Broadcast(ctx, meta, root); err != nil {
		return nil, fmt.Errorf("broadcast metadata from rank %d: %w", root, err)
	}
	alive := make([]bool, n)
	for _, o := range survivors {
		alive[o] = true
	}

	// Every surviving holder sends each owner its shard.
	sendCounts := make([]int, n)
	recvCounts := make([]int, n)
	var send []byte
	mySize := s.shardSize(stateLen(entry(meta, r, ms)))
	for o := range n {
		if _, ok := s.holderIndex(o, r); ok && g != nil {
			sh := g.shards[o]
			sendCounts[o] = len(sh)
			send = append(send, sh...)
		}
		if _, ok := s.holderIndex(r, o); ok && alive[o] {
			recvCounts[o] = mySize
		}
	}
	recv := make([]byte, sum(recvCounts))
	if err := s.c.AllToAllSplit(ctx, send, sendCounts, recv, recvCounts); err != nil {
		return nil, fmt.Errorf("gather shards: %w", err)
	}

	// Rebuild this rank's state.
	shards := make([][]byte, km)
	off := 0
	for h, c := range recvCounts {
		if j, ok := s.holderIndex(r, h); ok && alive[h] {
			shards[j] = recv[off : off+c : off+c]
			off += c
		}
	}
	state, rerr := s.rebuild(entry(meta, r, ms), shards)

	// Everyone rebuilt, or everyone fails.
	vote := []byte{1}
	if rerr != nil {
		vote[0] = 0
	}
	votes := make([]byte, n)
	if err := s.c.AllGather(ctx, vote, votes); err != nil {
		return nil, fmt.Errorf("vote: %w", err)
	}
	if rerr != nil {
		return nil, rerr
	}
	var failed []int
	for o, v := range votes {
		if v == 0 {
			failed = append(failed, o)
		}
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%w: ranks %v could not rebuild their state", ErrCorrupt, failed)
	}

	// Protect the restored generation again.
	s.cur, s.next = g, nil
	if err := s.save(ctx, state, gen); err != nil {
		return nil, fmt.Errorf("save again: %w", err)
	}
	return state, nil
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// rebuild checks each shard against its checksum in e, reconstructs the
// state from the intact ones and checks it.
func (s *Store) rebuild(e []byte, shards [][]byte) ([]byte, error) {
	k := s.cfg.DataShards
	l := stateLen(e)
	var bad, missing []int
	good := 0
	for j, sh := range shards {
		if sh == nil {
			missing = append(missing, j)
			continue
		}
		if h := sha256.Sum256(sh); !bytes.Equal(h[:], e[offShards+32*j:offShards+32*j+32]) {
			bad = append(bad, j)
			shards[j] = nil
			continue
		}
		good++
	}
	if good < k {
		return nil, fmt.Errorf("%w: %d intact shards, need %d (missing %v, checksum mismatch %v)", ErrCorrupt, good, k, missing, bad)
	}
	state := make([]byte, l)
	if l > 0 {
		if err := s.enc.ReconstructData(shards); err != nil {
			return nil, fmt.Errorf("%w: reconstruct: %v", ErrCorrupt, err)
		}
		rest := state
		for j := 0; j < k && len(rest) > 0; j++ {
			rest = rest[copy(rest, shards[j]):]
		}
	}
	if h := sha256.Sum256(state); !bytes.Equal(h[:], e[offSum:offSum+32]) {
		return nil, fmt.Errorf("%w: rebuilt state does not match its checksum", ErrCorrupt)
	}
	return state, nil
}
