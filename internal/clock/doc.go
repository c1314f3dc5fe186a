// Package clock is a cheap clock for records that are written on every
// call and read rarely: the flight recorder's times.
//
// Now reads the processor's time-stamp counter where the kernel keeps its
// own clock on that counter (amd64 with the clock source "tsc", which
// Linux chooses only where the counter runs at a constant rate and in step
// on every CPU): 12 ns here, where time.Now takes 33 and time.Since 33,
// most of it the call into the kernel's clock code. Elsewhere it reads the
// monotonic clock. A reading, a Stamp, becomes a time.Time only when the
// record is read: Calibrate measures the counter's rate against the
// monotonic clock since the process started, and Scale.Time converts.
package clock
