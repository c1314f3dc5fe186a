package scratch

import "testing"

func TestGetPut(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 1000, 1 << 20, 1<<20 + 1} {
		b := Get(n)
		if len(b) != n || (n > 0 && cap(b)&(cap(b)-1) != 0) {
			t.Fatalf("Get(%d): len %d cap %d", n, len(b), cap(b))
		}
		Put(b)
		if c := Get(n); len(c) != n {
			t.Fatalf("Get(%d) after Put: len %d", n, len(c))
		}
	}
	Put(make([]byte, 3)) // not from Get: ignored
}

// A steady Get/Put cycle allocates nothing.
func TestPutAllocatesNothing(t *testing.T) {
	Put(Get(100)) // fill the pools
	if n := testing.AllocsPerRun(100, func() { Put(Get(100)) }); n != 0 {
		t.Fatalf("Get+Put: %v allocations, want 0", n)
	}
}
