package clock

const haveCounter = true

// ticks reads the time-stamp counter (RDTSC).
func ticks() int64
