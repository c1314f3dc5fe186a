package sim

import "sync"

// reserved hands out the buffers of a SizeOnly run: one region of address
// space, shared by every rank and every request, grown on demand. Nothing
// reads or writes it.
type reserved struct {
	mu      sync.Mutex
	cur     []byte
	regions [][]byte
}

// get returns n bytes of the region.
func (m *reserved) get(n int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n > len(m.cur) {
		size := max(n, 2*len(m.cur), 1<<20)
		b, err := reserve(size)
		if err != nil {
			panic("sim: reserving address space: " + err.Error())
		}
		m.cur = b
		m.regions = append(m.regions, b)
	}
	return m.cur[:n:n]
}

// free releases every region; nil m is a no-op.
func (m *reserved) free() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.regions {
		release(b)
	}
	m.regions, m.cur = nil, nil
}
