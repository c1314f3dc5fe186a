#include "textflag.h"

// func PrefetchW(p unsafe.Pointer)
TEXT ·PrefetchW(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX), which the Go assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET

// func Prefetch(p unsafe.Pointer)
TEXT ·Prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET
