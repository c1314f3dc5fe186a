package ib

// SetMaxWrite lowers the most one RDMA WRITE carries, so that tests send
// long messages as several writes; it returns a function that restores it.
func SetMaxWrite(n uint64) (restore func()) {
	old := maxWrite
	maxWrite = n
	return func() { maxWrite = old }
}
