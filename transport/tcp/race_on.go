//go:build race

package tcp

import (
	"runtime"
	"unsafe"
)

// raceWrote tells the race detector that the kernel wrote b (a raw
// system call does not).
func raceWrote(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}

// raceRead tells the race detector that the kernel read b.
func raceRead(b []byte) {
	if len(b) > 0 {
		runtime.RaceReadRange(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	}
}
