package onebit

// WireBytes returns the bytes one rank sends in one CompressedAllReduce of n
// float32 elements over worldSize ranks, with m = PaddedLen(n, worldSize):
//
//	2(p-1)/p * m/8   sign bits: the all-to-all, then the all-gather of server signs
//	+ 8(p-1)         two all-gathers of one float32 scale
//
// counting an all-gather as p-1 copies of this rank's part leaving it.
func WireBytes(n, worldSize int) int64 {
	p := int64(worldSize)
	m := int64(PaddedLen(n, worldSize))
	if m == 0 {
		return 0
	}
	return 2*(p-1)*(m/8)/p + 8*(p-1)
}

// RingAllReduceBytes returns the bytes one rank sends in a ring allreduce of
// n float32 elements over worldSize ranks, 2(p-1)/p * 4n (rounded down), the
// figure WireBytes is compared with: about 32 times as many.
func RingAllReduceBytes(n, worldSize int) int64 {
	p := int64(worldSize)
	return 2 * (p - 1) * 4 * int64(n) / p
}
