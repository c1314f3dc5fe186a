package ckpt

// CorruptShard flips a byte of the shard s holds for owner in its committed
// generation, as a memory fault would, and reports whether it held one.
func CorruptShard(s *Store, owner int) bool {
	if s.cur == nil {
		return false
	}
	sh := s.cur.shards[owner]
	if len(sh) == 0 {
		return false
	}
	sh[len(sh)/2] ^= 0x5a
	return true
}

// HolderOf returns the rank that holds shard j of owner's state.
func HolderOf(s *Store, owner, j int) int { return (owner + 1 + j) % s.n }

// KeptStore returns the Store that the package-level functions keep for c,
// or nil.
func KeptStore(c Comm) *Store {
	kept.Lock()
	defer kept.Unlock()
	return kept.m[c]
}

// KeptStores returns how many Stores the package-level functions keep.
func KeptStores() int {
	kept.Lock()
	defer kept.Unlock()
	return len(kept.m)
}
